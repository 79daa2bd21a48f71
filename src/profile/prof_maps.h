/* /proc/self/maps lines and GNU build IDs of loaded ELF images, for the heap profile
 * writer (prof_proto.c); prof_maps.c. No malloc. */
#ifndef HAKMEM_PROF_MAPS_H
#define HAKMEM_PROF_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* Any mapping of /proc/self/maps, for finding an ELF image's header and notes. */
typedef struct any_map {
  uintptr_t start, end;
  uint64_t offset;
  bool readable;
  const char *name;
  size_t name_len;
} any_map_t;

/* Parses one line [s, end) of /proc/self/maps into *m (name not terminated, pointing
 * into the line); *exec: the mapping is executable. false if the line is malformed. */
bool prof_maps_parse_line(const char *s, const char *end, any_map_t *m, bool *exec);
/* The GNU build ID, as hex in hex[0 .. hex_cap), of the ELF file mapped as `name`, read
 * from its loaded image after checking each byte lies in a readable mapping of that file
 * (maps[0 .. n)). Returns the hex length, or 0. */
size_t prof_maps_build_id(const any_map_t *maps, size_t n, const char *name, size_t name_len, char *hex,
                          size_t hex_cap);

#pragma GCC visibility pop

#endif
