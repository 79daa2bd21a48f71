/* Heap profile writer: pprof's profile.proto, gzip-compressed, from inside the allocator.
 *
 * What it writes. One perftools.profiles.Profile message (github.com/google/pprof,
 * proto/profile.proto), gzip-compressed, which `pprof` reads as it is:
 *   sample_type          alloc_objects/count, alloc_space/bytes, inuse_objects/count,
 *                        inuse_space/bytes, in that order (prof_sample_t.values);
 *   default_sample_type  inuse_space;  period_type space/bytes;  period as given;
 *   sample               one per prof_sample_t: its location ids, leaf first, and values;
 *   location             one per distinct return address, id 1, 2, ... in order of first
 *                        appearance, address = return address - 1 (see below), and the id
 *                        of the mapping holding it (none if no executable mapping does);
 *   mapping              every executable mapping of /proc/self/maps at the time of the
 *                        call: start, limit, file offset, file name and, for an ELF file,
 *                        its GNU build ID (hex) read from the loaded image's PT_NOTE
 *                        segments. The main executable comes first. pprof symbolizes the
 *                        addresses against these files on disk (has_functions is false);
 *   string_table         "" first, then every string above once;
 *   time_nanos, duration_nanos as given.
 * If /proc/self/maps cannot be read the profile has no mappings (pprof then shows raw
 * addresses); that alone is not an error.
 *
 * Addresses. A stack holds return addresses: the instruction after each call. pprof
 * symbolizes a location's address exactly as written (only its legacy text formats are
 * adjusted by it), and a return address may already belong to the next line or, after a
 * call that never returns, to the next function. So every location's address is the
 * return address - 1, which lies inside the call instruction. A zero entry is skipped.
 *
 * Why no malloc. The profiler runs inside the allocator, possibly while its locks are
 * held, so nothing here calls malloc, free, stdio, qsort, zlib or the dynamic loader.
 * Memory comes from os_map/os_unmap (anonymous mmap) and is all unmapped before return;
 * files are read and written with open/read/write/close. The compression is our own:
 * a gzip member holding one fixed-Huffman DEFLATE block with greedy LZ77 matching.
 * The test prof_no_libc_alloc checks the object file's undefined symbols.
 *
 * Errors. Every function returns 0 or a negative errno (-ENOMEM if a mapping fails,
 * -ENOSPC, -EACCES, ... from the file system, -EINVAL for bad arguments). Nothing is ever
 * printed and nothing aborts: the caller prints one line. errno is left as it was.
 *
 * Thread safety: the functions keep no state between calls; the caller keeps the
 * samples unchanged during a call.
 */
#ifndef HAKMEM_PROFILE_H
#define HAKMEM_PROFILE_H

#include "base/base.h"

#include <string.h>

#pragma GCC visibility push(hidden)

/* a[0..alen) and b[0..blen) hold the same name. */
static inline bool same_name(const char *a, size_t alen, const char *b, size_t blen) {
  return alen == blen && memcmp(a, b, alen) == 0;
}

/* The profiler records stacks of at most this many frames; the writer takes any depth. */
#define PROF_MAX_DEPTH 64

/* prof_sample_t.values, in sample_type order. */
enum prof_value {
  PROF_ALLOC_OBJECTS = 0, /* count: allocations the sample stands for */
  PROF_ALLOC_SPACE = 1,   /* bytes: their total size */
  PROF_INUSE_OBJECTS = 2, /* count: of them, not freed yet */
  PROF_INUSE_SPACE = 3,   /* bytes */
  PROF_VALUES = 4
};

typedef struct prof_sample {
  const uintptr_t *stack; /* return addresses, innermost (the allocating function) first */
  uint32_t depth;         /* entries in stack */
  int64_t values[PROF_VALUES];
} prof_sample_t;

/* Writes the gzip-compressed profile of samples[0..n) to fd, from its current position.
 * period: bytes between samples (pprof's period, period_type space/bytes); time_ns: when
 * profiling started, nanoseconds since the Unix epoch; duration_ns: how long it ran.
 * Samples with the same stack may repeat; pprof adds them up. */
int prof_write_profile(int fd, const prof_sample_t *samples, size_t n, int64_t period, uint64_t time_ns,
                       uint64_t duration_ns);

/* The same into the file at path, opened with O_CREAT|O_TRUNC|O_WRONLY|O_CLOEXEC, 0644.
 * The profile is built in memory first, so a failure to map memory leaves the file
 * untouched; a failure while writing (-ENOSPC) may leave it truncated. */
int prof_write_file(const char *path, const prof_sample_t *samples, size_t n, int64_t period,
                    uint64_t time_ns, uint64_t duration_ns);

/* The compressor on its own: data[0..len) as one gzip member (no name, mtime 0) to fd.
 * Used by the writer; exposed for tests. */
int prof_gzip_write(int fd, const void *data, size_t len);

/* ---- prof_symbols.c and prof_unwind.c: names and stacks for the heap profiler ---- */
/* One distinct call stack and what was allocated from it. Values are estimates (sums of
 * the samples' weights), exact integers in exact mode (HAKMEM_PROF_RATE=1). */
typedef struct prof_stack {
  uint64_t hash; /* 0: slot unused */
  uint32_t depth;
  uint32_t pad;
  double alloc_objects, alloc_bytes, inuse_objects, inuse_bytes;
  uintptr_t frames[PROF_MAX_DEPTH]; /* return addresses, the allocating function first */
} prof_stack_t;

/* Writes "name+0xoff (file)" for addr into buf (NUL-terminated, at most size bytes);
 * the name from dladdr, else from the .symtab of the mapped file, else "??". */
size_t prof_symbolize(uintptr_t addr, char *buf, size_t size);
/* The leak report on stderr: the stacks with live bytes, largest first, at most `max`. */
void prof_leak_report(const prof_stack_t *stacks, const uint32_t *order, size_t count, long rate, size_t max);

/* ---- prof_unwind.c: the stack of the caller, leaf first (libgcc, cached) ------- */
void prof_unwind_init(void);          /* finds this library's code, whose frames are dropped */
uint32_t prof_unwind(uintptr_t *out); /* out: PROF_MAX_DEPTH entries; returns the depth */
void prof_unwind_thread_exit(void);   /* the thread's cache goes to the next thread */
void prof_unwind_atfork_child(void);

#pragma GCC visibility pop

#endif
