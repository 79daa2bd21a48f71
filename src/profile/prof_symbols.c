/* Names for the heap profiler's return addresses, and the leak report (profile.h).
 *
 * A name comes from dladdr (the dynamic symbol table) when it has one for the address;
 * otherwise (a static function, or a program not linked with -rdynamic) from the
 * .symtab of the file on disk, which the linker keeps unless the file was stripped:
 * the file is mapped read-only, its section headers give the symbol and string tables,
 * and the function whose range holds the address wins. A stripped file's names come from
 * its detached debug file, found by build ID under /usr/lib/debug/.build-id (where
 * Debian's -dbg and -dbgsym packages put them). No malloc, no stdio: this runs inside
 * the allocator at exit. The last file's mapping is kept for the next address. */

#include "profile/profile.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The mapped file whose .symtab was read last. */
static struct {
  char path[512];
  const uint8_t *map;
  size_t size;
} symfile;

static const uint8_t *map_path(const char *path, size_t *size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  void *m = MAP_FAILED;
  if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(ElfW(Ehdr)))
    m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return NULL;
  *size = (size_t)st.st_size;
  return m;
}

/* The file's section headers, or NULL when it is not a 64-bit ELF file with them. */
static const ElfW(Shdr) * sections(const uint8_t *f, size_t size, size_t *count) {
  if (size < sizeof(ElfW(Ehdr)) || memcmp(f, ELFMAG, SELFMAG) != 0 || f[EI_CLASS] != ELFCLASS64) return NULL;
  const ElfW(Ehdr) *eh = (const void *)f;
  if (eh->e_shoff == 0 || eh->e_shoff + (size_t)eh->e_shnum * sizeof(ElfW(Shdr)) > size) return NULL;
  *count = eh->e_shnum;
  return (const void *)(f + eh->e_shoff);
}

static int has_symtab(const uint8_t *f, size_t size) {
  size_t n = 0;
  const ElfW(Shdr) *sh = sections(f, size, &n);
  for (size_t i = 0; sh != NULL && i < n; i++)
    if (sh[i].sh_type == SHT_SYMTAB) return 1;
  return 0;
}

/* /usr/lib/debug/.build-id/xx/yyyy.debug for the file's GNU build ID, or 0. */
static int debug_path(const uint8_t *f, size_t size, char *out, size_t out_size) {
  static const char dir[] = "/usr/lib/debug/.build-id/";
  static const char hex[] = "0123456789abcdef";
  size_t n = 0;
  const ElfW(Shdr) *sh = sections(f, size, &n);
  for (size_t i = 0; sh != NULL && i < n; i++) {
    if (sh[i].sh_type != SHT_NOTE || sh[i].sh_offset + sh[i].sh_size > size) continue;
    const uint8_t *p = f + sh[i].sh_offset, *end = p + sh[i].sh_size;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *nh = (const void *)p;
      const uint8_t *desc = p + sizeof *nh + ((nh->n_namesz + 3) & ~3u);
      if (desc + nh->n_descsz > end) break;
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(p + sizeof *nh, "GNU", 4) == 0 &&
          nh->n_descsz >= 2 && sizeof dir + 2 * nh->n_descsz + 8 <= out_size) {
        size_t at = sizeof dir - 1;
        memcpy(out, dir, at);
        for (size_t k = 0; k < nh->n_descsz; k++) {
          out[at++] = hex[desc[k] >> 4];
          out[at++] = hex[desc[k] & 15];
          if (k == 0) out[at++] = '/';
        }
        memcpy(out + at, ".debug", 7);
        return 1;
      }
      p = desc + ((nh->n_descsz + 3) & ~3u);
    }
  }
  return 0;
}

/* The mapping that holds path's symbol table: the file itself, or its debug file. */
static const uint8_t *map_file(const char *path, size_t *size) {
  if (symfile.map != NULL && strcmp(symfile.path, path) == 0) {
    *size = symfile.size;
    return symfile.map;
  }
  if (strlen(path) >= sizeof symfile.path) return NULL;
  const uint8_t *m = map_path(path, size);
  if (m == NULL) return NULL;
  char dbg[128];
  if (!has_symtab(m, *size) && debug_path(m, *size, dbg, sizeof dbg)) {
    size_t dsize;
    const uint8_t *d = map_path(dbg, &dsize);
    if (d != NULL && has_symtab(d, dsize)) {
      munmap((void *)m, *size);
      m = d;
      *size = dsize;
    } else if (d != NULL) {
      munmap((void *)d, dsize);
    }
  }
  if (symfile.map != NULL) munmap((void *)symfile.map, symfile.size);
  symfile.map = m;
  symfile.size = *size;
  strcpy(symfile.path, path);
  return m;
}

/* The function in the file's .symtab holding vaddr (the file's own addresses), or NULL;
 * *off: vaddr's distance from its start. */
static const char *symtab_lookup(const char *path, uintptr_t vaddr, uintptr_t *off) {
  size_t size;
  const uint8_t *f = map_file(path, &size);
  size_t nsec = 0;
  const ElfW(Shdr) *sh = f != NULL ? sections(f, size, &nsec) : NULL;
  for (size_t i = 0; sh != NULL && i < nsec; i++) {
    if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= nsec) continue;
    const ElfW(Shdr) *str = &sh[sh[i].sh_link];
    if (sh[i].sh_offset + sh[i].sh_size > size || str->sh_offset + str->sh_size > size) return NULL;
    const ElfW(Sym) *sym = (const void *)(f + sh[i].sh_offset);
    size_t count = sh[i].sh_size / sizeof *sym;
    for (size_t k = 0; k < count; k++) {
      if (ELF64_ST_TYPE(sym[k].st_info) != STT_FUNC || sym[k].st_value == 0) continue;
      if (vaddr < sym[k].st_value || vaddr >= sym[k].st_value + (sym[k].st_size ? sym[k].st_size : 1))
        continue;
      if (sym[k].st_name >= str->sh_size) return NULL;
      *off = vaddr - sym[k].st_value;
      return (const char *)f + str->sh_offset + sym[k].st_name;
    }
  }
  return NULL;
}

size_t prof_symbolize(uintptr_t addr, char *buf, size_t size) {
  Dl_info info;
  ElfW(Sym) *sym = NULL;
  char num[24];
  size_t at = 0;
  /* addr is a return address: addr - 1 lies in the call, inside the caller. */
#ifdef __GLIBC__
  if (dladdr1((void *)(addr - 1), &info, (void **)&sym, RTLD_DL_SYMENT) == 0) info.dli_fname = NULL;
  bool in_sym = sym != NULL && addr - 1 < (uintptr_t)info.dli_saddr + (sym->st_size ? sym->st_size : 1);
#else /* musl: dladdr alone, the nearest dynamic symbol below, no size to check it by */
  if (dladdr((void *)(addr - 1), &info) == 0) info.dli_fname = NULL;
  bool in_sym = sym == NULL;
#endif
  const char *name = NULL;
  uintptr_t off = 0;
  if (info.dli_fname != NULL && info.dli_sname != NULL && in_sym) {
    name = info.dli_sname;
    off = addr - (uintptr_t)info.dli_saddr;
  } else if (info.dli_fname != NULL) {
    const char *path = info.dli_fname[0] ? info.dli_fname : "/proc/self/exe";
    /* The file's own addresses: the load bias is where its vaddr 0 would be. */
#ifdef __GLIBC__
    struct link_map *lm = NULL;
    if (dladdr1((void *)(addr - 1), &info, (void **)&lm, RTLD_DL_LINKMAP) != 0 && lm != NULL) {
      name = symtab_lookup(path, addr - 1 - lm->l_addr, &off);
      off++;
    }
#else /* musl's dli_fbase: the file's base, its vaddr 0 for a PIE or a library */
    name = symtab_lookup(path, addr - 1 - (uintptr_t)info.dli_fbase, &off);
    off++;
#endif
  }
  at = error_append(buf, at, size, name ? name : "??");
  if (name) {
    at = error_append(buf, at, size, "+");
    num[error_fmt_hex(num, off)] = '\0';
    at = error_append(buf, at, size, num);
  }
  if (info.dli_fname != NULL) {
    const char *file = info.dli_fname[0] ? info.dli_fname : "the program";
    at = error_append(buf, at, size, " (");
    at = error_append(buf, at, size, file);
    at = error_append(buf, at, size, ")");
  }
  buf[at] = '\0';
  return at;
}

static void put_u64(uint64_t x) {
  char b[24];
  error_write_stderr(b, error_fmt_dec(b, x));
}

#define LEAK_FRAMES 16

void prof_leak_report(const prof_stack_t *all, const uint32_t *order, size_t used, long rate, size_t max) {
  double total = 0, objects = 0;
  size_t count = 0;
#define stacks(k) (all[order[k]])
  for (size_t i = 0; i < used; i++) {
    if (stacks(i).inuse_bytes < 0.5) continue;
    total += stacks(i).inuse_bytes;
    objects += stacks(i).inuse_objects;
    count++;
  }
  error_write_str("hakmem: leak report: ");
  put_u64((uint64_t)(total + 0.5));
  error_write_str(" bytes in ");
  put_u64((uint64_t)(objects + 0.5));
  error_write_str(" blocks still live at exit, from ");
  put_u64(count);
  error_write_str(rate <= 1 ? " stacks (every allocation recorded)\n" : " stacks (sampled: estimates)\n");
  double below = 1e300; /* the largest not yet printed is below this; ties by index */
  size_t below_i = 0;
  for (size_t shown = 0; shown < max && shown < count; shown++) {
    size_t best = used;
    for (size_t i = 0; i < used; i++) {
      double v = stacks(i).inuse_bytes;
      if (v < 0.5) continue;
      if (v > below || (v == below && i <= below_i)) continue;
      if (best == used || v > stacks(best).inuse_bytes) best = i;
    }
    if (best == used) break;
    below = stacks(best).inuse_bytes;
    below_i = best;
    error_write_str("hakmem: leak ");
    put_u64(shown + 1);
    error_write_str(": ");
    put_u64((uint64_t)(stacks(best).inuse_bytes + 0.5));
    error_write_str(" bytes in ");
    put_u64((uint64_t)(stacks(best).inuse_objects + 0.5));
    error_write_str(" blocks allocated at\n");
    for (uint32_t k = 0; k < stacks(best).depth && k < LEAK_FRAMES; k++) {
      char line[640];
      size_t n = 0;
      n = error_append(line, n, sizeof line, "    #");
      char num[24];
      num[error_fmt_dec(num, k)] = '\0';
      n = error_append(line, n, sizeof line, num);
      n = error_append(line, n, sizeof line, " ");
      n += prof_symbolize(stacks(best).frames[k], line + n, sizeof line - n - 1);
      line[n++] = '\n';
      error_write_stderr(line, n);
    }
  }
#undef stacks
}
