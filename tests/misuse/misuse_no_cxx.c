/* The C++ cases where the test programs cannot be C++: with musl-gcc, for which Debian
 * has no C++ runtime. Each one skips (exit status 77 in the child, which misuse_case
 * reports as a skipped case), so no case counts as caught or missed there. */
#include <stdio.h>
#include <stdlib.h>

#include "misuse.h"

static void no_cxx(size_t size) {
  (void)size;
  fputs("misuse_case: built without C++ (no C++ runtime for this C library)\n", stderr);
  exit(77);
}

void cxx_delete_array_as_scalar(size_t size) { no_cxx(size); }
void cxx_delete_base_size_mismatch(size_t size) { no_cxx(size); }
void ok_cxx_new_delete(size_t size) { no_cxx(size); }
void cxx_delete_array_cookie(size_t size) { no_cxx(size); }
void cxx_delete_array_no_cookie(size_t size) { no_cxx(size); }
void cxx_sized_delete_wrong(size_t size) { no_cxx(size); }
