/* Heap profile writer: profile.proto, gzip, no malloc (see profile.h).
 *
 * Sections, bottom-up: writing a file descriptor; a growable buffer on os_map memory;
 * the protobuf encoder; the string table; the process's mappings and build IDs; the
 * location table; assembling the Profile message; the API. The gzip compressor is
 * prof_gzip.c's.
 */
#include "profile/profile.h"

#include "prof_maps.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

/* ---- growable buffer ------------------------------------------------------------ */

/* Bytes (or an array of structs) on its own mapping, doubled when full: grown in place
 * by mremap when the address space after it is free, else copied to a new mapping.
 * A failure sets err (a positive errno) once; every later append is then ignored, so
 * the encoder checks only at the end. */
typedef struct buf {
  uint8_t *p;
  size_t len, cap;
  int err;
} buf_t;

#define BUF_MIN_CAP ((size_t)64 * 1024) /* a multiple of every page size */

static bool buf_reserve(buf_t *b, size_t extra) {
  if (b->err) return false;
  if (extra <= b->cap - b->len) return true;
  size_t need = b->len + extra;
  size_t cap = b->cap ? b->cap : BUF_MIN_CAP;
  while (cap < need) {
    if (need < b->len || cap > SIZE_MAX / 2) {
      b->err = ENOMEM;
      return false;
    }
    cap *= 2;
  }
  uint8_t *p = b->p ? os_remap(b->p, b->cap, cap, NULL) : NULL;
  if (p == NULL) {
    p = os_map(cap);
    if (p == NULL) {
      b->err = ENOMEM;
      return false;
    }
    if (b->p) {
      memcpy(p, b->p, b->len);
      os_unmap(b->p, b->cap);
    }
  }
  b->p = p;
  b->cap = cap;
  return true;
}

static void buf_append(buf_t *b, const void *p, size_t n) {
  if (n == 0 || !buf_reserve(b, n)) return;
  memcpy(b->p + b->len, p, n);
  b->len += n;
}

static void buf_free(buf_t *b) {
  if (b->p) os_unmap(b->p, b->cap);
  b->p = NULL;
  b->len = b->cap = 0;
}

/* ---- protobuf encoder ----------------------------------------------------------- */

/* Wire types. A message nested in another is written to a scratch buffer first, then
 * copied after its key and length (pb_bytes). */
#define WIRE_VARINT 0
#define WIRE_LEN 2

static size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static void pb_varint(buf_t *b, uint64_t v) {
  if (!buf_reserve(b, 10)) return;
  uint8_t *q = b->p + b->len;
  while (v >= 0x80) {
    *q++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *q++ = (uint8_t)v;
  b->len = (size_t)(q - b->p);
}

static void pb_key(buf_t *b, uint32_t field, unsigned wire) { pb_varint(b, (uint64_t)field << 3 | wire); }

/* uint64, int64 (two's complement, ten bytes when negative) and bool fields. proto3
 * leaves a field at its default (zero) out. */
static void pb_uint(buf_t *b, uint32_t field, uint64_t v) {
  if (v == 0) return;
  pb_key(b, field, WIRE_VARINT);
  pb_varint(b, v);
}

static void pb_bytes(buf_t *b, uint32_t field, const void *p, size_t n) {
  pb_key(b, field, WIRE_LEN);
  pb_varint(b, n);
  buf_append(b, p, n);
}

/* A packed repeated int64/uint64 field. */
static void pb_packed(buf_t *b, uint32_t field, const uint64_t *v, size_t n) {
  if (n == 0) return;
  size_t size = 0;
  for (size_t i = 0; i < n; i++) size += varint_size(v[i]);
  pb_key(b, field, WIRE_LEN);
  pb_varint(b, size);
  for (size_t i = 0; i < n; i++) pb_varint(b, v[i]);
}

/* ---- field numbers of perftools.profiles (proto/profile.proto) -------------------- */
enum {
  PROFILE_SAMPLE_TYPE = 1,
  PROFILE_SAMPLE = 2,
  PROFILE_MAPPING = 3,
  PROFILE_LOCATION = 4,
  PROFILE_STRING_TABLE = 6,
  PROFILE_TIME_NANOS = 9,
  PROFILE_DURATION_NANOS = 10,
  PROFILE_PERIOD_TYPE = 11,
  PROFILE_PERIOD = 12,
  PROFILE_DEFAULT_SAMPLE_TYPE = 14,
  VALUE_TYPE_TYPE = 1,
  VALUE_TYPE_UNIT = 2,
  SAMPLE_LOCATION_ID = 1,
  SAMPLE_VALUE = 2,
  MAPPING_ID = 1,
  MAPPING_MEMORY_START = 2,
  MAPPING_MEMORY_LIMIT = 3,
  MAPPING_FILE_OFFSET = 4,
  MAPPING_FILENAME = 5,
  MAPPING_BUILD_ID = 6,
  LOCATION_ID = 1,
  LOCATION_MAPPING_ID = 2,
  LOCATION_ADDRESS = 3,
};

/* ---- the profile being built ------------------------------------------------------ */

typedef struct str_ref {
  size_t off; /* into writer.strtab */
  size_t len;
} str_ref_t;

/* An executable mapping: a profile Mapping. */
typedef struct exec_map {
  uintptr_t start, end;
  uint64_t offset;
  uint64_t id;
  const char *name; /* into writer.maps_text; not terminated */
  size_t name_len;
} exec_map_t;

typedef struct loc_slot {
  uintptr_t addr; /* 0: empty */
  uint64_t id;
} loc_slot_t;

typedef struct writer {
  buf_t out;         /* the Profile message */
  buf_t msg;         /* scratch: one nested message */
  buf_t packed;      /* scratch: a sample's location ids */
  buf_t strtab;      /* string_table entries, encoded, appended to out at the end */
  buf_t strs;        /* str_ref_t per string: the bytes inside strtab */
  buf_t maps_text;   /* /proc/self/maps */
  buf_t maps;        /* any_map_t */
  buf_t execs;       /* exec_map_t, by address */
  buf_t locs;        /* uintptr_t: return address of location id i + 1 */
  buf_t exe;         /* the main executable's path */
  loc_slot_t *table; /* return address -> location id, open addressing */
  size_t table_cap;  /* slots, a power of two */
} writer_t;

static int writer_error(const writer_t *w) {
  const buf_t *all[] = {&w->out,       &w->msg,  &w->packed, &w->strtab, &w->strs,
                        &w->maps_text, &w->maps, &w->execs,  &w->locs,   &w->exe};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]->err) return -all[i]->err;
  return 0;
}

static void writer_free(writer_t *w) {
  buf_t *all[] = {&w->out,       &w->msg,  &w->packed, &w->strtab, &w->strs,
                  &w->maps_text, &w->maps, &w->execs,  &w->locs,   &w->exe};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) buf_free(all[i]);
  if (w->table) os_unmap(w->table, w->table_cap * sizeof(loc_slot_t));
  w->table = NULL;
}

/* ---- string table ---------------------------------------------------------------- */

/* The index of s in the string table, adding it if new. Few strings are interned (the
 * value names, and a file name and build ID per executable mapping), so a linear search
 * is enough. */
static uint64_t intern(writer_t *w, const char *s, size_t len) {
  const str_ref_t *refs = (const str_ref_t *)w->strs.p;
  size_t n = w->strs.len / sizeof(str_ref_t);
  for (size_t i = 0; i < n; i++)
    if (refs[i].len == len && (len == 0 || memcmp(w->strtab.p + refs[i].off, s, len) == 0)) return i;
  pb_key(&w->strtab, PROFILE_STRING_TABLE, WIRE_LEN);
  pb_varint(&w->strtab, len);
  str_ref_t ref = {w->strtab.len, len};
  buf_append(&w->strtab, s, len);
  buf_append(&w->strs, &ref, sizeof ref);
  if (w->strtab.err || w->strs.err) return 0;
  return n;
}

static uint64_t intern_cstr(writer_t *w, const char *s) { return intern(w, s, strlen(s)); }

/* ---- mappings ------------------------------------------------------------------ */

static bool read_whole_file(const char *path, buf_t *b) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = true;
  for (;;) {
    if (!buf_reserve(b, 16384)) {
      ok = false;
      break;
    }
    ssize_t r = read(fd, b->p + b->len, b->cap - b->len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ok = r == 0;
      break;
    }
    b->len += (size_t)r;
  }
  close(fd);
  return ok;
}

/* Reads /proc/self/maps into w->maps and w->execs (ids not set yet). false only when
 * memory could not be mapped; an unreadable maps file leaves both empty. */
static bool read_mappings(writer_t *w) {
  if (!read_whole_file("/proc/self/maps", &w->maps_text)) {
    if (w->maps_text.err) return false;
    w->maps_text.len = 0;
    return true;
  }
  const char *s = (const char *)w->maps_text.p;
  const char *text_end = s + w->maps_text.len;
  while (s < text_end) {
    const char *eol = memchr(s, '\n', (size_t)(text_end - s));
    if (eol == NULL) eol = text_end;
    any_map_t m;
    bool exec;
    if (prof_maps_parse_line(s, eol, &m, &exec)) {
      buf_append(&w->maps, &m, sizeof m);
      if (exec) {
        exec_map_t e = {m.start, m.end, m.offset, 0, m.name, m.name_len};
        buf_append(&w->execs, &e, sizeof e);
      }
    }
    s = eol + 1;
  }
  return w->maps.err == 0 && w->execs.err == 0;
}

/* The path of the main executable, for putting its mappings first. */
static size_t exe_path(char *path, size_t cap) {
  ssize_t n = readlink("/proc/self/exe", path, cap);
  return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

static void encode_mapping(writer_t *w, exec_map_t *e, uint64_t id) {
  char hex[2 * 64];
  e->id = id;
  size_t hex_len = e->name_len
                       ? prof_maps_build_id((const any_map_t *)w->maps.p, w->maps.len / sizeof(any_map_t),
                                            e->name, e->name_len, hex, sizeof hex)
                       : 0;
  buf_t *m = &w->msg;
  m->len = 0;
  pb_uint(m, MAPPING_ID, id);
  pb_uint(m, MAPPING_MEMORY_START, e->start);
  pb_uint(m, MAPPING_MEMORY_LIMIT, e->end);
  pb_uint(m, MAPPING_FILE_OFFSET, e->offset);
  pb_uint(m, MAPPING_FILENAME, intern(w, e->name, e->name_len));
  if (hex_len) pb_uint(m, MAPPING_BUILD_ID, intern(w, hex, hex_len));
  /* has_functions and the other has_* fields: false, their default, so left out:
   * pprof symbolizes every location itself. */
  if (m->err) return;
  pb_bytes(&w->out, PROFILE_MAPPING, m->p, m->len);
}

/* Mapping messages: the main executable's first, then the rest by address. */
static void encode_mappings(writer_t *w) {
  exec_map_t *execs = (exec_map_t *)w->execs.p;
  size_t n = w->execs.len / sizeof(exec_map_t);
  /* Kept off the stack, like every buffer here: the profiler may run on a small one. */
  const char *exe = NULL;
  size_t exe_len = 0;
  if (buf_reserve(&w->exe, PATH_MAX)) {
    exe = (const char *)w->exe.p;
    exe_len = exe_path((char *)w->exe.p, w->exe.cap);
  }
  uint64_t id = 1;
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < n; i++) {
      bool is_exe = exe_len && same_name(execs[i].name, execs[i].name_len, exe, exe_len);
      if (is_exe == (pass == 0)) encode_mapping(w, &execs[i], id++);
    }
}

/* The id of the executable mapping holding addr, or 0. */
static uint64_t mapping_of(const writer_t *w, uintptr_t addr) {
  const exec_map_t *execs = (const exec_map_t *)w->execs.p;
  size_t lo = 0, hi = w->execs.len / sizeof(exec_map_t);
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (addr < execs[mid].start) hi = mid;
    else if (addr >= execs[mid].end) lo = mid + 1;
    else return execs[mid].id;
  }
  return 0;
}

/* ---- locations ----------------------------------------------------------------- */

#define LOC_TABLE_MIN 1024

static size_t loc_hash(uintptr_t addr, size_t cap) {
  return (size_t)(((uint64_t)addr * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
}

static bool loc_table_grow(writer_t *w) {
  size_t cap = w->table_cap ? w->table_cap * 2 : LOC_TABLE_MIN;
  loc_slot_t *t = os_map(cap * sizeof(loc_slot_t)); /* reads as zero: all empty */
  if (t == NULL) return false;
  for (size_t i = 0; i < w->table_cap; i++) {
    if (w->table[i].addr == 0) continue;
    size_t j = loc_hash(w->table[i].addr, cap);
    while (t[j].addr != 0) j = (j + 1) & (cap - 1);
    t[j] = w->table[i];
  }
  if (w->table) os_unmap(w->table, w->table_cap * sizeof(loc_slot_t));
  w->table = t;
  w->table_cap = cap;
  return true;
}

/* The location id of a return address (nonzero), new ids in order of first sight;
 * 0 when memory ran out. */
static uint64_t location_id(writer_t *w, uintptr_t addr) {
  size_t count = w->locs.len / sizeof(uintptr_t);
  if (2 * (count + 1) > w->table_cap && !loc_table_grow(w)) {
    w->locs.err = ENOMEM;
    return 0;
  }
  size_t j = loc_hash(addr, w->table_cap);
  while (w->table[j].addr != 0) {
    if (w->table[j].addr == addr) return w->table[j].id;
    j = (j + 1) & (w->table_cap - 1);
  }
  buf_append(&w->locs, &addr, sizeof addr);
  if (w->locs.err) return 0;
  w->table[j].addr = addr;
  w->table[j].id = count + 1;
  return count + 1;
}

static void encode_locations(writer_t *w) {
  const uintptr_t *locs = (const uintptr_t *)w->locs.p;
  size_t n = w->locs.len / sizeof(uintptr_t);
  buf_t *m = &w->msg;
  for (size_t i = 0; i < n && !m->err; i++) {
    uintptr_t pc = locs[i] - 1; /* inside the call instruction: see profile.h */
    m->len = 0;
    pb_uint(m, LOCATION_ID, i + 1);
    pb_uint(m, LOCATION_MAPPING_ID, mapping_of(w, pc));
    pb_uint(m, LOCATION_ADDRESS, pc);
    if (!m->err) pb_bytes(&w->out, PROFILE_LOCATION, m->p, m->len);
  }
}

/* ---- the Profile message --------------------------------------------------------- */

static void encode_value_type(writer_t *w, uint32_t field, uint64_t type, uint64_t unit) {
  buf_t *m = &w->msg;
  m->len = 0;
  pb_uint(m, VALUE_TYPE_TYPE, type);
  pb_uint(m, VALUE_TYPE_UNIT, unit);
  if (!m->err) pb_bytes(&w->out, field, m->p, m->len);
}

static void encode_sample(writer_t *w, const prof_sample_t *s) {
  /* Location ids, packed, into `packed`; then the sample into `msg`. */
  buf_t *ids = &w->packed, *m = &w->msg;
  ids->len = 0;
  for (uint32_t i = 0; i < s->depth; i++) {
    if (s->stack[i] == 0) continue;
    pb_varint(ids, location_id(w, s->stack[i]));
  }
  m->len = 0;
  if (ids->len) pb_bytes(m, SAMPLE_LOCATION_ID, ids->p, ids->len);
  uint64_t values[PROF_VALUES];
  for (int i = 0; i < PROF_VALUES; i++) values[i] = (uint64_t)s->values[i];
  pb_packed(m, SAMPLE_VALUE, values, PROF_VALUES);
  if (!m->err && !ids->err) pb_bytes(&w->out, PROFILE_SAMPLE, m->p, m->len);
}

static int build_profile(writer_t *w, const prof_sample_t *samples, size_t n, int64_t period,
                         uint64_t time_ns, uint64_t duration_ns) {
  static const char *const value_names[PROF_VALUES][2] = {
      {"alloc_objects", "count"},
      {"alloc_space", "bytes"},
      {"inuse_objects", "count"},
      {"inuse_space", "bytes"},
  };
  intern(w, "", 0); /* string_table[0] must be "" */
  uint64_t type_names[PROF_VALUES];
  for (int i = 0; i < PROF_VALUES; i++) {
    type_names[i] = intern_cstr(w, value_names[i][0]);
    encode_value_type(w, PROFILE_SAMPLE_TYPE, type_names[i], intern_cstr(w, value_names[i][1]));
  }
  uint64_t space = intern_cstr(w, "space"), bytes = intern_cstr(w, "bytes");
  for (size_t i = 0; i < n; i++) {
    encode_sample(w, &samples[i]);
    if (writer_error(w)) return writer_error(w);
  }
  if (!read_mappings(w)) return writer_error(w) ? writer_error(w) : -ENOMEM;
  encode_mappings(w);
  encode_locations(w);
  /* Every string is interned by now: the table goes out whole. */
  if (!w->strtab.err) buf_append(&w->out, w->strtab.p, w->strtab.len);
  pb_uint(&w->out, PROFILE_TIME_NANOS, time_ns);
  pb_uint(&w->out, PROFILE_DURATION_NANOS, duration_ns);
  encode_value_type(w, PROFILE_PERIOD_TYPE, space, bytes);
  pb_uint(&w->out, PROFILE_PERIOD, (uint64_t)period);
  pb_uint(&w->out, PROFILE_DEFAULT_SAMPLE_TYPE, type_names[PROF_INUSE_SPACE]);
  return writer_error(w);
}

/* ---- API ----------------------------------------------------------------------- */

static int check_args(const prof_sample_t *samples, size_t n) {
  if (n && samples == NULL) return -EINVAL;
  for (size_t i = 0; i < n; i++)
    if (samples[i].depth && samples[i].stack == NULL) return -EINVAL;
  return 0;
}

int prof_write_profile(int fd, const prof_sample_t *samples, size_t n, int64_t period, uint64_t time_ns,
                       uint64_t duration_ns) {
  int saved = errno;
  writer_t w = {0};
  int rc = check_args(samples, n);
  if (rc == 0) rc = build_profile(&w, samples, n, period, time_ns, duration_ns);
  if (rc == 0) rc = prof_gzip_write(fd, w.out.p, w.out.len);
  writer_free(&w);
  errno = saved;
  return rc;
}

int prof_write_file(const char *path, const prof_sample_t *samples, size_t n, int64_t period,
                    uint64_t time_ns, uint64_t duration_ns) {
  int saved = errno;
  writer_t w = {0};
  int rc = path ? check_args(samples, n) : -EINVAL;
  if (rc == 0) rc = build_profile(&w, samples, n, period, time_ns, duration_ns);
  if (rc == 0) {
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
      rc = -errno;
    } else {
      rc = prof_gzip_write(fd, w.out.p, w.out.len);
      if (close(fd) != 0 && rc == 0 && errno != EINTR) rc = -errno;
    }
  }
  writer_free(&w);
  errno = saved;
  return rc;
}
