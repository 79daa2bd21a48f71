// The C++ misuse cases: operator delete gets a pointer or a size that new did not
// hand out. Built with sized deallocation, so the compiler passes the size it believes.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "misuse.h"
#include "test_util.h"

namespace {

volatile long destroyed;

// A non-trivial destructor makes new[] store the element count in front of the array,
// so the pointer new[] returns is not the start of the block.
struct Tracked {
  long value[4] = {1, 2, 3, 4};
  ~Tracked() { destroyed = destroyed + value[0]; }
};

struct Base {
  long id = 7;
  ~Base() { destroyed = destroyed + id; } // not virtual: delete through Base is wrong
};

struct Derived : Base {
  char payload[8192] = {};
};

struct alignas(64) Aligned {
  char bytes[200] = {};
};

template <typename T>
T *launder(T *p) {
  return static_cast<T *>(tu_hide(p));
}

} // namespace

extern "C" void cxx_delete_array_as_scalar(size_t) {
  Tracked *array = launder(new Tracked[10]);
  misuse_announce(array);
  delete array;
}

extern "C" void cxx_delete_base_size_mismatch(size_t) {
  Base *object = launder(static_cast<Base *>(new Derived));
  misuse_announce(object);
  delete object; // operator delete(object, sizeof(Base)) on an 8 KiB block
}

namespace {

// One byte, a destructor that touches nothing: new Cookie[k] allocates 8 + k bytes.
struct Cookie {
  char c;
  ~Cookie() { destroyed = destroyed + 1; }
};

// An object of `Size` bytes deleted through its first member's type, a base of `Base`.
template <size_t Base>
struct SmallBase {
  char bytes[Base] = {};
  ~SmallBase() { destroyed = destroyed + bytes[0]; }
};
template <size_t Size, size_t Base>
struct Sized : SmallBase<Base> {
  char payload[Size - Base] = {};
};

template <size_t Size, size_t Base>
void delete_through_base() {
  SmallBase<Base> *object = launder(static_cast<SmallBase<Base> *>(new Sized<Size, Base>));
  misuse_announce(object);
  delete object; // operator delete(object, Base)
}

} // namespace

// Scalar delete of new Cookie[size - 8]: the pointer is 8 bytes into a block of `size`.
extern "C" void cxx_delete_array_cookie(size_t size) {
  Cookie *array = launder(new Cookie[size - 8]);
  misuse_announce(array);
  delete array;
}

// Scalar delete of new char[size]: operator delete(p, 1) on a block of `size`.
extern "C" void cxx_delete_array_no_cookie(size_t size) {
  char *array = launder(new char[size]);
  misuse_announce(array);
  delete array;
}

extern "C" void cxx_sized_delete_wrong(size_t size) {
  if (size == 8) delete_through_base<8, 4>();
  else if (size == 4096) delete_through_base<4096, 8>();
  else delete_through_base<(256 << 10), 8>();
}

extern "C" void ok_cxx_new_delete(size_t) {
  for (int round = 0; round < 100; round++) {
    delete launder(new Tracked);
    delete[] launder(new Tracked[round + 1]);
    delete launder(new Derived);
    delete launder(new Aligned);
    delete[] launder(new Aligned[round + 1]);
    delete[] launder(new char[round * 100 + 1]);
    std::vector<std::string> strings;
    for (int i = 0; i < 200; i++) strings.push_back(std::string(i * 3, 'x'));
    auto shared = std::make_shared<Derived>();
    auto unique = std::make_unique<Tracked[]>(round + 5);
  }
}
