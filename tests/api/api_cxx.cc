// api_cxx: the C++ allocation operators in all their forms: plain, array, nothrow, sized
// and align_val_t; std::bad_alloc on impossible sizes; std::set_new_handler.
// Usage: api_cxx [seed]
#include <malloc.h>

#include <cstdint>
#include <new>

#include "test_util.h"

namespace {

constexpr size_t MiB = size_t(1) << 20;
uint64_t g_seed;

// Sizes no allocator can satisfy.
const size_t impossible[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX / 2 + 1, size_t(PTRDIFF_MAX)};

// Checks that p is a usable block of n bytes with alignment a, from the same heap as
// malloc, and that a pattern written over it survives.
void check_block(const char *what, void *p, size_t n, size_t a) {
  REQUIRE(p != nullptr, "%s(%zu) returned nullptr", what, n);
  CHECK(tu_aligned(p, a), "%s(%zu) = %p not %zu-aligned", what, n, p, a);
  size_t usable = malloc_usable_size(p);
  CHECK(usable >= n, "%s(%zu) = %p: malloc_usable_size %zu", what, n, p, usable);
  tu_fill_here(p, n, g_seed + n);
  tu_verify_here(what, p, n, g_seed + n);
}

struct Counted {
  static int live;
  uint64_t v[3];
  Counted() : v{1, 2, 3} { live++; }
  ~Counted() { live--; }
};
int Counted::live = 0;

struct alignas(64) A64 {
  char c[100];
};
struct alignas(4096) A4096 {
  char c[10];
};

void test_plain_forms() {
  size_t default_align = __STDCPP_DEFAULT_NEW_ALIGNMENT__;
  void *zero[16];
  for (int i = 0; i < 16; i++) {
    zero[i] = ::operator new(0);
    REQUIRE(zero[i] != nullptr, "operator new(0) returned nullptr");
    for (int j = 0; j < i; j++) CHECK(zero[i] != zero[j], "operator new(0) returned %p twice", zero[i]);
  }
  for (int i = 0; i < 16; i++) ::operator delete(zero[i]);

  for (size_t n = 1; n < 64 * MiB; n = n < 256 ? n + 1 : n * 3 / 2) {
    size_t a = n < default_align ? 8 : default_align;
    void *p = ::operator new(n);
    check_block("operator new", p, n, a);
    ::operator delete(p);
    p = ::operator new[](n);
    check_block("operator new[]", p, n, a);
    ::operator delete[](p);
    p = ::operator new(n);
    check_block("operator new (sized delete)", p, n, a);
    ::operator delete(p, n);
    p = ::operator new[](n);
    check_block("operator new[] (sized delete)", p, n, a);
    ::operator delete[](p, n);
    p = ::operator new(n, std::nothrow);
    check_block("operator new(nothrow)", p, n, a);
    ::operator delete(p, std::nothrow);
    p = ::operator new[](n, std::nothrow);
    check_block("operator new[](nothrow)", p, n, a);
    ::operator delete[](p, std::nothrow);
  }

  int *i = new int(42);
  CHECK(*i == 42, "new int(42) holds %d", *i);
  delete i;
  Counted *c = new Counted[1000];
  CHECK(Counted::live == 1000 && c[999].v[2] == 3, "new Counted[1000]: live %d", Counted::live);
  delete[] c;
  CHECK(Counted::live == 0, "delete[] left %d objects live", Counted::live);
  delete static_cast<int *>(nullptr);
  delete[] static_cast<Counted *>(nullptr);
  ::operator delete(nullptr);
  ::operator delete[](nullptr);
}

// Over-aligned types pick the align_val_t forms themselves.
template <typename T>
void check_overaligned(const char *name) {
  T *x = new T;
  CHECK(tu_aligned(x, alignof(T)), "new %s = %p", name, static_cast<void *>(x));
  delete x;
  T *xs = new T[33];
  CHECK(tu_aligned(xs, alignof(T)), "new %s[33] = %p", name, static_cast<void *>(xs));
  delete[] xs;
  T *z = new (std::nothrow) T[3];
  CHECK(z && tu_aligned(z, alignof(T)), "new (nothrow) %s[3] = %p", name, static_cast<void *>(z));
  delete[] z;
}

void test_aligned_forms() {
  const size_t sizes[] = {1, 8, 63, 64, 65, 100, 4095, 4096, 4097, 100000, 3 * MiB + 1};
  for (size_t a = 16; a <= 2 * MiB; a *= 2) {
    std::align_val_t al{a};
    for (size_t n : sizes) {
      void *p = ::operator new(n, al);
      check_block("operator new(align)", p, n, a);
      ::operator delete(p, al);
      p = ::operator new[](n, al);
      check_block("operator new[](align)", p, n, a);
      ::operator delete[](p, al);
      p = ::operator new(n, al);
      check_block("operator new(align) (sized delete)", p, n, a);
      ::operator delete(p, n, al);
      p = ::operator new[](n, al);
      check_block("operator new[](align) (sized delete)", p, n, a);
      ::operator delete[](p, n, al);
      p = ::operator new(n, al, std::nothrow);
      check_block("operator new(align, nothrow)", p, n, a);
      ::operator delete(p, al, std::nothrow);
      p = ::operator new[](n, al, std::nothrow);
      check_block("operator new[](align, nothrow)", p, n, a);
      ::operator delete[](p, al, std::nothrow);
    }
  }
  check_overaligned<A64>("A64");
  check_overaligned<A4096>("A4096");
}

// Calls fn(n) and reports whether it threw std::bad_alloc.
template <typename Fn>
bool throws_bad_alloc(Fn fn, size_t n) {
  try {
    tu_hide(fn(n)); // a block here is a failure; it is left alone, not freed
    return false;
  } catch (const std::bad_alloc &) {
    return true;
  }
}

void test_impossible_sizes() {
  std::set_new_handler(nullptr);
  const std::align_val_t al64{64}, al4k{4096};
  for (size_t s : impossible) {
    size_t n = tu_opaque(s);
    CHECK(throws_bad_alloc([](size_t k) { return ::operator new(k); }, n),
          "operator new(%#zx) did not throw bad_alloc", n);
    CHECK(throws_bad_alloc([](size_t k) { return ::operator new[](k); }, n),
          "operator new[](%#zx) did not throw bad_alloc", n);
    void *p = ::operator new(n, std::nothrow);
    CHECK(p == nullptr, "operator new(%#zx, nothrow) = %p", n, p);
    p = ::operator new[](n, std::nothrow);
    CHECK(p == nullptr, "operator new[](%#zx, nothrow) = %p", n, p);
    // libstdc++'s own aligned forms round the size up to the alignment without an
    // overflow check, so sizes near SIZE_MAX wrap to a tiny block; hakmem's must not.
    if (n > SIZE_MAX - 4096 && !tu_have_hakmem()) continue;
    CHECK(throws_bad_alloc([al64](size_t k) { return ::operator new(k, al64); }, n),
          "operator new(%#zx, align 64) did not throw bad_alloc", n);
    CHECK(throws_bad_alloc([al4k](size_t k) { return ::operator new[](k, al4k); }, n),
          "operator new[](%#zx, align 4096) did not throw bad_alloc", n);
    p = ::operator new(n, al64, std::nothrow);
    CHECK(p == nullptr, "operator new(%#zx, align 64, nothrow) = %p", n, p);
    p = ::operator new[](n, al4k, std::nothrow);
    CHECK(p == nullptr, "operator new[](%#zx, align 4096, nothrow) = %p", n, p);
  }
  // The array new-expression with a run-time count (the compiler's own overflow check,
  // then the operator).
  size_t count = tu_opaque(SIZE_MAX / 8);
  bool threw = false;
  try {
    Counted *c = new Counted[count];
    delete[] c;
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw, "new Counted[SIZE_MAX / 8] did not throw bad_alloc");
}

// ---- new_handler ----

int g_handler_calls;
void *g_reserve;

// Gives up: uninstalls itself, so operator new throws (or returns nullptr for nothrow).
void handler_give_up() {
  g_handler_calls++;
  std::set_new_handler(nullptr);
}

struct handler_error : std::bad_alloc {
  const char *what() const noexcept override { return "handler_error"; }
};
void handler_throw() {
  g_handler_calls++;
  throw handler_error();
}

// Frees the reserve so the retry can succeed; gives up if there is nothing left.
void handler_free_reserve() {
  g_handler_calls++;
  if (g_reserve) {
    ::operator delete(g_reserve);
    g_reserve = nullptr;
  } else {
    std::set_new_handler(nullptr);
  }
}

void test_new_handler() {
  size_t huge = tu_opaque(SIZE_MAX / 2 + 1);
  const std::align_val_t al{64};

  g_handler_calls = 0;
  std::set_new_handler(handler_give_up);
  CHECK(throws_bad_alloc([](size_t k) { return ::operator new(k); }, huge) && g_handler_calls == 1,
        "operator new with a giving-up handler: handler called %d times", g_handler_calls);

  g_handler_calls = 0;
  std::set_new_handler(handler_give_up);
  void *p = ::operator new[](huge, std::nothrow);
  CHECK(p == nullptr && g_handler_calls == 1,
        "operator new[](nothrow) with a giving-up handler: %p, handler called %d times", p, g_handler_calls);

  g_handler_calls = 0;
  std::set_new_handler(handler_give_up);
  CHECK(throws_bad_alloc([al](size_t k) { return ::operator new(k, al); }, huge) && g_handler_calls == 1,
        "operator new(align 64) with a giving-up handler: handler called %d times", g_handler_calls);

  g_handler_calls = 0;
  std::set_new_handler(handler_throw);
  bool caught = false;
  try {
    p = ::operator new(huge);
    ::operator delete(p);
  } catch (const handler_error &) {
    caught = true;
  }
  CHECK(caught && g_handler_calls == 1, "handler's exception: caught %d, handler called %d times", caught,
        g_handler_calls);
  std::set_new_handler(nullptr);
}

// In a child whose address space is limited: the first try fails, the handler frees a
// reserve of the same size, and the retry succeeds.
int handler_retry_child(void *) {
  const size_t size = 400 * MiB;
  g_reserve = ::operator new(size);
  if (!tu_limit_address_space(256 * MiB)) return 1;
  g_handler_calls = 0;
  std::set_new_handler(handler_free_reserve);
  void *p = nullptr;
  try {
    p = ::operator new(size);
  } catch (const std::bad_alloc &) {
    CHECK(false,
          "operator new(%zu) threw although the handler freed a reserve of that size "
          "(handler called %d times)",
          size, g_handler_calls);
    return 1;
  }
  CHECK(g_handler_calls == 1, "handler called %d times, want 1", g_handler_calls);
  static_cast<char *>(p)[0] = 1;
  static_cast<char *>(p)[size - 1] = 1;
  ::operator delete(p);
  std::set_new_handler(nullptr);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  g_seed = tu_seed(argc, argv);
  test_plain_forms();
  test_aligned_forms();
  test_impossible_sizes();
  test_new_handler();
  tu_in_child("new_handler frees a reserve, retry succeeds", handler_retry_child, nullptr, 60);
  return tu_finish("api_cxx");
}
