/* HAKMEM_* options: read once, at process start-up, never on a malloc/free path. */

#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

hak_options_t hak_opt = {
    .purge_delay_ms = 100,
    .region_cache = 2,
    .thp = true,
    .stats = false,
    .background = true,
    .prof_rate = 512 * 1024,
    .prof_peak_step = 64L << 20,
};

/* Warnings are written with write(2): this runs inside the allocator's own start-up. */
static void put_stderr(const char *text) { hak_write_stderr(text, strlen(text)); }

/* A value we cannot use is reported, not silently dropped: a typo such as
 * HAKMEM_PURGE_DELAY_MS=10ms would otherwise look like a setting that has no effect. */
static void warn_ignored(const char *name, const char *value, const char *expected) {
  const char *parts[] = {"hakmem: ignoring ", name, "=", value, " (expected ", expected,
                         "); the default stays\n"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) put_stderr(parts[i]);
}

/* secure_getenv: a set-user-ID or set-group-ID program ignores HAKMEM_*, as the C
 * library ignores its own MALLOC_* settings there, so that whoever starts it cannot steer
 * its allocator or make it print statistics. */
static const char *option_value(const char *name) { return secure_getenv(name); }

static bool read_long(const char *name, long min, const char *expected, long *out) {
  const char *v = option_value(name);
  if (v == NULL || *v == '\0') return false;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (*end != '\0' || errno == ERANGE || x < min) {
    warn_ignored(name, v, expected);
    return false;
  }
  *out = x;
  return true;
}

static void read_bool(const char *name, bool *out) {
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};
  const char *v = option_value(name);
  if (v == NULL || *v == '\0') return;
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(v, yes[i]) == 0) { *out = true; return; }
    if (strcasecmp(v, no[i]) == 0) { *out = false; return; }
  }
  warn_ignored(name, v, "1/0, true/false, yes/no or on/off");
}

/* A HAKMEM_ name that is none of ours is reported too: a misspelt one, such as
 * HAKMEM_PURGE_DELAY=0, would otherwise be a setting that silently does nothing. */
static const char *const option_names[] = {"HAKMEM_PURGE_DELAY_MS", "HAKMEM_REGION_CACHE",
                                           "HAKMEM_THP", "HAKMEM_STATS", "HAKMEM_BACKGROUND",
                                           "HAKMEM_PROF", "HAKMEM_PROF_RATE",
                                           "HAKMEM_PROF_PREFIX", "HAKMEM_PROF_PEAK_STEP",
                                           "HAKMEM_PROF_LEAKS"};
enum { OPT_PURGE_DELAY_MS, OPT_REGION_CACHE, OPT_THP, OPT_STATS, OPT_BACKGROUND,
       OPT_PROF, OPT_PROF_RATE, OPT_PROF_PREFIX, OPT_PROF_PEAK_STEP, OPT_PROF_LEAKS,
       OPTION_COUNT = sizeof option_names / sizeof option_names[0] };

static bool known_option(const char *entry, size_t len) {
  for (size_t i = 0; i < OPTION_COUNT; i++)
    if (strlen(option_names[i]) == len && memcmp(entry, option_names[i], len) == 0) return true;
  return false;
}

static void warn_unknown_names(void) {
  if (getauxval(AT_SECURE)) return; /* every HAKMEM_ name is ignored there */
  for (char **e = environ; e != NULL && *e != NULL; e++) {
    if (strncmp(*e, "HAKMEM_", 7) != 0) continue;
    size_t len = strcspn(*e, "=");
    if (known_option(*e, len)) continue;
    put_stderr("hakmem: ignoring unknown option ");
    hak_write_stderr(*e, len);
    put_stderr(" (known:");
    for (size_t i = 0; i < OPTION_COUNT; i++) {
      put_stderr(" ");
      put_stderr(option_names[i]);
    }
    put_stderr(")\n");
  }
}

/* Does the environment hold a HAKMEM_ name that counts here? Compared a letter at a
 * time, against immediates: a program without options reads none of the names above,
 * and so no page of the library's read-only data (see CMakeLists.txt). */
static bool any_option(void) {
  if (getauxval(AT_SECURE)) return false; /* every HAKMEM_ name is ignored there */
  for (char **e = environ; e != NULL && *e != NULL; e++) {
    const char *v = *e;
    if (v[0] == 'H' && v[1] == 'A' && v[2] == 'K' && v[3] == 'M' && v[4] == 'E' && v[5] == 'M' &&
        v[6] == '_')
      return true;
  }
  return false;
}

void options_init(void) {
  if (!any_option()) return;
  int saved_errno = errno; /* start-up must not leave errno changed for the caller */
  warn_unknown_names();
  long x;
  if (read_long(option_names[OPT_PURGE_DELAY_MS], LONG_MIN, "milliseconds, or -1 for never", &x))
    hak_opt.purge_delay_ms = x < 0 ? -1 : x;
  if (read_long(option_names[OPT_REGION_CACHE], 0, "a count of regions, 0 or more", &x))
    hak_opt.region_cache = x;
  /* `test-no-collapse`: for the tests only, huge pages on, MADV_COLLAPSE failing with
   * EINVAL as on a kernel without it (read by the purge thread only). */
  const char *thp = option_value(option_names[OPT_THP]);
  if (thp != NULL && strcmp(thp, "test-no-collapse") == 0) hak_opt.thp = hak_opt.thp_no_collapse = true;
  else read_bool(option_names[OPT_THP], &hak_opt.thp);
  const char *stats = option_value(option_names[OPT_STATS]);
  if (stats != NULL && strcasecmp(stats, "json") == 0) hak_opt.stats_json = true; /* ctl.c */
  else read_bool(option_names[OPT_STATS], &hak_opt.stats);
  /* `test-fail`: for the tests only, the purge thread is on but cannot be created. */
  const char *bg = option_value(option_names[OPT_BACKGROUND]);
  if (bg != NULL && strcmp(bg, "test-fail") == 0) hak_opt.background = hak_opt.background_fails = true;
  else read_bool(option_names[OPT_BACKGROUND], &hak_opt.background);
  read_bool(option_names[OPT_PROF], &hak_opt.prof);
  read_bool(option_names[OPT_PROF_LEAKS], &hak_opt.prof_leaks);
  if (hak_opt.prof_leaks) hak_opt.prof = true; /* a leak report needs the samples */
  if (read_long(option_names[OPT_PROF_RATE], 1, "bytes between samples, 1 or more", &x))
    hak_opt.prof_rate = x;
  if (read_long(option_names[OPT_PROF_PEAK_STEP], 0, "bytes, 0 for no peak profiles", &x))
    hak_opt.prof_peak_step = x;
  const char *prefix = option_value(option_names[OPT_PROF_PREFIX]);
  if (prefix != NULL && *prefix != '\0') hak_opt.prof_prefix = prefix;
  errno = saved_errno;
}
