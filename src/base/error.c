/* Error reports: one line on stderr, formatted by hand (no stdio, no allocation, so it
 * works inside the allocator and in a damaged heap), then abort(). The bottom of the
 * library: it calls nothing of hakmem's. */

#include "base/base.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void error_write_stderr(const char *msg, size_t len) { error_write_fd(2, msg, len); }
void error_write_str(const char *s) { error_write_stderr(s, strlen(s)); }

void error_write_fd(int fd, const char *msg, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, msg, len);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      return;
    }
    msg += w;
    len -= (size_t)w;
  }
}

size_t error_append(char *buf, size_t at, size_t size, const char *s) {
  size_t n = strlen(s);
  if (at + n >= size) n = at + 1 < size ? size - at - 1 : 0;
  memcpy(buf + at, s, n);
  return at + n;
}

/* A report line keeps room for its newline: at most 250 characters before it. */
static size_t append(char *buf, size_t at, const char *s) { return error_append(buf, at, 251, s); }

/* v in decimal, or in hex after "0x", at buf (no NUL); returns the characters written,
 * at most 20 and 18. */
static size_t fmt_digits(char *buf, uint64_t v, unsigned base) {
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  for (size_t i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
  return n;
}

size_t error_fmt_dec(char *buf, uint64_t v) { return fmt_digits(buf, v, 10); }

size_t error_fmt_hex(char *buf, uint64_t v) {
  buf[0] = '0';
  buf[1] = 'x';
  return 2 + fmt_digits(buf + 2, v, 16);
}

static size_t append_hex(char *buf, size_t at, uintptr_t v) {
  return at <= 250 - 18 ? at + error_fmt_hex(buf + at, v) : at;
}

_Noreturn void error_fatal(const char *msg) {
  char buf[256];
  size_t at = append(buf, 0, "hakmem: ");
  at = append(buf, at, msg);
  buf[at++] = '\n';
  error_write_stderr(buf, at);
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
  error_write_stderr(buf, at);
  abort();
}

_Noreturn void error_fatal_pointer(const char *what, const char *fn, const void *p) {
  fatal_line(fn, what, p);
}

_Noreturn void error_fatal_at(const char *what, const void *p) { fatal_line(NULL, what, p); }
