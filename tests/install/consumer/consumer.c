/* A program built against the installed package: linked with -lhakmem, so its malloc is
 * hakmem's, which hak_get_info must see. Prints "ok" and exits 0 when it is. */
#include <hakmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  hak_info_t before, after;
  hak_get_info(&before);
  enum { N = 1000, SIZE = 1000 };
  static char *blocks[N];
  for (int i = 0; i < N; i++) {
    blocks[i] = malloc(SIZE);
    if (blocks[i] == NULL) return 1;
    memset(blocks[i], i, SIZE);
  }
  hak_get_info(&after);
  for (int i = 0; i < N; i++) free(blocks[i]);
  if (after.in_use < before.in_use + (size_t)N * SIZE) {
    fprintf(stderr, "consumer: malloc is not hakmem's (in use %zu -> %zu)\n", before.in_use, after.in_use);
    return 1;
  }
  printf("ok\n");
  return 0;
}
