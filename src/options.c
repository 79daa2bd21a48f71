/* HAKMEM_* options: read once, at process start-up, never on a malloc/free path. */

#include "internal.h"

#include <stdlib.h>
#include <string.h>

hak_options_t hak_opt = {
    .purge_delay_ms = 100,
    .region_cache = 2,
    .thp = false,
    .stats = false,
};

static bool read_long(const char *name, long *out) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return false;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end != '\0') return false;
  *out = x;
  return true;
}

static void read_bool(const char *name, bool *out) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return;
  *out = !(strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0 ||
           strcasecmp(v, "off") == 0);
}

void options_init(void) {
  long x;
  if (read_long("HAKMEM_PURGE_DELAY_MS", &x)) hak_opt.purge_delay_ms = x < 0 ? -1 : x;
  if (read_long("HAKMEM_REGION_CACHE", &x) && x >= 0) hak_opt.region_cache = x;
  read_bool("HAKMEM_THP", &hak_opt.thp);
  read_bool("HAKMEM_STATS", &hak_opt.stats);
}
