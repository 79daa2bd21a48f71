/* Error reports: one line on stderr, formatted by hand (no stdio, no allocation, so it
 * works inside the allocator and in a damaged heap), then abort(). The bottom of the
 * library: it calls nothing of hakmem's. */

#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

void hak_write_stderr(const char *msg, size_t len) {
  while (len > 0) {
    ssize_t w = write(2, msg, len);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      return;
    }
    msg += w;
    len -= (size_t)w;
  }
}

static size_t append(char *buf, size_t at, const char *s) {
  while (*s && at < 250) buf[at++] = *s++;
  return at;
}

static size_t append_hex(char *buf, size_t at, uintptr_t v) {
  char tmp[17];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v);
  at = append(buf, at, "0x");
  while (n > 0 && at < 250) buf[at++] = tmp[--n];
  return at;
}

_Noreturn void hak_fatal(const char *msg) {
  char buf[256];
  size_t at = append(buf, 0, "hakmem: ");
  at = append(buf, at, msg);
  buf[at++] = '\n';
  hak_write_stderr(buf, at);
  abort();
}

/* "hakmem: fn(): what 0x..." for a bad argument, "hakmem: what 0x..." (fn NULL) for
 * damage found in the heap; then abort. Formatted by hand: no stdio, no allocation. */
static _Noreturn void fatal_line(const char *fn, const char *what, const void *p) {
  char buf[256];
  size_t at = append(buf, 0, "hakmem: ");
  if (fn != NULL) {
    at = append(buf, at, fn);
    at = append(buf, at, "(): ");
  }
  at = append(buf, at, what);
  at = append(buf, at, " ");
  at = append_hex(buf, at, (uintptr_t)p);
  buf[at++] = '\n';
  hak_write_stderr(buf, at);
  abort();
}

_Noreturn void hak_fatal_pointer(const char *what, const char *fn, const void *p) {
  fatal_line(fn, what, p);
}

_Noreturn void hak_fatal_at(const char *what, const void *p) { fatal_line(NULL, what, p); }
