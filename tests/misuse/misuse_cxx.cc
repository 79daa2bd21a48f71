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
  ~Base() { destroyed = destroyed + id; }  // not virtual: delete through Base is wrong
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

}  // namespace

extern "C" void cxx_delete_array_as_scalar(size_t) {
  Tracked *array = launder(new Tracked[10]);
  misuse_announce(array);
  delete array;
}

extern "C" void cxx_delete_base_size_mismatch(size_t) {
  Base *object = launder(static_cast<Base *>(new Derived));
  misuse_announce(object);
  delete object;  // operator delete(object, sizeof(Base)) on an 8 KiB block
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
