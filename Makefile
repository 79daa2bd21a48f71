# Convenience front end over CMake. `make bench` is the main job; `make test` runs every
# test in the release, debug (invariant checks) and sanitizer (UBSan, plus the core under
# ThreadSanitizer for the tsan_* stress tests) builds.
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE   ?= cmake
GEN     := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
PYTHON  ?= python3
# `make install PREFIX=DIR`, and DESTDIR for a staged install (packages): files land in
# $(DESTDIR)$(PREFIX), and are made to work from $(PREFIX).
PREFIX  ?= /usr/local
DESTDIR ?=

.PHONY: fuzz fault-sweep all release debug ubsan secure test test-release test-debug test-ubsan cross-aarch64 bench bench-full bench-programs bench-hardened perfcheck perfcheck-update install clean

all: release

release:
	$(CMAKE) -S . -B $(BUILD)/release $(GEN) -DCMAKE_BUILD_TYPE=Release -DHAKMEM_SECURE=ON 
	$(CMAKE) --build $(BUILD)/release -j $(JOBS)

debug:
	$(CMAKE) -S . -B $(BUILD)/debug $(GEN) -DCMAKE_BUILD_TYPE=Debug -DHAKMEM_SECURE=ON
	$(CMAKE) --build $(BUILD)/debug -j $(JOBS)

ubsan:
	$(CMAKE) -S . -B $(BUILD)/ubsan $(GEN) -DCMAKE_BUILD_TYPE=Debug -DHAKMEM_UBSAN=ON -DHAKMEM_TSAN=ON -DHAKMEM_BUILD_BENCH=OFF
	$(CMAKE) --build $(BUILD)/ubsan -j $(JOBS)

test-release: release
	cd $(BUILD)/release && ctest -j $(JOBS) --output-on-failure --timeout 600

test-debug: debug
	cd $(BUILD)/debug && ctest -j $(JOBS) --output-on-failure --timeout 600 -LE preload

test-ubsan: ubsan
	cd $(BUILD)/ubsan && ctest -j $(JOBS) --output-on-failure --timeout 600 -LE preload

# Every build is tried even when one fails; one summary at the end says what failed where.
TEST_BUILDS ?= release debug ubsan
test:
	@MAKE="$(MAKE)" BUILD="$(BUILD)" sh tools/test_all.sh $(TEST_BUILDS)

# The API fuzzer (tests/fuzz): the library's sources under clang's libFuzzer, Debug
# build (invariant walks), FUZZ_SECONDS of fuzzing from the committed corpus, then the
# corpus and the regression inputs replayed by ctest. New inputs go to build/fuzz/corpus.
CLANG ?= $(shell command -v clang-19 || command -v clang)
FUZZ_SECONDS ?= 120
fuzz:
	CC=$(CLANG) CXX=$(subst clang,clang++,$(CLANG)) $(CMAKE) -S . -B $(BUILD)/fuzz $(GEN) \
	  -DCMAKE_BUILD_TYPE=Debug -DHAKMEM_FUZZ=ON -DHAKMEM_BUILD_BENCH=OFF
	$(CMAKE) --build $(BUILD)/fuzz -j $(JOBS) --target fuzz_api
	mkdir -p $(BUILD)/fuzz/corpus $(BUILD)/fuzz/crashes
	$(BUILD)/fuzz/tests/fuzz/fuzz_api -max_total_time=$(FUZZ_SECONDS) -max_len=512 -len_control=0 \
	  -seed=1 -print_final_stats=1 -artifact_prefix=$(BUILD)/fuzz/crashes/ \
	  $(BUILD)/fuzz/corpus tests/fuzz/corpus tests/fuzz/regressions
	cd $(BUILD)/fuzz && ctest --output-on-failure -L fuzz

# Portability: cross-built for 64-bit Arm with warnings as errors, tests under qemu-user
# (see .ci/aarch64 for the packages it needs and the tests it leaves out).
cross-aarch64:
	BUILD=$(BUILD) JOBS=$(JOBS) .ci/aarch64

bench: release
	$(PYTHON) bench/harness/run.py --quick --hakmem $(BUILD)/release/libhakmem.so --out bench-results/quick

bench-full: release
	$(PYTHON) bench/harness/run.py --full --hakmem $(BUILD)/release/libhakmem.so \
	  --lib hakmem-secure=$(BUILD)/release/libhakmem-secure.so --out bench-results/full

# The real programs alone (Lua, Python, Perl, Redis, SQLite, git), full size, and their
# cachegrind pass.
bench-programs: release
	$(PYTHON) bench/harness/run.py --full --programs-only --hakmem $(BUILD)/release/libhakmem.so \
	  --out bench-results/programs

# The hardened build against the allocators picked for hardening: glibc and scudo
# (Debian's libclang-rt-19-dev; skipped with a note when missing). ROUNDS=N for more.
ROUNDS ?= 5
comma := ,
# HARDENED_MALLOC_SRC=DIR (a hardened_malloc checkout) adds its two variants.
HM_LIBS = $(if $(HARDENED_MALLOC_SRC),$(shell $(PYTHON) bench/harness/hardened_malloc.py --src $(HARDENED_MALLOC_SRC)))
bench-hardened: release
	$(PYTHON) bench/harness/run.py --quick --no-programs --rounds $(ROUNDS) \
	  --allocators hakmem-secure,glibc,scudo$(if $(HM_LIBS),$(comma)hardened_malloc$(comma)hardened_malloc-light) \
	  --lib hakmem-secure=$(BUILD)/release/libhakmem-secure.so $(HM_LIBS) --out bench-results/hardened

perfcheck: release
	$(PYTHON) bench/perfcheck.py --hakmem $(BUILD)/release/libhakmem.so --bin $(BUILD)/release/bench

perfcheck-update: release
	$(PYTHON) bench/perfcheck.py --hakmem $(BUILD)/release/libhakmem.so --bin $(BUILD)/release/bench --update

install: release
	DESTDIR="$(DESTDIR)" $(CMAKE) --install $(BUILD)/release --prefix "$(PREFIX)"

clean:
	rm -rf $(BUILD)
