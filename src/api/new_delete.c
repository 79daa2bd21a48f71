/* C++ operator new and delete in every standard form, written in C under their
 * mangled names so that the library does not pull libstdc++ into C programs.
 * The C++ runtime pieces new needs (the new-handler, throwing std::bad_alloc) are
 * weak references: present whenever a C++ program is running, absent otherwise. */
#include "api/api.h"
#include "hakmem.h"

#include <stdlib.h>

typedef void (*new_handler_t)(void);
extern new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));    /* std::get_new_handler */
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn)); /* throws std::bad_alloc */

static bool call_new_handler(void) {
  new_handler_t h = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
  if (h == NULL) return false;
  h();
  return true;
}

static _Noreturn void throw_bad_alloc(void) {
  if (_ZSt17__throw_bad_allocv) _ZSt17__throw_bad_allocv();
  error_fatal("operator new: out of memory and no C++ runtime to throw std::bad_alloc");
}

static void *new_throwing(size_t n, size_t align) {
  for (;;) {
    void *p = align <= 16 ? fast_malloc(n) : hak_aligned_alloc(align, n);
    if (HAK_LIKELY(p != NULL)) return p;
    if (!call_new_handler()) throw_bad_alloc();
  }
}

static void *new_nothrow(size_t n, size_t align) {
  for (;;) {
    void *p = align <= 16 ? fast_malloc(n) : hak_aligned_alloc(align, n);
    if (HAK_LIKELY(p != NULL)) return p;
    if (!call_new_handler()) return NULL;
  }
}

#define EXPORT HAK_EXPORT
typedef struct nothrow_t nothrow_t;

/* new */
EXPORT void *_Znwm(size_t n) { return new_throwing(n, 0); }
EXPORT void *_Znam(size_t n) { return new_throwing(n, 0); }
EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const nothrow_t *t) {
  (void)t;
  return new_nothrow(n, 0);
}
EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const nothrow_t *t) {
  (void)t;
  return new_nothrow(n, 0);
}
EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t al) { return new_throwing(n, al); }
EXPORT void *_ZnamSt11align_val_t(size_t n, size_t al) { return new_throwing(n, al); }
EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const nothrow_t *t) {
  (void)t;
  return new_nothrow(n, al);
}
EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const nothrow_t *t) {
  (void)t;
  return new_nothrow(n, al);
}

/* delete */
EXPORT void _ZdlPv(void *p) { fast_free(p); }
EXPORT void _ZdaPv(void *p) { fast_free(p); }
EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const nothrow_t *t) {
  (void)t;
  hak_free(p);
}
EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const nothrow_t *t) {
  (void)t;
  hak_free(p);
}
EXPORT void _ZdlPvm(void *p, size_t n) { hak_free_sized(p, n); }
EXPORT void _ZdaPvm(void *p, size_t n) { hak_free_sized(p, n); }
EXPORT void _ZdlPvSt11align_val_t(void *p, size_t al) {
  (void)al;
  hak_free(p);
}
EXPORT void _ZdaPvSt11align_val_t(void *p, size_t al) {
  (void)al;
  hak_free(p);
}
EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const nothrow_t *t) {
  (void)al, (void)t;
  hak_free(p);
}
EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const nothrow_t *t) {
  (void)al, (void)t;
  hak_free(p);
}
EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t al) { hak_free_aligned_sized(p, al, n); }
EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t al) { hak_free_aligned_sized(p, al, n); }
