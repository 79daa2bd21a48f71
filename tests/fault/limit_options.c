/* The limits' names and options: limit.soft and limit.hard take 0 or 1 MiB .. 2^50
 * through hak_ctl_set (-EINVAL outside, the value unchanged), limit.from_cgroup 0 or 1,
 * the figures are read-only; HAKMEM_LIMIT_SOFT / HAKMEM_LIMIT_HARD take bytes with a K,
 * M, G or T suffix (either case) and report anything else as ignored, leaving no limit.
 * Each environment case runs this program again ("env NAME VALUE WANT").
 *
 * Usage: limit_options [seed] */
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

static uint64_t get(const char *name) {
  uint64_t v = 0;
  REQUIRE(hak_stats_get(name, &v) == 0, "hak_stats_get(%s)", name);
  return v;
}
static int set(const char *name, uint64_t v) { return hak_ctl_set(name, &v, 8); }

static void ctl_ranges(void) {
  static const char *const limits[] = {"limit.soft", "limit.hard"};
  for (int i = 0; i < 2; i++) {
    const char *n = limits[i];
    CHECK(get(n) == 0, "%s: not 0 by default", n);
    static const uint64_t good[] = {1 << 20, 64 << 20, (uint64_t)3 << 30, (uint64_t)1 << 50, 0};
    for (size_t k = 0; k < sizeof good / sizeof good[0]; k++)
      CHECK(set(n, good[k]) == 0 && get(n) == good[k], "%s = %" PRIu64 " refused or not read back", n,
            good[k]);
    REQUIRE(set(n, 64 << 20) == 0, "%s = 64 MiB", n);
    static const uint64_t bad[] = {1, 4096, (1 << 20) - 1, ((uint64_t)1 << 50) + 1, UINT64_MAX};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
      CHECK(set(n, bad[k]) == -EINVAL, "%s = %" PRIu64 " accepted", n, bad[k]);
      CHECK(get(n) == 64 << 20, "%s: a refused value changed it", n);
    }
    REQUIRE(set(n, 0) == 0, "%s back to none", n);
  }
  CHECK(set("limit.from_cgroup", 2) == -EINVAL, "limit.from_cgroup = 2 accepted");
  CHECK(set("limit.from_cgroup", 0) == 0 && get("limit.from_cgroup") == 0, "limit.from_cgroup = 0");
  static const char *const figures[] = {"limit.committed", "limit.give_backs", "limit.refused",
                                        "os.rss_anon"};
  for (size_t k = 0; k < 4; k++) CHECK(set(figures[k], 0) == -EPERM, "%s written", figures[k]);
  /* Both figures, hakmem's and the kernel's, see a block written whole. */
  uint64_t c0 = get("limit.committed"), r0 = get("os.rss_anon");
  char *p = malloc(8 << 20);
  REQUIRE(p != NULL, "malloc(8 MiB)");
  memset(p, 1, 8 << 20);
  CHECK(get("limit.committed") >= c0 + (8 << 20), "limit.committed did not grow by 8 MiB");
  CHECK(get("os.rss_anon") >= r0 + (7 << 20), "os.rss_anon did not grow by 8 MiB");
  free(p);
}

typedef struct env_case {
  const char *value;
  uint64_t want; /* UINT64_MAX: ignored, with a warning */
} env_case_t;

static const env_case_t env_cases[] = {
    {"64M", 64 << 20},
    {"64m", 64 << 20},
    {"1G", 1 << 30},
    {"2t", (uint64_t)2 << 40},
    {"1024K", 1 << 20},
    {"1048576", 1 << 20},
    {"0", 0},
    {"1048576K", (uint64_t)1 << 30},
    {"64MB", UINT64_MAX},
    {"1.5G", UINT64_MAX},
    {"-1", UINT64_MAX},
    {"+64M", UINT64_MAX},
    {"1048575", UINT64_MAX},
    {"100", UINT64_MAX},
    {"1025T", UINT64_MAX},
    {"", UINT64_MAX},
    {"M", UINT64_MAX},
    {" 64M", UINT64_MAX},
    {"64 M", UINT64_MAX},
    {"99999999999999999999999", UINT64_MAX},
};

/* The child: the name reads what the option said. */
static int env_child(const char *name, const char *value, const char *want) {
  uint64_t w = strtoull(want, NULL, 10), v = get(name);
  if (v != w) {
    fprintf(stderr, "%s=%s: %s reads %" PRIu64 ", not %" PRIu64 "\n", name, value, name, v, w);
    return 1;
  }
  return 0;
}

static void env_cases_run(const char *self) {
  static const char *const options[][2] = {{"HAKMEM_LIMIT_SOFT", "limit.soft"},
                                           {"HAKMEM_LIMIT_HARD", "limit.hard"}};
  for (int o = 0; o < 2; o++) {
    for (size_t k = 0; k < sizeof env_cases / sizeof env_cases[0]; k++) {
      const env_case_t *c = &env_cases[k];
      char want[32];
      snprintf(want, sizeof want, "%" PRIu64, c->want == UINT64_MAX ? 0 : c->want);
      int fds[2];
      REQUIRE(pipe(fds) == 0, "pipe");
      pid_t pid = fork();
      REQUIRE(pid >= 0, "fork");
      if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        setenv(options[o][0], c->value, 1);
        execl(self, self, "env", options[o][1], c->value, want, (char *)NULL);
        _exit(127);
      }
      close(fds[1]);
      char err[4096];
      size_t got = 0;
      ssize_t r;
      while (got < sizeof err - 1 && (r = read(fds[0], err + got, sizeof err - 1 - got)) > 0)
        got += (size_t)r;
      err[got] = '\0';
      close(fds[0]);
      int status;
      waitpid(pid, &status, 0);
      CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s=\"%s\": %s", options[o][0], c->value, err);
      char warning[128];
      snprintf(warning, sizeof warning, "hakmem: ignoring %s=%s (", options[o][0], c->value);
      bool warned = strstr(err, warning) != NULL;
      CHECK(warned == (c->want == UINT64_MAX), "%s=\"%s\": %s warning:\n%s", options[o][0], c->value,
            warned ? "a" : "no", err);
    }
  }
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "env") == 0) return env_child(argv[2], argv[3], argv[4]);
  tu_seed(argc, argv);
  ctl_ranges();
  env_cases_run("/proc/self/exe");
  return tu_finish("limit_options");
}
