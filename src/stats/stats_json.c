/* The statistics report in JSON: every name of ctl.c's table, nested at its dots ("a.b.c"
 * is json["a"]["b"]["c"], and a number between dots indexes an array: "class.5.slabs"
 * is json["class"][5]["slabs"]), after "schema" and "version". Written through a small
 * buffer to a FILE, to stderr with write(2) (HAKMEM_STATS=json at exit), or into memory.
 * The walk is done first: no lock is held while writing. */

#include "stats/stats.h"
#include "hakmem.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

/* Raised when a name changes meaning or goes away (names are only ever added). */
#define HAKMEM_STATS_SCHEMA 1

typedef struct sink {
  FILE *file;
  int fd;                /* or to this descriptor, if >= 0 */
  bool compact;          /* one line (JSON Lines), not the indented form */
  whole_report_t *whole; /* or gathered here, for fd */
  char *mem;             /* or into here, up to cap bytes with the NUL */
  size_t cap;
  size_t total; /* bytes of the report so far */
  size_t held;  /* bytes in buf not yet written */
  char buf[512];
} sink_t;

static void sink_flush(sink_t *s) {
  if (s->held == 0) return;
  if (s->whole != NULL) whole_report_put(s->whole, s->buf, s->held);
  else if (s->fd >= 0) error_write_fd(s->fd, s->buf, s->held);
  else if (s->file != NULL) fwrite(s->buf, 1, s->held, s->file);
  s->held = 0;
}

static void put(sink_t *s, const char *text, size_t n) {
  if (s->mem != NULL || (s->file == NULL && s->fd < 0)) {
    for (size_t i = 0; i < n; i++, s->total++)
      if (s->mem != NULL && s->total + 1 < s->cap) s->mem[s->total] = text[i];
    return;
  }
  s->total += n;
  while (n > 0) {
    if (s->held == sizeof s->buf) sink_flush(s);
    size_t k = sizeof s->buf - s->held < n ? sizeof s->buf - s->held : n;
    memcpy(s->buf + s->held, text, k);
    s->held += k;
    text += k;
    n -= k;
  }
}

static void putf(sink_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(sink_t *s, const char *fmt, ...) {
  char tmp[160];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) put(s, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void indent(sink_t *s, int depth) {
  static const char spaces[] = "                ";
  if (s->compact) return;
  put(s, spaces, (size_t)(2 * depth) < sizeof spaces - 1 ? (size_t)(2 * depth) : sizeof spaces - 1);
}

/* A name split at its dots; "<n>" becomes the class number. */
#define NAME_PARTS 4
typedef struct parts {
  int count;
  const char *at[NAME_PARTS];
  size_t len[NAME_PARTS];
  char number[12];
} parts_t;

static void split(const char *name, uint32_t cls, parts_t *p) {
  p->count = 0;
  snprintf(p->number, sizeof p->number, "%u", cls);
  while (p->count < NAME_PARTS) {
    size_t n = strcspn(name, ".");
    if (n == 3 && memcmp(name, "<n>", 3) == 0) {
      p->at[p->count] = p->number;
      p->len[p->count] = strlen(p->number);
    } else {
      p->at[p->count] = name;
      p->len[p->count] = n;
    }
    p->count++;
    if (name[n] == '\0') break;
    name += n + 1;
  }
}

static bool is_index(const char *part) { return *part >= '0' && *part <= '9'; }

#define PART_MAX 32
typedef struct json_state {
  parts_t open;                    /* the containers open below the root: open.count of them */
  char name[NAME_PARTS][PART_MAX]; /* their names (a class number is rewritten each time) */
  char close[NAME_PARTS];          /* each one's closing bracket */
  bool first[NAME_PARTS + 1];      /* nothing written yet at this depth (0: the root) */
} json_state_t;

static void json_close_to(sink_t *s, json_state_t *st, int depth) {
  while (st->open.count > depth) {
    int k = --st->open.count;
    if (!s->compact) put(s, "\n", 1);
    indent(s, k + 1);
    put(s, &st->close[k], 1);
  }
}

static void json_separate(sink_t *s, json_state_t *st, int depth) {
  if (!st->first[depth]) put(s, ",", 1);
  if (!s->compact) put(s, "\n", 1);
  st->first[depth] = false;
  indent(s, depth + 1);
}

static void json_key(sink_t *s, const char *at, size_t len) {
  put(s, "\"", 1);
  put(s, at, len);
  put(s, "\": ", s->compact ? 2 : 3);
}

static void json_member(sink_t *s, json_state_t *st, const parts_t *p, uint64_t v, bool is_signed) {
  int containers = p->count - 1, common = 0;
  while (common < containers && common < st->open.count && st->open.len[common] == p->len[common] &&
         memcmp(st->open.at[common], p->at[common], p->len[common]) == 0)
    common++;
  json_close_to(s, st, common);
  for (int k = common; k < containers; k++) {
    json_separate(s, st, k);
    if (!is_index(p->at[k])) json_key(s, p->at[k], p->len[k]); /* array elements have none */
    bool array = is_index(p->at[k + 1]);
    put(s, array ? "[" : "{", 1);
    st->close[k] = array ? ']' : '}';
    size_t len = p->len[k] < PART_MAX ? p->len[k] : PART_MAX;
    memcpy(st->name[k], p->at[k], len);
    st->open.at[k] = st->name[k];
    st->open.len[k] = len;
    st->first[k + 1] = true;
    st->open.count = k + 1;
  }
  json_separate(s, st, containers);
  json_key(s, p->at[containers], p->len[containers]);
  if (is_signed) putf(s, "%lld", (long long)(int64_t)v);
  else putf(s, "%llu", (unsigned long long)v);
}

/* The whole report: one walk of every class, then each name in table order, the class
 * names once per class. No lock is held while writing. */
static bool is_class_name(const char *name) { return strncmp(name, "class.<n>.", 10) == 0; }

static void json_report(sink_t *s) {
  stats_walk_t w;
  stats_walk(&w, 0, NUM_CLASSES);
  json_state_t st;
  memset(&st, 0, sizeof st);
  putf(s,
       s->compact ? "{\"schema\":%d,\"version\":\"%d.%d.%d\""
                  : "{\n  \"schema\": %d,\n  \"version\": \"%d.%d.%d\"",
       HAKMEM_STATS_SCHEMA, HAKMEM_VERSION_MAJOR, HAKMEM_VERSION_MINOR, HAKMEM_VERSION_PATCH);
  const hak_ctl_desc_t *d;
  for (size_t i = 0; (d = hak_ctl_describe(i)) != NULL; i++) {
    parts_t p;
    if (!is_class_name(d->name)) {
      split(d->name, 0, &p);
      json_member(s, &st, &p, ctl_value(i, 0, &w), d->is_signed);
      continue;
    }
    size_t end = i; /* the class names are together: each class gets them all */
    while (hak_ctl_describe(end) != NULL && is_class_name(hak_ctl_describe(end)->name)) end++;
    for (uint32_t c = 0; c < NUM_CLASSES; c++) {
      for (size_t k = i; k < end; k++) {
        split(hak_ctl_describe(k)->name, c, &p);
        json_member(s, &st, &p, ctl_value(k, c, &w), hak_ctl_describe(k)->is_signed);
      }
    }
    i = end - 1;
  }
  json_close_to(s, &st, 0);
  if (s->compact) put(s, "}\n", 2);
  else put(s, "\n}\n", 3);
  sink_flush(s);
}

HAK_EXPORT int hak_stats_json(FILE *out) {
  if (out == NULL) return -EINVAL;
  ctl_ensure_init();
  sink_t s = {.file = out, .fd = -1};
  json_report(&s);
  return ferror(out) ? -EIO : 0;
}

HAK_EXPORT int hak_stats_json_buf(char *buf, size_t len, size_t *needed) {
  if (buf == NULL && len != 0) return -EINVAL;
  ctl_ensure_init();
  sink_t s = {.mem = buf, .cap = len, .fd = -1};
  json_report(&s);
  if (len > 0) buf[s.total < len ? s.total : len - 1] = '\0';
  if (needed != NULL) *needed = s.total + 1;
  return s.total < len ? 0 : -ERANGE;
}

/* HAKMEM_STATS=json: the report at exit (text: init.c), where options_report_fd says:
 * indented in a file of its own, else one line, so that the reports of the processes
 * sharing a stream (a launcher's children, a shell pipeline) can be told apart. */
__attribute__((destructor)) static void ctl_report_at_exit(void) {
  if (!__atomic_load_n(&opt.stats_json, __ATOMIC_RELAXED)) return;
  bool own_file;
  int fd = options_report_fd(&own_file);
  if (fd < 0) return;
  whole_report_t whole;
  whole_report_open(&whole, fd);
  sink_t s = {.fd = fd, .compact = !own_file, .whole = &whole};
  json_report(&s);
  whole_report_close(&whole);
  options_report_done(fd);
}
