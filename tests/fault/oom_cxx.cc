// Out of memory for real in C++: under an address-space limit, new (std::nothrow)
// from several threads until nullptr, then plain new must throw std::bad_alloc (not
// abort, not return null); after freeing half, new works again and every object
// still holds its value. Mode "hard": hakmem's hard limit (limit.hard) instead.
#include <new>
#include <thread>
#include <vector>

#include <sys/mman.h>

#include "test_util.h"

namespace {
constexpr int kThreads = 4;
constexpr size_t kMax = 1 << 18;

struct Obj {
  uint64_t v[64]; // 512 bytes: a small class
};

void fill(size_t limit_objs, Obj **slots, size_t *count, bool *threw) {
  size_t n = 0;
  for (; n < limit_objs; n++) {
    Obj *o = new (std::nothrow) Obj;
    if (o == nullptr) break;
    o->v[0] = o->v[63] = tu_mix64(reinterpret_cast<uintptr_t>(o));
    slots[n] = o;
  }
  try {
    Obj *o = new Obj[4096]; // 2 MiB: more than is left
    delete[] o;
    *threw = false;
  } catch (const std::bad_alloc &) {
    *threw = true;
  }
  *count = n;
}
} // namespace

int main(int argc, char **argv) {
  tu_seed(argc, argv);
  size_t limit_mib = tu_arg_u64(argc, argv, 2, 256);
  bool hard = argc > 3 && strcmp(argv[3], "hard") == 0;
  Obj **slots[kThreads];
  for (auto &s : slots) {
    s = static_cast<Obj **>(mmap(nullptr, kMax * sizeof(Obj *), PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    REQUIRE(s != MAP_FAILED, "mmap");
  }
  delete new int; // hakmem set up before the limit
  std::vector<std::thread> ts;
  ts.reserve(kThreads);
  uint64_t hard_limit = 0, refused = 0;
  if (hard) {
    REQUIRE(hak_stats_get("limit.committed", &hard_limit) == 0, "limit.committed");
    hard_limit += static_cast<uint64_t>(limit_mib) << 20;
    REQUIRE(hak_ctl_set("limit.hard", &hard_limit, 8) == 0, "limit.hard");
  } else {
    REQUIRE(tu_limit_address_space(limit_mib << 20), "setrlimit");
  }
  size_t counts[kThreads];
  bool threw[kThreads];
  for (int i = 0; i < kThreads; i++) ts.emplace_back(fill, kMax, slots[i], &counts[i], &threw[i]);
  for (auto &t : ts) t.join();
  size_t total = 0, again = 0;
  for (int i = 0; i < kThreads; i++) {
    total += counts[i];
    CHECK(counts[i] < kMax, "thread %d: new (nothrow) never returned null", i);
    CHECK(threw[i], "thread %d: new did not throw std::bad_alloc out of memory", i);
    for (size_t k = 0; k < counts[i]; k += 2) {
      delete slots[i][k];
      slots[i][k] = nullptr;
    }
  }
  for (int i = 0; i < kThreads; i++) {
    for (size_t k = 0; k < counts[i]; k += 2) {
      Obj *o = new (std::nothrow) Obj;
      if (o == nullptr) break;
      o->v[0] = o->v[63] = tu_mix64(reinterpret_cast<uintptr_t>(o));
      slots[i][k] = o;
      again++;
    }
  }
  CHECK(again > 0, "nothing could be allocated after freeing half");
  if (hard) {
    uint64_t committed = 0;
    REQUIRE(
        hak_stats_get("limit.committed", &committed) == 0 && hak_stats_get("limit.refused", &refused) == 0,
        "limit figures");
    CHECK(committed <= hard_limit + (64 << 10), "%" PRIu64 " bytes committed past the hard limit %" PRIu64,
          committed, hard_limit);
    CHECK(refused > 0, "the nulls were not the hard limit's");
  }
  for (int i = 0; i < kThreads; i++)
    for (size_t k = 0; k < counts[i]; k++) {
      Obj *o = slots[i][k];
      if (o == nullptr) continue;
      uint64_t want = tu_mix64(reinterpret_cast<uintptr_t>(o));
      CHECK(o->v[0] == want && o->v[63] == want, "object %p changed", static_cast<void *>(o));
      delete o;
    }
  printf("new (nothrow): %zu objects until null, bad_alloc thrown in every thread, %zu again\n", total,
         again);
  return tu_finish("oom_cxx");
}
