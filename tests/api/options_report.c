/* Prints hakmem's statistics report (which ends with the options in force) after one
 * allocation, and whether the process runs in secure mode (set-user-ID and the like);
 * options_env.sh runs it under different HAKMEM_* settings. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

int main(void) {
  char *p = malloc(100);
  if (p == NULL) return 1;
  memset(p, 1, 100);
  free(p);
  fprintf(stderr, "at_secure=%lu\n", getauxval(AT_SECURE));
  malloc_stats();
  return 0;
}
