/* What the first write to fresh memory costs the kernel, in huge and in small pages: maps
 * `mib` MiB, advises it MADV_HUGEPAGE or MADV_NOHUGEPAGE, writes one byte per 4 KiB page
 * and prints the wall and system time of the writes, alternately huge and small, `rounds`
 * times. No allocator is involved (mmap directly).
 *
 *   bench_first_touch [mib=512] [rounds=3]
 *
 * On a VM the first huge round of a process can cost far more than the next ones: the
 * host backs 2 MiB of guest memory it had not backed before. The design notes' "Costs"
 * (docs/huge-pages.md) quote it for the system time huge pages add to a big heap. */
#include "bench_common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#define HUGE_2M ((size_t)2 << 20)

static double sys_now(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return (double)r.ru_stime.tv_sec + (double)r.ru_stime.tv_usec * 1e-6;
}

/* One round: a fresh mapping, aligned to 2 MiB so that every range can be a huge page. */
static void touch(size_t bytes, int huge) {
  char *map = mmap(NULL, bytes + HUGE_2M, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) bench_fail("mmap of %zu MiB failed (errno %d)", bytes >> 20, errno);
  char *p = (char *)(((uintptr_t)map + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
  if (madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0) perror("madvise");
  double w0 = bench_now(), s0 = sys_now();
  for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
  double w1 = bench_now(), s1 = sys_now();
  printf("%-5s pages: first touch of %zu MiB %.3f s wall, %.3f s system\n", huge ? "huge" : "small",
         bytes >> 20, w1 - w0, s1 - s0);
  munmap(map, bytes + HUGE_2M);
}

int main(int argc, char **argv) {
  bench_init("first_touch", "bench_first_touch [mib=512] [rounds=3]");
  bench_arg_count(argc, 2);
  size_t mib = bench_arg_u64(argc, argv, 1, 512);
  uint64_t rounds = bench_arg_u64(argc, argv, 2, 3);
  if (mib == 0 || rounds == 0) bench_usage("mib and rounds must be at least 1");
  for (uint64_t r = 0; r < rounds; r++) {
    touch(mib << 20, 1);
    touch(mib << 20, 0);
  }
  return 0;
}
