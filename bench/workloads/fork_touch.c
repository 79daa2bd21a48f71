/* fork() of a big heap: fills `mib` MiB with 4 KiB blocks, forks, and the child writes
 * one byte in every page, so that each page is copied on its first write. Prints the
 * fork's own time, the child's time and faults, and the child's peak RSS (each page it
 * wrote is copied: 4 KiB, or 2 MiB where a huge page is copied whole).
 *
 *   bench_fork_touch [mib=512]
 *
 * The parent's AnonHugePages before the fork is printed too.
 * Used for the design notes' cost of huge pages at fork (HAKMEM_THP on and off). */
#include "bench_common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 512;
  size_t n = (mib << 20) / 4096;
  char **blocks = malloc(n * sizeof *blocks);
  if (blocks == NULL) return 1;
  for (size_t i = 0; i < n; i++) {
    blocks[i] = malloc(4096 - 16);
    if (blocks[i] == NULL) return 1;
    memset(blocks[i], 1, 4096 - 16);
  }
  sleep(4); /* the purge thread's passes: huge pages made where they will be */
  char line[256];
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (strncmp(line, "AnonHugePages:", 14) == 0) printf("fork_touch parent %s", line);
  if (f != NULL) fclose(f);
  fflush(stdout);
  double t0 = bench_now();
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    double t1 = bench_now();
    for (size_t i = 0; i < n; i++) blocks[i][0] = 2;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("fork_touch mib=%zu child_ms=%.1f child_minflt=%ld child_maxrss_mb=%.1f\n", mib,
           (bench_now() - t1) * 1e3, ru.ru_minflt, ru.ru_maxrss / 1024.0);
    fflush(stdout);
    _exit(0);
  }
  double fork_ms = (bench_now() - t0) * 1e3;
  int st;
  waitpid(pid, &st, 0);
  printf("fork_touch fork_ms=%.2f\n", fork_ms);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
