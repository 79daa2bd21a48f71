/* The heap profile writer (src/profile/prof_proto.c) driven by known samples; check_profile.py
 * reads what it writes (with Python's gzip and protobuf decoding of its own, and with
 * pprof). Modes:
 *   write <profile> <expect>  samples whose stacks are return addresses inside this
 *                             program's alloc_small, alloc_big, ends_in_call,
 *                             run_workload and mode_write; alloc_big's in-use bytes are 4x
 *                             alloc_small's (see check_profile.py for the numbers)
 *   many <profile> <expect> [seed]  20,000 samples of random depth (0..64) over 3,000
 *                             made-up addresses, to grow every table and buffer
 *   gzip <in> <out>           prof_gzip_write of a file's bytes
 *   errors                    every failure returns its -errno, prints nothing, and
 *                             leaves errno alone
 * <expect> lists the samples as written: four values, then the stack in hex, per line.
 */
#include "profile/profile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Functions whose names pprof must print: kept out of line and unchanged (no clones with
 * suffixed names), and global, so their symbols are plain. */
#if defined(__clang__)
#define TEST_FUNC __attribute__((noinline, used))
#else
#define TEST_FUNC __attribute__((noinline, noclone, used))
#endif
/* After a call: keeps it from becoming a tail jump, so the callee's return address is
 * inside the caller. */
#define AFTER_CALL() __asm__ volatile("" ::: "memory")

#define MAX_SAMPLES 64
static uintptr_t stacks[MAX_SAMPLES][3];
static prof_sample_t samples[MAX_SAMPLES];
static size_t nsamples;
static int failures;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stdout, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stdout, __VA_ARGS__);                                   \
      fputc('\n', stdout);                                            \
      failures++;                                                     \
    }                                                                 \
  } while (0)

static void add_sample(uintptr_t leaf, uintptr_t caller, uintptr_t outer, int64_t bytes, bool freed) {
  if (nsamples == MAX_SAMPLES) abort();
  uintptr_t *st = stacks[nsamples];
  st[0] = leaf;
  st[1] = caller;
  st[2] = outer;
  prof_sample_t *s = &samples[nsamples++];
  s->stack = st;
  s->depth = 3;
  s->values[PROF_ALLOC_OBJECTS] = 1;
  s->values[PROF_ALLOC_SPACE] = bytes;
  s->values[PROF_INUSE_OBJECTS] = freed ? 0 : 1;
  s->values[PROF_INUSE_SPACE] = freed ? 0 : bytes;
}

/* What a sampling profiler would do at an allocation: its return address is inside the
 * allocating function. */
TEST_FUNC void record(int64_t bytes, bool freed, uintptr_t caller, uintptr_t outer) {
  add_sample((uintptr_t)__builtin_return_address(0), caller, outer, bytes, freed);
}

TEST_FUNC void alloc_small(int64_t bytes, bool freed, uintptr_t outer) {
  record(bytes, freed, (uintptr_t)__builtin_return_address(0), outer);
  AFTER_CALL();
}

TEST_FUNC void alloc_big(int64_t bytes, bool freed, uintptr_t outer) {
  record(bytes, freed, (uintptr_t)__builtin_return_address(0), outer);
  AFTER_CALL();
}

/* A call that never returns is a function's last instruction, so its return address is
 * the first byte after the function: only the address - 1 the writer stores names it. */
TEST_FUNC __attribute__((noreturn)) void leave(jmp_buf *env, uintptr_t caller, uintptr_t outer) {
  add_sample((uintptr_t)__builtin_return_address(0), caller, outer, 512, false);
  longjmp(*env, 1);
}

TEST_FUNC __attribute__((noreturn)) void ends_in_call(jmp_buf *env, uintptr_t outer) {
  leave(env, (uintptr_t)__builtin_return_address(0), outer);
}

/* alloc_small: 8 allocations of 1024 bytes, 4 of them freed: 4096 bytes in use.
 * alloc_big: 4 allocations of 4096 bytes, none freed: 16384 bytes in use, 4x.
 * ends_in_call: 1 allocation of 512 bytes in use. */
TEST_FUNC void run_workload(void) {
  uintptr_t outer = (uintptr_t)__builtin_return_address(0);
  for (int i = 0; i < 8; i++) {
    alloc_small(1024, i % 2 == 1, outer);
    AFTER_CALL();
  }
  for (int i = 0; i < 4; i++) {
    alloc_big(4096, false, outer);
    AFTER_CALL();
  }
  jmp_buf env;
  if (setjmp(env) == 0) ends_in_call(&env, outer);
}

static int write_expect(const char *path, const prof_sample_t *s, size_t n) {
  FILE *f = fopen(path, "w");
  if (f == NULL) return -1;
  for (size_t i = 0; i < n; i++) {
    for (int v = 0; v < PROF_VALUES; v++) fprintf(f, "%" PRId64 " ", s[i].values[v]);
    for (uint32_t d = 0; d < s[i].depth; d++) fprintf(f, " %" PRIxPTR, s[i].stack[d]);
    fputc('\n', f);
  }
  return fclose(f) == 0 ? 0 : -1;
}

#define PERIOD 524288
#define TIME_NS 1700000000123456789ull
#define DURATION_NS 2500000000ull

TEST_FUNC int mode_write(const char *profile, const char *expect) {
  run_workload();
  AFTER_CALL();
  int rc = prof_write_file(profile, samples, nsamples, PERIOD, TIME_NS, DURATION_NS);
  CHECK(rc == 0, "prof_write_file: %d (%s)", rc, strerror(-rc));
  CHECK(write_expect(expect, samples, nsamples) == 0, "writing %s", expect);
  return failures != 0;
}

static uint64_t rng_state;
static uint64_t rng(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return rng_state >> 17;
}

static int mode_many(const char *profile, const char *expect, uint64_t seed) {
  enum { N = 20000, ADDRS = 3000 };
  static uintptr_t pool[ADDRS];
  static uintptr_t stack_mem[N][PROF_MAX_DEPTH];
  static prof_sample_t many[N];
  rng_state = seed;
  /* Addresses all over the address space, a few inside this program's code. */
  for (int i = 0; i < ADDRS; i++)
    pool[i] = i % 10 == 0 ? (uintptr_t)&run_workload + (uintptr_t)(i % 64) + 1 : (uintptr_t)(rng() << 4) + 1;
  for (int i = 0; i < N; i++) {
    many[i].depth = (uint32_t)(rng() % (PROF_MAX_DEPTH + 1));
    many[i].stack = stack_mem[i];
    for (uint32_t d = 0; d < many[i].depth; d++) stack_mem[i][d] = pool[rng() % ADDRS];
    for (int v = 0; v < PROF_VALUES; v++)
      many[i].values[v] = (int64_t)(rng() % 100000) - (v == 3 && i % 97 == 0 ? 200000 : 0);
  }
  int rc = prof_write_file(profile, many, N, 1, 0, 0);
  CHECK(rc == 0, "prof_write_file: %d (%s)", rc, strerror(-rc));
  CHECK(write_expect(expect, many, N) == 0, "writing %s", expect);
  return failures != 0;
}

static int mode_gzip(const char *in, const char *out) {
  FILE *f = fopen(in, "rb");
  if (f == NULL) return 2;
  size_t cap = 1 << 16, len = 0;
  unsigned char *data = malloc(cap);
  size_t r;
  while (data && (r = fread(data + len, 1, cap - len, f)) > 0) {
    len += r;
    if (len == cap) data = realloc(data, cap *= 2);
  }
  fclose(f);
  if (data == NULL) return 2;
  int fd = open(out, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return 2;
  int rc = prof_gzip_write(fd, data, len);
  CHECK(rc == 0, "prof_gzip_write: %d (%s)", rc, strerror(-rc));
  close(fd);
  free(data);
  return failures != 0;
}

/* Virtual memory in use now, from /proc/self/statm, in bytes; 0 if unknown. */
static size_t vm_size(void) {
  char text[128] = {0};
  int fd = open("/proc/self/statm", O_RDONLY);
  if (fd < 0) return 0;
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return 0;
  return (size_t)strtoull(text, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE);
}

static bool file_holds(const char *path, const char *want) {
  char got[64] = {0};
  int fd = open(path, O_RDONLY);
  if (fd < 0) return false;
  ssize_t n = read(fd, got, sizeof got - 1);
  close(fd);
  return n == (ssize_t)strlen(want) && memcmp(got, want, (size_t)n) == 0;
}

/* In a child whose address space cannot grow, the writer must fail with -ENOMEM before
 * opening the file: an existing file keeps its bytes. Exit 0: checked; 3: the limit
 * does not bind here (as under qemu-user); 1: failed. */
static int child_no_memory(const char *path) {
  size_t vm = vm_size();
  if (vm == 0) return 3;
  struct rlimit lim = {vm, vm};
  if (setrlimit(RLIMIT_AS, &lim) != 0) return 3;
  void *probe = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (probe != MAP_FAILED) return 3;
  int rc = prof_write_file(path, samples, nsamples, PERIOD, TIME_NS, DURATION_NS);
  if (rc != -ENOMEM) return 1;
  return file_holds(path, "keep") ? 0 : 1;
}

static int mode_errors(void) {
  run_workload();
  AFTER_CALL();
  char dir[] = "/tmp/hakmem_prof_XXXXXX";
  if (mkdtemp(dir) == NULL) return 2;
  char path[256];

  /* Everything the writer does from here on goes to stderr's place: a file that must
   * stay empty. stdout reports. */
  char err_path[300];
  snprintf(err_path, sizeof err_path, "%s/stderr", dir);
  int err_fd = open(err_path, O_CREAT | O_RDWR | O_TRUNC, 0600);
  int saved_stderr = dup(2);
  if (err_fd < 0 || saved_stderr < 0 || dup2(err_fd, 2) < 0) return 2;

  int rc;
  errno = 4321;
  snprintf(path, sizeof path, "%s/no/such/dir/heap.pb.gz", dir);
  rc = prof_write_file(path, samples, nsamples, PERIOD, TIME_NS, DURATION_NS);
  CHECK(rc == -ENOENT, "missing directory: %d", rc);
  CHECK(errno == 4321, "errno changed to %d", errno);

  rc = prof_write_file(dir, samples, nsamples, PERIOD, TIME_NS, DURATION_NS);
  CHECK(rc == -EISDIR, "a directory: %d", rc);

  if (geteuid() != 0) { /* root opens anything */
    snprintf(path, sizeof path, "%s/ro", dir);
    mkdir(path, 0500);
    snprintf(path, sizeof path, "%s/ro/heap.pb.gz", dir);
    rc = prof_write_file(path, samples, nsamples, PERIOD, TIME_NS, DURATION_NS);
    CHECK(rc == -EACCES, "read-only directory: %d", rc);
  }

  if (access("/dev/full", W_OK) == 0) {
    rc = prof_write_file("/dev/full", samples, nsamples, PERIOD, TIME_NS, DURATION_NS);
    CHECK(rc == -ENOSPC, "/dev/full: %d", rc);
    int fd = open("/dev/full", O_WRONLY);
    rc = prof_write_profile(fd, samples, nsamples, PERIOD, TIME_NS, DURATION_NS);
    CHECK(rc == -ENOSPC, "/dev/full by fd: %d", rc);
    close(fd);
  } else {
    printf("note: no /dev/full, ENOSPC not checked\n");
  }

  rc = prof_write_profile(-1, samples, nsamples, PERIOD, TIME_NS, DURATION_NS);
  CHECK(rc == -EBADF, "fd -1: %d", rc);
  int ro = open("/dev/null", O_RDONLY);
  rc = prof_write_profile(ro, samples, nsamples, PERIOD, TIME_NS, DURATION_NS);
  CHECK(rc == -EBADF, "read-only fd: %d", rc);
  close(ro);

  rc = prof_write_profile(1, NULL, 3, PERIOD, TIME_NS, DURATION_NS);
  CHECK(rc == -EINVAL, "NULL samples: %d", rc);
  prof_sample_t bad = {NULL, 2, {1, 2, 3, 4}};
  rc = prof_write_profile(1, &bad, 1, PERIOD, TIME_NS, DURATION_NS);
  CHECK(rc == -EINVAL, "NULL stack: %d", rc);
  rc = prof_write_file(NULL, samples, nsamples, PERIOD, TIME_NS, DURATION_NS);
  CHECK(rc == -EINVAL, "NULL path: %d", rc);
  CHECK(errno == 4321, "errno changed to %d", errno);

  snprintf(path, sizeof path, "%s/kept.pb.gz", dir);
  int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0 || write(fd, "keep", 4) != 4) return 2;
  close(fd);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) _exit(child_no_memory(path));
  int status = 0;
  waitpid(pid, &status, 0);
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  CHECK(code == 0 || code == 3, "out of address space: child status %d", code);
  if (code == 3) printf("note: RLIMIT_AS does not bind here, mmap failure not checked\n");

  fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  struct stat st;
  CHECK(fstat(err_fd, &st) == 0 && st.st_size == 0, "the writer printed %lld bytes", (long long)st.st_size);
  close(err_fd);

  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
  if (failures == 0) printf("errors: every case returned its -errno and printed nothing\n");
  return failures != 0;
}

int main(int argc, char **argv) {
  if (argc >= 4 && strcmp(argv[1], "write") == 0) return mode_write(argv[2], argv[3]);
  if (argc >= 4 && strcmp(argv[1], "many") == 0)
    return mode_many(argv[2], argv[3], argc > 4 ? strtoull(argv[4], NULL, 0) : 42);
  if (argc >= 4 && strcmp(argv[1], "gzip") == 0) return mode_gzip(argv[2], argv[3]);
  if (argc >= 2 && strcmp(argv[1], "errors") == 0) return mode_errors();
  fprintf(stderr, "usage: %s write|many|gzip|errors ...\n", argv[0]);
  return 2;
}
