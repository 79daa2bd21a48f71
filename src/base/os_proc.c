/* What the kernel says of this process's memory, for the limits and the reports: its
 * resident anonymous memory (RssAnon) and its cgroup v2 memory.max. Cold code: read by
 * ctl, the reports and the limits only (CMakeLists.txt: HAKMEM_COLD_SOURCES). */

#include "base/base.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* The decimal number after `key` in text, or 0 (never a negative, never past 2^64). */
static uint64_t number_after(const char *text, const char *key) {
  const char *at = strstr(text, key);
  if (at == NULL) return 0;
  at += strlen(key);
  while (*at == ' ' || *at == '\t') at++;
  uint64_t v = 0;
  for (; *at >= '0' && *at <= '9' && v < UINT64_MAX / 10; at++) v = v * 10 + (uint64_t)(*at - '0');
  return v;
}

uint64_t os_rss_anon(void) {
  char buf[4096];
  int saved = errno;
  size_t n = os_read_proc("/proc/self/status", buf, sizeof buf);
  errno = saved;
  return n == 0 ? 0 : number_after(buf, "\nRssAnon:") * 1024;
}

/* cgroup v2: /proc/self/cgroup has the line "0::/path"; each directory from
 * /sys/fs/cgroup/path up to the root may hold a memory.max ("max" or bytes), and the
 * lowest one is what bounds the process. */
static uint64_t cgroup_memory_max(void);
uint64_t os_cgroup_memory_max(void) {
  int saved = errno;
  uint64_t v = cgroup_memory_max();
  errno = saved;
  return v;
}

static uint64_t cgroup_memory_max(void) {
  /* cgroup2 mounted there, or (the hybrid layout) at its unified/ */
  char line[4096], path[sizeof "/sys/fs/cgroup/unified" + sizeof line + 16];
  const char *root =
      access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/unified";
  size_t root_len = strlen(root);
  if (os_read_proc("/proc/self/cgroup", line, sizeof line) == 0) return 0;
  const char *at = strncmp(line, "0::/", 4) == 0 ? line + 3 : strstr(line, "\n0::/");
  if (at == NULL) return 0;
  if (*at == '\n') at += 4;
  size_t len = strcspn(at, "\n");
  memcpy(path, root, root_len);
  memcpy(path + root_len, at, len);
  len += root_len;
  uint64_t lowest = 0;
  for (;;) {
    while (len > root_len && path[len - 1] == '/') len--;
    memcpy(path + len, "/memory.max", sizeof "/memory.max");
    char value[64];
    if (os_read_proc(path, value, sizeof value) != 0 && value[0] >= '0' && value[0] <= '9') {
      uint64_t v = number_after(value, "");
      if (v != 0 && (lowest == 0 || v < lowest)) lowest = v;
    }
    if (len <= root_len) return lowest;
    while (len > root_len && path[len - 1] != '/') len--; /* the parent */
  }
}
