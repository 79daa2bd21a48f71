/* Shared by the misuse cases (misuse_case.c, misuse_cxx.cc). Both hide the pointers
 * they misuse from the compiler with tu_hide (test_util.h), so that it neither warns
 * about the misuse nor optimises the allocation or the bad call away. */
#ifndef HAKMEM_TESTS_MISUSE_H
#define HAKMEM_TESTS_MISUSE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tells the parent which pointer the next call misuses: the report must name it. */
void misuse_announce(const void *p);

/* The C++ cases. */
void cxx_delete_array_as_scalar(size_t size);
void cxx_delete_base_size_mismatch(size_t size);
void ok_cxx_new_delete(size_t size);
void cxx_delete_array_cookie(size_t size);
void cxx_delete_array_no_cookie(size_t size);
void cxx_sized_delete_wrong(size_t size);

#ifdef __cplusplus
}
#endif

#endif
