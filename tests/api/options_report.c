/* Prints hakmem's statistics report (which ends with the options in force) after one
 * allocation; options_env.sh runs it under different HAKMEM_* settings. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char *p = malloc(100);
  if (p == NULL) return 1;
  memset(p, 1, 100);
  free(p);
  malloc_stats();
  return 0;
}
