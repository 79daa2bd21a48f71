/* limit.from_cgroup in a cgroup v2 child of this process's cgroup with memory.max of
 * MAX_MIB: a child process moved into it starts with HAKMEM_LIMIT_FROM_CGROUP=1 and
 * must find limit.soft a sixteenth below memory.max; then, with purging off, it frees
 * a working set and maps more, past memory.max in all: the freed memory must go back,
 * RSS stay under the soft limit, and the kernel never kill it (memory.events: no
 * oom_kill). Where no cgroup v2 child can be made (no cgroup2, no memory controller
 * delegated, no permission) the test says why and is skipped (exit 77).
 *
 * Usage: limit_cgroup [seed] */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#define MIB ((uint64_t)1 << 20)
enum { MAX_MIB = 256, SKIP = 77 };

static bool write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
  return close(fd) == 0 && ok;
}

static bool read_file(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, buf, cap - 1);
  close(fd);
  if (n < 0) return false;
  buf[n] = '\0';
  return true;
}

static uint64_t get(const char *name) {
  uint64_t v = 0;
  REQUIRE(hak_stats_get(name, &v) == 0, "hak_stats_get(%s)", name);
  return v;
}

/* In the cgroup: the soft limit from memory.max, and memory given back under it. */
static int child(void) {
  uint64_t want = MAX_MIB * MIB - MAX_MIB * MIB / 16, soft = get("limit.soft");
  CHECK(get("limit.from_cgroup") == 1, "HAKMEM_LIMIT_FROM_CGROUP=1 did not take");
  CHECK(soft == want, "limit.soft %" PRIu64 ", not %" PRIu64 " (memory.max less a sixteenth)", soft, want);
  int64_t never = -1;
  REQUIRE(hak_ctl_set("opt.purge_delay_ms", &never, 8) == 0, "purging off");
  /* 4 rounds of 192 MiB written and freed, in blocks of 1 MiB and 64 KiB, each followed
   * by a huge block of 96 MiB: without the soft limit, the freed memory would stay
   * resident beside it, past memory.max, and the kernel would kill. */
  for (int round = 0; round < 4; round++) {
    size_t size = round % 2 ? 1 << 20 : 64 << 10, n = (192 << 20) / size;
    void **blocks = malloc(n * sizeof *blocks);
    REQUIRE(blocks != NULL, "malloc of the table");
    for (size_t i = 0; i < n; i++) {
      blocks[i] = malloc(size);
      REQUIRE(blocks[i] != NULL, "malloc(%zu) in round %d", size, round);
      memset(blocks[i], round + 1, size);
    }
    for (size_t i = 0; i < n; i++) free(blocks[i]);
    free(blocks);
    /* What the round freed stays resident until the next maps more: then it goes. */
    char *huge = malloc(96 << 20);
    REQUIRE(huge != NULL, "malloc(96 MiB) in round %d", round);
    memset(huge, 7, 96 << 20);
    uint64_t rss = get("os.rss_anon");
    CHECK(rss <= soft, "round %d: RSS %" PRIu64 " past the soft limit %" PRIu64, round, rss, soft);
    free(huge);
  }
  printf("in a cgroup of memory.max %d MiB: limit.soft %" PRIu64 " MiB, %" PRIu64 " give-backs\n", MAX_MIB,
         soft >> 20, get("limit.give_backs"));
  return tu_finish("limit_cgroup (child)");
}

static int skip(const char *why) {
  printf("limit_cgroup: skipped: %s\n", why);
  return SKIP;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "child") == 0) return child();
  tu_seed(argc, argv);
  char line[4096], dir[8192], path[8400];
  if (access("/sys/fs/cgroup/cgroup.controllers", F_OK) != 0) return skip("no cgroup v2 at /sys/fs/cgroup");
  if (!read_file("/proc/self/cgroup", line, sizeof line) || strncmp(line, "0::/", 4) != 0)
    return skip("this process is in no cgroup v2");
  line[strcspn(line, "\n")] = '\0';
  snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", line + 3);
  size_t len = strlen(dir);
  while (len > 0 && dir[len - 1] == '/') dir[--len] = '\0';
  snprintf(path, sizeof path, "%s/cgroup.subtree_control", dir);
  char controllers[1024];
  if (!read_file(path, controllers, sizeof controllers) || strstr(controllers, "memory") == NULL) {
    if (!write_file(path, "+memory"))
      return skip("the memory controller is not delegated to this cgroup's children");
  }
  snprintf(dir + len, sizeof dir - len, "/hakmem-limit-%d", (int)getpid());
  if (mkdir(dir, 0755) != 0) return skip("cannot make a child cgroup (permission)");
  snprintf(path, sizeof path, "%s/memory.max", dir);
  char max[32];
  snprintf(max, sizeof max, "%" PRIu64, MAX_MIB * MIB);
  if (!write_file(path, max)) {
    rmdir(dir);
    return skip("cannot set memory.max");
  }
  snprintf(path, sizeof path, "%s/memory.swap.max", dir);
  write_file(path, "0"); /* past memory.max the kernel must kill, not swap */
  int ready[2];
  REQUIRE(pipe(ready) == 0, "pipe");
  pid_t pid = fork();
  REQUIRE(pid >= 0, "fork");
  if (pid == 0) {
    char procs[8400], me[32];
    snprintf(procs, sizeof procs, "%s/cgroup.procs", dir);
    snprintf(me, sizeof me, "%d", (int)getpid());
    char ok = write_file(procs, me) ? 1 : 0;
    if (write(ready[1], &ok, 1) != 1 || !ok) _exit(SKIP);
    setenv("HAKMEM_LIMIT_FROM_CGROUP", "1", 1);
    execl("/proc/self/exe", argv[0], "child", (char *)NULL);
    _exit(127);
  }
  close(ready[1]);
  char ok = 0;
  if (read(ready[0], &ok, 1) != 1) ok = 0;
  int status;
  waitpid(pid, &status, 0);
  snprintf(path, sizeof path, "%s/memory.events", dir);
  char events[1024] = "";
  read_file(path, events, sizeof events);
  rmdir(dir);
  if (!ok) return skip("cannot move a process into the child cgroup");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child %s %d",
        WIFEXITED(status) ? "exited with" : "was killed by",
        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  const char *kills = strstr(events, "oom_kill ");
  CHECK(kills == NULL || atoi(kills + 9) == 0, "the kernel killed in the cgroup: %s", events);
  return tu_finish("limit_cgroup");
}
