/* exec_rusage — runs a program and writes what the kernel counted for it.
 *
 * usage: bench_exec_rusage OUTFILE PROGRAM [ARGS...]
 *
 * The real-programs part of the harness starts every measured program through this
 * helper instead of directly from Python, for the peak RSS: the kernel folds into a
 * process's ru_maxrss the high-water mark of the memory image it replaced at exec, and a
 * child forked from the Python harness starts with the harness's 15-25 MiB. Forked from
 * this small helper, the program starts at about 1 MiB (what /usr/bin/time shows too).
 *
 * The helper itself runs with no allocator preloaded: the harness passes the allocator
 * in BENCH_CHILD_LD_PRELOAD, which becomes the program's LD_PRELOAD (an empty value
 * leaves it unset). The program inherits stdin, stdout and stderr.
 *
 * After the program exits, OUTFILE gets one line:
 *   utime_us=U stime_us=S maxrss_kib=K minflt=N majflt=N nvcsw=N nivcsw=N exit=E
 * where the rusage is wait4's: the program's own plus that of every descendant it
 * waited for (a shell script's commands, git's subprocesses), and exit=E is its exit
 * code, or exit=-N when signal N killed it. The helper exits with the program's code
 * (128+N for a signal); 125 when it could not run the program at all.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define PRELOAD_VAR "BENCH_CHILD_LD_PRELOAD"

static long long usec(struct timeval tv) { return (long long)tv.tv_sec * 1000000LL + tv.tv_usec; }

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s OUTFILE PROGRAM [ARGS...]\n", argv[0]);
    return 125;
  }
  const char *outfile = argv[1];
  const char *preload = getenv(PRELOAD_VAR);
  if (preload != NULL) {
    if (preload[0] != '\0') setenv("LD_PRELOAD", preload, 1);
    else unsetenv("LD_PRELOAD");
    unsetenv(PRELOAD_VAR);
  }

  pid_t pid = fork();
  if (pid < 0) {
    perror("exec_rusage: fork");
    return 125;
  }
  if (pid == 0) {
    execvp(argv[2], argv + 2);
    fprintf(stderr, "exec_rusage: cannot run %s: %s\n", argv[2], strerror(errno));
    _exit(127);
  }

  int status = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      perror("exec_rusage: wait4");
      return 125;
    }
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);

  FILE *f = fopen(outfile, "w");
  if (f == NULL) {
    perror("exec_rusage: cannot write the result file");
    return 125;
  }
  fprintf(f,
          "utime_us=%lld stime_us=%lld maxrss_kib=%ld minflt=%ld majflt=%ld nvcsw=%ld nivcsw=%ld "
          "exit=%d\n",
          usec(ru.ru_utime), usec(ru.ru_stime), ru.ru_maxrss, ru.ru_minflt, ru.ru_majflt, ru.ru_nvcsw,
          ru.ru_nivcsw, code);
  if (fclose(f) != 0) {
    perror("exec_rusage: cannot write the result file");
    return 125;
  }
  return code >= 0 ? code : 128 - code;
}
