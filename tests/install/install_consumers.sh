#!/bin/sh
# The README's install, preload and link commands, run as written with a scratch prefix
# in place of theirs: `make install PREFIX=...` (and with DESTDIR, a staged install that
# must land under it), a program preloaded from the prefix, the consumer program built
# with pkg-config (with the README's rpath) and with CMake's find_package(hakmem), each
# run without LD_LIBRARY_PATH; then the gdb script where gdb auto-loads it.
# With --installed LIBDIR, the same checks (from the preload on) against files a package
# manager installed under /usr (the Debian packages: .ci/debian).
# usage: install_consumers.sh SOURCE_DIR BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR
#        install_consumers.sh --installed LIBDIR CONSUMER_SOURCE_DIR WORK_DIR
set -eu
fail() { echo "FAIL: $*"; exit 1; }
unset LD_LIBRARY_PATH LD_PRELOAD || true
if [ "$1" = --installed ]; then
  libdir=$2 src=$3 work=$4 prefix=/usr
  lib=$libdir/libhakmem.so
  [ -f "$lib" ] || fail "no $lib installed"
  rm -rf "$work"
  mkdir -p "$work"
else
top=$1 build=$2 src=$3 work=$4
rm -rf "$work"
mkdir -p "$work/builds"
prefix=$work/prefix

# The Makefile's install rule against this build: BUILD/release is this build directory,
# and `-o release` keeps make from configuring or building it again.
ln -s "$build" "$work/builds/release"
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -C "$top" -o release BUILD="$work/builds" "$@" install; }
command -v make >/dev/null 2>&1 || fail "make is not installed (build-essential): the README's install command needs it"
mk PREFIX="$prefix" DESTDIR="$work/stage" >"$work/install-staged.log" 2>&1 ||
  { cat "$work/install-staged.log"; fail "make install DESTDIR=... failed"; }
[ -n "$(find "$work/stage$prefix" -name 'libhakmem.so*' 2>/dev/null)" ] ||
  fail "make install DESTDIR=$work/stage put no library under $work/stage$prefix"
[ ! -e "$prefix" ] || fail "make install DESTDIR=... wrote into $prefix itself"
echo "ok: make install PREFIX=... DESTDIR=... stages under DESTDIR"
mk PREFIX="$prefix" >"$work/install.log" 2>&1 || { cat "$work/install.log"; fail "make install PREFIX=... failed"; }
lib=$(find "$prefix" -name 'libhakmem.so' | head -n 1)
[ -n "$lib" ] || fail "make install PREFIX=$prefix put no libhakmem.so there"
libdir=$(dirname "$lib")
[ "$libdir" = "$prefix/lib" ] || echo "note: the library went to $libdir, not PREFIX/lib as the README says"
[ -f "$prefix/share/doc/hakmem/LICENSE" ] || fail "no LICENSE in $prefix/share/doc/hakmem"
echo "ok: make install PREFIX=$prefix"
fi

# Preloaded from the prefix: the report at exit shows hakmem served the program. (Not the
# UBSan build's library, which would bring the sanitizer's runtime into the program: its
# tests leave preloading out, as `make test-ubsan` does.)
preload_progs="python3 perl"
if ldd "$lib" 2>/dev/null | grep -q libubsan; then
  echo "note: a UBSan build: the preload from the prefix is not run"; preload_progs=""
fi
for prog in $preload_progs; do
  command -v $prog >/dev/null 2>&1 || continue
  case $prog in python3) args="-c pass" ;; perl) args="-e 1" ;; esac
  err=$(HAKMEM_STATS=1 LD_PRELOAD="$libdir/libhakmem.so" $prog $args 2>&1 >/dev/null)
  case $err in
    *"hakmem stats (pid "*) echo "ok: HAKMEM_STATS=1 LD_PRELOAD=$libdir/libhakmem.so $prog $args" ;;
    *) fail "preloading $libdir/libhakmem.so into $prog gave no report: $err" ;;
  esac
  break
done

run() { # program: must print ok, with no LD_LIBRARY_PATH
  out=$("$@") || fail "$* exited with $?"
  [ "$out" = ok ] || fail "$* printed '$out'"
  echo "ok: $* (no LD_LIBRARY_PATH)"
}

if command -v pkg-config >/dev/null 2>&1; then
  export PKG_CONFIG_PATH="$libdir/pkgconfig"
  ${CC:-cc} "$src/consumer.c" -o "$work/pc_consumer" $(pkg-config --cflags --libs hakmem) \
    -Wl,-rpath,"$(pkg-config --variable=libdir hakmem)"
  run "$work/pc_consumer"
  unset PKG_CONFIG_PATH
else
  echo "pkg-config not installed: the .pc file is not checked"
fi

cmake -S "$src" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log"
cmake --build "$work/cmake" >"$work/build.log"
run "$work/cmake/consumer"
if [ -x "$work/cmake/consumer_secure" ]; then run "$work/cmake/consumer_secure"; fi

# gdb's commands, installed where gdb auto-loads them for the library: under
# share/gdb/auto-load, the library's path plus -gdb.py (docs/debugging.md).
real=$(readlink -f "$libdir/libhakmem.so")
autoload=$prefix/share/gdb/auto-load$libdir/$(basename "$real")-gdb.py
[ -f "$autoload" ] || fail "no gdb script at $autoload"
if command -v gdb >/dev/null 2>&1; then
  out=$(env -u DEBUGINFOD_URLS gdb -batch -nx -iex "add-auto-load-scripts-directory $prefix/share/gdb/auto-load" \
        -iex "add-auto-load-safe-path $prefix" -ex 'help hakmem heap' "$libdir/libhakmem.so.0" 2>&1)
  case $out in
    *"Live blocks"*) echo "ok: gdb auto-loads $autoload" ;;
    *) echo "FAIL: gdb did not auto-load $autoload:"; echo "$out"; exit 1 ;;
  esac
else
  echo "ok: $autoload (gdb not installed: auto-loading is not checked)"
fi
