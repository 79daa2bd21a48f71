/* Prints what check_stats.py checks, from hakmem's table of names (hak_ctl_describe):
 *   names      every name, class names once per class: "name signed exact writable"
 *   templates  the table's entries as they are ("class.<n>.slabs"), the same way
 *   markdown   the table of names in docs/stats.md
 *   json       the report, hak_stats_json(stdout), after allocating a few blocks
 *   json-buf   the same through hak_stats_json_buf
 *   values     "name value" for every name, as hak_ctl_get reads it
 */
#include "hakmem.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t class_count(void) {
  uint64_t n = 0;
  if (hak_stats_get("build.class_count", &n) != 0) abort();
  return n;
}

/* Calls fn for every name, "<n>" replaced by each class. */
static void each_name(void (*fn)(const hak_ctl_desc_t *d, const char *name)) {
  const hak_ctl_desc_t *d;
  for (size_t i = 0; (d = hak_ctl_describe(i)) != NULL; i++) {
    const char *at = strstr(d->name, "<n>");
    if (at == NULL) {
      fn(d, d->name);
      continue;
    }
    for (uint64_t c = 0; c < class_count(); c++) {
      char name[128];
      snprintf(name, sizeof name, "%.*s%" PRIu64 "%s", (int)(at - d->name), d->name, c, at + 3);
      fn(d, name);
    }
  }
}

static void print_name(const hak_ctl_desc_t *d, const char *name) {
  printf("%s %d %d %d\n", name, d->is_signed, d->exact, d->writable);
}

static void print_value(const hak_ctl_desc_t *d, const char *name) {
  int64_t v;
  size_t len = sizeof v;
  if (hak_ctl_get(name, &v, &len) != 0) abort();
  if (d->is_signed) printf("%s %" PRId64 "\n", name, v);
  else printf("%s %" PRIu64 "\n", name, (uint64_t)v);
}

static void markdown(void) {
  printf("| name | value | exact | meaning |\n| --- | --- | --- | --- |\n");
  const hak_ctl_desc_t *d;
  for (size_t i = 0; (d = hak_ctl_describe(i)) != NULL; i++)
    printf("| `%s` | %s%s%s | %s | %s |\n", d->name, d->is_signed ? "int64 " : "", d->unit,
           d->writable ? ", writable" : "", d->exact ? "exact" : "approx.", d->doc);
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "names";
  void *keep[8];
  static const size_t sizes[8] = {16, 100, 1000, 5000, 100000, 1 << 20, 3 << 20, 40 << 20};
  for (int i = 0; i < 8; i++) keep[i] = malloc(sizes[i]);
  if (strcmp(what, "names") == 0) each_name(print_name);
  else if (strcmp(what, "values") == 0) each_name(print_value);
  else if (strcmp(what, "markdown") == 0) markdown();
  else if (strcmp(what, "templates") == 0) {
    const hak_ctl_desc_t *d;
    for (size_t i = 0; (d = hak_ctl_describe(i)) != NULL; i++) print_name(d, d->name);
  } else if (strcmp(what, "json") == 0) {
    if (hak_stats_json(stdout) != 0) return 1;
  } else if (strcmp(what, "json-buf") == 0) {
    size_t need = 0;
    if (hak_stats_json_buf(NULL, 0, &need) != -34 /* -ERANGE */ || need < 2) return 1;
    size_t len = need + 4096; /* figures may grow by a digit in between */
    char *buf = malloc(len);
    if (buf == NULL || hak_stats_json_buf(buf, len, &need) != 0 || strlen(buf) + 1 != need) return 1;
    fputs(buf, stdout);
    free(buf);
  } else {
    fprintf(stderr, "usage: ctl_dump names|templates|values|markdown|json|json-buf\n");
    return 2;
  }
  for (int i = 0; i < 8; i++) free(keep[i]);
  return 0;
}
