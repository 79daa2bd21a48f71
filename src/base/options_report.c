/* Where the stats report at exit goes: the stderr the process started with, or
 * HAKMEM_STATS_FILE. Only a process that asked for a report runs it: cold code, linked
 * after the hot (CMakeLists.txt, HAKMEM_COLD_SOURCES). */

#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Many programs close or redirect fd 2 before they exit (coreutils close stderr), so a
 * report asked for at start-up keeps a duplicate of the stderr the process started with:
 * close-on-exec (an exec'd program takes its own), and numbered from 100 up so that the
 * low numbers a program expects open() to return stay free. A program that closes every
 * descriptor may reuse that number for a file of its own: the report goes there only if
 * it is still the same file. */
#define REPORT_FD_FLOOR 100
static int kept_fd = -1;
static dev_t kept_dev;
static ino_t kept_ino;
/* What fd 2 was at start-up is known: a file (kept_dev, kept_ino), or closed. A file the
 * program opens later gets no report, even where it takes fd 2. */
static bool kept_known, started_closed;

void options_keep_stderr(void) {
  struct stat st;
  if (kept_known || opt.stats_file != NULL) return;
  kept_known = true;
  if (fstat(2, &st) != 0) {
    started_closed = true;
    return;
  }
  kept_dev = st.st_dev;
  kept_ino = st.st_ino;
  int fd = fcntl(2, F_DUPFD_CLOEXEC, REPORT_FD_FLOOR);
  if (fd < 0) fd = fcntl(2, F_DUPFD_CLOEXEC, 3); /* a descriptor limit under 100 */
  kept_fd = fd;
}

static bool is_kept_file(int fd) {
  struct stat st;
  return fd >= 0 && !started_closed && fstat(fd, &st) == 0 && st.st_dev == kept_dev && st.st_ino == kept_ino;
}

/* The stderr the process started with: its duplicate, or fd 2 if that is still it. */
static int start_stderr(void) {
  if (!kept_known) return fcntl(2, F_GETFD) >= 0 ? 2 : -1;
  if (is_kept_file(kept_fd)) return kept_fd;
  return is_kept_file(2) ? 2 : -1;
}

/* HAKMEM_STATS_FILE with each %p replaced by the pid (and %% by %); false if too long. */
static bool stats_file_name(char *buf, size_t cap, bool *has_pid) {
  size_t at = 0;
  *has_pid = false;
  for (const char *p = opt.stats_file; *p != '\0'; p++) {
    char digits[24];
    size_t n = 1;
    if (p[0] == '%' && p[1] == 'p') {
      n = error_fmt_dec(digits, (uint64_t)getpid());
      *has_pid = true;
      p++;
    } else {
      digits[0] = p[0];
      if (p[0] == '%' && p[1] == '%') p++;
    }
    if (at + n >= cap) return false;
    memcpy(buf + at, digits, n);
    at += n;
  }
  buf[at] = '\0';
  return true;
}

int options_report_fd(bool *own_file) {
  *own_file = false;
  if (opt.stats_file != NULL) {
    char name[4096];
    bool has_pid;
    int fd = -1;
    errno = ENAMETOOLONG;
    if (stats_file_name(name, sizeof name, &has_pid)) {
      /* A file of its own is rewritten; a shared one gets one report more. */
      int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (has_pid ? O_TRUNC : O_APPEND);
      fd = open(name, flags, 0644);
    }
    if (fd >= 0) {
      *own_file = has_pid;
      return fd;
    }
    const char *parts[] = {"hakmem: cannot write the stats report to HAKMEM_STATS_FILE=", opt.stats_file,
                           ": ", strerror(errno), "; it goes to stderr\n"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) error_write_str(parts[i]);
  }
  return start_stderr();
}

void options_report_done(int fd) {
  if (fd > 2 && fd != kept_fd) close(fd);
}
