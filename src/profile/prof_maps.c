/* /proc/self/maps lines and the GNU build IDs of loaded ELF images (prof_maps.h), for
 * the heap profile writer. Reads only memory that /proc/self/maps says is a readable
 * mapping of the file; no malloc. */
#include "profile/profile.h"
#include "prof_maps.h"

#include <elf.h>
#include <string.h>

static bool parse_hex(const char **s, const char *end, uint64_t *v) {
  const char *p = *s;
  uint64_t x = 0;
  while (p < end) {
    char c = *p;
    unsigned d;
    if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') d = (unsigned)(c - 'A' + 10);
    else break;
    x = x << 4 | d;
    p++;
  }
  if (p == *s) return false;
  *s = p;
  *v = x;
  return true;
}

static void skip_field(const char **s, const char *end) {
  while (*s < end && **s != ' ') (*s)++;
  while (*s < end && **s == ' ') (*s)++;
}

/* One line of /proc/self/maps: "start-end perms offset dev inode   [path]". */
bool prof_maps_parse_line(const char *s, const char *end, any_map_t *m, bool *exec) {
  uint64_t start, lim, off;
  if (!parse_hex(&s, end, &start) || s == end || *s++ != '-') return false;
  if (!parse_hex(&s, end, &lim) || s == end || *s++ != ' ') return false;
  if (end - s < 5) return false;
  m->readable = s[0] == 'r';
  *exec = s[2] == 'x';
  s += 4;
  while (s < end && *s == ' ') s++;
  if (!parse_hex(&s, end, &off)) return false;
  while (s < end && *s == ' ') s++;
  skip_field(&s, end); /* device */
  skip_field(&s, end); /* inode, and the spaces before the path */
  m->start = (uintptr_t)start;
  m->end = (uintptr_t)lim;
  m->offset = off;
  m->name = s;
  m->name_len = (size_t)(end - s);
  return start < lim;
}

/* The readable mapping of `name` holding [addr, addr + size), or NULL. */
static const any_map_t *readable_range(const any_map_t *maps, size_t n, const char *name, size_t name_len,
                                       uintptr_t addr, size_t size) {
  if (addr + size < addr) return NULL;
  for (size_t i = 0; i < n; i++) {
    const any_map_t *m = &maps[i];
    if (m->readable && addr >= m->start && addr + size <= m->end &&
        same_name(m->name, m->name_len, name, name_len))
      return m;
  }
  return NULL;
}

#if UINTPTR_MAX > 0xffffffffu
typedef Elf64_Ehdr elf_ehdr_t;
typedef Elf64_Phdr elf_phdr_t;
#define ELF_CLASS ELFCLASS64
#else
typedef Elf32_Ehdr elf_ehdr_t;
typedef Elf32_Phdr elf_phdr_t;
#define ELF_CLASS ELFCLASS32
#endif

/* A GNU build ID note in [p, p + size), notes aligned to `align`: its hex string in
 * hex[], or 0. */
static size_t find_build_id(const uint8_t *p, size_t size, size_t align, char *hex, size_t hex_cap) {
  static const char digits[] = "0123456789abcdef";
  size_t pos = 0;
  while (size - pos >= sizeof(Elf64_Nhdr)) { /* Elf32_Nhdr and Elf64_Nhdr are alike */
    Elf64_Nhdr nh;
    memcpy(&nh, p + pos, sizeof nh);
    size_t name_at = pos + sizeof nh;
    size_t name_sz = ((size_t)nh.n_namesz + align - 1) & ~(align - 1);
    size_t desc_sz = ((size_t)nh.n_descsz + align - 1) & ~(align - 1);
    if (name_sz > size - name_at || desc_sz > size - name_at - name_sz) return 0;
    size_t desc_at = name_at + name_sz;
    if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && memcmp(p + name_at, "GNU", 4) == 0 &&
        nh.n_descsz > 0 && nh.n_descsz * 2 <= hex_cap) {
      for (size_t i = 0; i < nh.n_descsz; i++) {
        hex[2 * i] = digits[p[desc_at + i] >> 4];
        hex[2 * i + 1] = digits[p[desc_at + i] & 15];
      }
      return 2 * (size_t)nh.n_descsz;
    }
    pos = desc_at + desc_sz;
  }
  return 0;
}

/* The GNU build ID of the ELF file mapped as `name`, read from its loaded image: the
 * ELF header in the mapping of file offset 0, then the PT_NOTE segments. Every byte is
 * checked to lie in a readable mapping of that file first. Returns the hex length, or 0. */
size_t prof_maps_build_id(const any_map_t *maps, size_t n, const char *name, size_t name_len, char *hex,
                          size_t hex_cap) {
  const any_map_t *head = NULL;
  for (size_t i = 0; i < n && head == NULL; i++)
    if (maps[i].offset == 0 && maps[i].readable && same_name(maps[i].name, maps[i].name_len, name, name_len))
      head = &maps[i];
  if (head == NULL || head->end - head->start < sizeof(elf_ehdr_t)) return 0;
  elf_ehdr_t eh;
  memcpy(&eh, (const void *)head->start, sizeof eh);
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELF_CLASS ||
      eh.e_phentsize != sizeof(elf_phdr_t) || eh.e_phnum == 0 || eh.e_phnum == PN_XNUM)
    return 0;
  size_t ph_size = (size_t)eh.e_phnum * sizeof(elf_phdr_t);
  if (eh.e_phoff > head->end - head->start || ph_size > head->end - head->start - eh.e_phoff) return 0;
  const uint8_t *ph = (const uint8_t *)head->start + eh.e_phoff;
  /* The load bias: where the segment holding file offset 0 was put, less its address. */
  uintptr_t bias = 0;
  bool have_bias = false;
  for (size_t i = 0; i < eh.e_phnum && !have_bias; i++) {
    elf_phdr_t phdr;
    memcpy(&phdr, ph + i * sizeof phdr, sizeof phdr);
    if (phdr.p_type == PT_LOAD && phdr.p_offset == 0) {
      bias = head->start - (uintptr_t)phdr.p_vaddr;
      have_bias = true;
    }
  }
  if (!have_bias) return 0;
  for (size_t i = 0; i < eh.e_phnum; i++) {
    elf_phdr_t phdr;
    memcpy(&phdr, ph + i * sizeof phdr, sizeof phdr);
    if (phdr.p_type != PT_NOTE || phdr.p_filesz == 0) continue;
    uintptr_t at = bias + (uintptr_t)phdr.p_vaddr;
    size_t size = (size_t)phdr.p_filesz;
    if (readable_range(maps, n, name, name_len, at, size) == NULL) continue;
    size_t align = phdr.p_align == 8 ? 8 : 4;
    size_t len = find_build_id((const uint8_t *)at, size, align, hex, hex_cap);
    if (len) return len;
  }
  return 0;
}
