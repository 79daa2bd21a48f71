/* HAKMEM_* options: read once, at process start-up, never on a malloc/free path. */

#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

options_t opt = {
    .purge_delay_ms = 100,
    .region_cache = 2,
    .thp = true,
    .stats = false,
    .background = true,
    .prof_rate = 512 * 1024,
    .prof_peak_step = 64L << 20,
};

/* Warnings are written with write(2): this runs inside the allocator's own start-up. */

/* A value we cannot use is reported, not silently dropped: a typo such as
 * HAKMEM_PURGE_DELAY_MS=10ms would otherwise look like a setting that has no effect.
 * The message lists the values the option takes, as its ctl name documents them. */
static void warn_ignored(const char *name, const char *value, const char *takes) {
  const char *parts[] = {
      "hakmem: ignoring ",     name, "=", value, *value ? " (takes " : " (empty; takes ", takes,
      "); the default stays\n"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) error_write_str(parts[i]);
}

/* secure_getenv: a set-user-ID or set-group-ID program ignores HAKMEM_*, as the C
 * library ignores its own MALLOC_* settings there, so that whoever starts it cannot steer
 * its allocator or make it print statistics. */
static const char *option_value(const char *name) { return secure_getenv(name); }

/* Every option: its name, what it takes (the words of its message and of its ctl name's
 * description) and where it goes. A number takes min .. max, and -1 too where
 * minus_one is set. */
enum kind { K_NUMBER, K_BYTES, K_SWITCH, K_STATS, K_BACKGROUND, K_THP, K_TEXT };
typedef struct option {
  const char *name, *takes;
  uint8_t kind;
  bool minus_one;
  long min, max;
  void *to;
} option_t;

#define SWITCH_VALUES "1/0, true/false, yes/no or on/off"
#define THP_VALUES "1/0, true/false, yes/no, on/off or collapse"
#define LIMIT_VALUES "0 (none) or 1M .. 2^50 bytes, with K, M, G or T for 2^10, 2^20, 2^30, 2^40"
/* HAKMEM_FAULT is os.c's (injected failures, Debug builds): known here, so that it is not
 * reported as a misspelling, and reported as ignored in a release build. */
static const char *fault_option;
static const option_t options[] = {
    {"HAKMEM_PURGE_DELAY_MS", "-1 or 0 .. 2^31-1", K_NUMBER, true, 0, INT32_MAX, &opt.purge_delay_ms},
    {"HAKMEM_REGION_CACHE", "0 .. 2^20", K_NUMBER, false, 0, 1L << 20, &opt.region_cache},
    {"HAKMEM_THP", THP_VALUES, K_THP, false, 0, 0, &opt.thp},
    {"HAKMEM_STATS", "1/0, true/false, yes/no, on/off or json", K_STATS, false, 0, 0, &opt.stats},
    {"HAKMEM_STATS_FILE", "a file name, %p for the pid", K_TEXT, false, 0, 0, &opt.stats_file},
    {"HAKMEM_BACKGROUND", SWITCH_VALUES, K_BACKGROUND, false, 0, 0, &opt.background},
    {"HAKMEM_PROF", SWITCH_VALUES, K_SWITCH, false, 0, 0, &opt.prof},
    {"HAKMEM_PROF_RATE", "1 .. 2^40", K_NUMBER, false, 1, 1L << 40, &opt.prof_rate},
    {"HAKMEM_PROF_PREFIX", "a path prefix", K_TEXT, false, 0, 0, &opt.prof_prefix},
    {"HAKMEM_PROF_PEAK_STEP", "0 .. 2^50", K_NUMBER, false, 0, 1L << 50, &opt.prof_peak_step},
    {"HAKMEM_PROF_LEAKS", SWITCH_VALUES, K_SWITCH, false, 0, 0, &opt.prof_leaks},
    {"HAKMEM_LIMIT_SOFT", LIMIT_VALUES, K_BYTES, false, 0, 0, &opt.limit_soft},
    {"HAKMEM_LIMIT_HARD", LIMIT_VALUES, K_BYTES, false, 0, 0, &opt.limit_hard},
    {"HAKMEM_LIMIT_FROM_CGROUP", SWITCH_VALUES, K_SWITCH, false, 0, 0, &opt.limit_from_cgroup},
    {"HAKMEM_FAULT", "a list of failures to inject", K_TEXT, false, 0, 0, &fault_option},
};
#define OPTION_COUNT (sizeof options / sizeof options[0])

static bool parse_number(const option_t *o, const char *v, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno == ERANGE) return false;
  if (!(x >= o->min && x <= o->max) && !(o->minus_one && x == -1)) return false;
  *out = x;
  return true;
}

/* Decimal bytes with an optional binary suffix (K, M, G, T, either case): "64M". */
static bool parse_bytes(const char *v, long *out) {
  char *end;
  errno = 0;
  if (*v < '0' || *v > '9') return false; /* no sign, no space */
  unsigned long long x = strtoull(v, &end, 10);
  if (end == v || errno == ERANGE) return false;
  static const char suffixes[] = "KMGT";
  if (*end != '\0') {
    char c = (char)(*end & ~0x20); /* upper case */
    const char *at = c != '\0' ? strchr(suffixes, c) : NULL;
    if (at == NULL || end[1] != '\0') return false;
    unsigned shift = 10 * (unsigned)(at - suffixes + 1);
    if (x > (LIMIT_MAX >> shift)) return false;
    x <<= shift;
  }
  if (!limit_value_ok(x)) return false;
  *out = (long)x;
  return true;
}

static bool parse_switch(const char *v, bool *out) {
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(v, yes[i]) == 0) {
      *out = true;
      return true;
    }
    if (strcasecmp(v, no[i]) == 0) {
      *out = false;
      return true;
    }
  }
  return false;
}

/* Reads one option, if set: true when its value was taken. */
static bool read_option(const option_t *o) {
  const char *v = option_value(o->name);
  if (v == NULL) return false;
  bool ok = *v != '\0';
  if (ok) {
    switch ((enum kind)o->kind) {
    case K_NUMBER: ok = parse_number(o, v, o->to); break;
    case K_BYTES: ok = parse_bytes(v, o->to); break;
    case K_SWITCH: ok = parse_switch(v, o->to); break;
    case K_STATS: /* json is read by stats_json.c */
      if (strcasecmp(v, "json") == 0) opt.stats_json = true;
      else ok = parse_switch(v, o->to);
      break;
    case K_BACKGROUND: /* `test-fail`: for the tests only, on but cannot be created */
      if (strcmp(v, "test-fail") == 0) opt.background = opt.background_fails = true;
      else ok = parse_switch(v, o->to);
      break;
    case K_THP: /* `test-no-collapse`: for the tests only, on, MADV_COLLAPSE failing with
                 * EINVAL as on a kernel without it (read by the purge thread only) */
      if (strcmp(v, "test-no-collapse") == 0) opt.thp = opt.thp_no_collapse = true;
      /* `collapse`: no fault in malloc waits for a huge page (space/thp.c) */
      else if (strcasecmp(v, "collapse") == 0) opt.thp = opt.thp_collapse_only = true;
      else ok = parse_switch(v, o->to);
      break;
    case K_TEXT: *(const char **)o->to = v; break;
    }
  }
  if (!ok) warn_ignored(o->name, v, o->takes);
  return ok;
}

/* A HAKMEM_ name that is none of ours is reported too: a misspelt one, such as
 * HAKMEM_PURGE_DELAY=0, would otherwise be a setting that silently does nothing. */
static bool known_option(const char *entry, size_t len) {
  for (size_t i = 0; i < OPTION_COUNT; i++)
    if (strlen(options[i].name) == len && memcmp(entry, options[i].name, len) == 0) return true;
  return false;
}

static void warn_unknown_names(void) {
  if (getauxval(AT_SECURE)) return; /* every HAKMEM_ name is ignored there */
  for (char **e = environ; e != NULL && *e != NULL; e++) {
    if (strncmp(*e, "HAKMEM_", 7) != 0) continue;
    size_t len = strcspn(*e, "=");
    if (known_option(*e, len)) continue;
    error_write_str("hakmem: ignoring unknown option ");
    error_write_stderr(*e, len);
    error_write_str(" (known:");
    for (size_t i = 0; i < OPTION_COUNT; i++) {
      error_write_str(" ");
      error_write_str(options[i].name);
    }
    error_write_str(")\n");
  }
}

/* Does the environment hold a HAKMEM_ name that counts here? Compared a letter at a
 * time, against immediates: a program without options reads none of the names above,
 * and so no page of the library's read-only data (see CMakeLists.txt). */
static bool any_option(void) {
  if (getauxval(AT_SECURE)) return false; /* every HAKMEM_ name is ignored there */
  for (char **e = environ; e != NULL && *e != NULL; e++) {
    const char *v = *e;
    if (v[0] == 'H' && v[1] == 'A' && v[2] == 'K' && v[3] == 'M' && v[4] == 'E' && v[5] == 'M' && v[6] == '_')
      return true;
  }
  return false;
}

void options_init(void) {
  if (!any_option()) return;
  int saved_errno = errno; /* start-up must not leave errno changed for the caller */
  warn_unknown_names();
  for (size_t i = 0; i < OPTION_COUNT; i++) read_option(&options[i]);
  if (opt.prof_leaks) opt.prof = true; /* a leak report needs the samples */
  if (opt.stats_file != NULL && !opt.stats_json) opt.stats = true;
  if (!HAKMEM_DEBUG && fault_option != NULL && *fault_option != '\0')
    warn_ignored("HAKMEM_FAULT", fault_option, "a Debug build: release builds inject no failures");
  errno = saved_errno;
}
