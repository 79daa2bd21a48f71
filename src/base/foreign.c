/* Pointers hakmem did not hand out. A block from the C library's own allocator (made
 * before hakmem took over, or by a path that bypassed it) goes back to that allocator;
 * anything else is a bug in the program and ends it with one line on stderr. */

#include "base/base.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- recognising a C library heap chunk ----------------------------------------- */
/* The mapping containing a, from /proc/self/maps, read without allocating. */
typedef struct mapping {
  uintptr_t lo, hi;
  bool readable;
  bool heap;      /* "[heap]": the brk area of the main arena */
  bool anonymous; /* no file, no [stack]/[vdso]-style name */
} mapping_t;

static bool find_mapping(uintptr_t a, mapping_t *out) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  size_t len = 0;
  bool found = false;
  for (;;) {
    ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
    if (r <= 0) break;
    len += (size_t)r;
    buf[len] = '\0';
    char *line = buf, *nl;
    while ((nl = memchr(line, '\n', len - (size_t)(line - buf))) != NULL) {
      *nl = '\0';
      char *end;
      uintptr_t lo = strtoul(line, &end, 16);
      uintptr_t hi = strtoul(end + 1, &end, 16);
      if (a >= lo && a < hi) {
        out->lo = lo;
        out->hi = hi;
        out->readable = end[1] == 'r';
        /* fields: perms offset dev inode [path] */
        char *path = end + 1;
        for (int field = 0; field < 4 && path; field++) {
          path = strchr(path, ' ');
          if (path)
            while (*path == ' ') path++;
        }
        out->heap = path && strcmp(path, "[heap]") == 0;
        out->anonymous = path == NULL || *path == '\0';
        found = true;
        break;
      }
      line = nl + 1;
    }
    if (found) break;
    size_t rest = len - (size_t)(line - buf);
    memmove(buf, line, rest);
    len = rest;
  }
  close(fd);
  return found;
}

/* glibc's in-use chunk: size word before the pointer, flags in its low 3 bits. */
static bool looks_like_libc_chunk(const void *p) {
  uintptr_t a = (uintptr_t)p;
  if (a % 16 != 0 || a < 4096) return false;
  mapping_t m;
  if (!find_mapping(a - 16, &m) || !m.readable || a >= m.hi) return false;
  const size_t *hdr = (const size_t *)(a - 16);
  size_t size_field = hdr[1];
  size_t size = size_field & ~(size_t)7;
  bool mmapped = size_field & 2;
  if (size < 32 || size % 16 != 0) return false;
  if (mmapped) {
    size_t prev = hdr[0];
    uintptr_t map_start = a - 16 - prev;
    return m.anonymous && map_start % os_page_size() == 0 && (prev + size) % os_page_size() == 0 &&
           map_start >= m.lo && a - 16 + size <= m.hi;
  }
  if (!m.heap || a - 16 + size + 16 > m.hi) return false;
  const size_t *next = (const size_t *)(a - 16 + size);
  return (next[1] & 1) != 0; /* the next chunk says this one is in use */
}

static void *libc_symbol(const char *name) {
  /* The next definition after ours in the lookup order is the C library's. */
  return dlsym(RTLD_NEXT, name);
}

void foreign_free(void *p, const char *fn) {
  if (p == NULL) return;
  if (looks_like_libc_chunk(p)) {
    void (*libc_free)(void *) = (void (*)(void *))libc_symbol("free");
    if (libc_free != NULL) {
      libc_free(p);
      return;
    }
  }
  error_fatal_pointer("invalid pointer", fn, p);
}

size_t foreign_usable(const void *p, const char *fn) {
  if (looks_like_libc_chunk(p)) {
    size_t (*libc_usable)(const void *) = (size_t(*)(const void *))libc_symbol("malloc_usable_size");
    if (libc_usable != NULL) return libc_usable(p);
  }
  error_fatal_pointer("invalid pointer", fn, p);
}
