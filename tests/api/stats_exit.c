/* What a program may do to fd 2 and to its processes before the statistics report at exit
 * (HAKMEM_STATS); stats_report.sh runs it and checks where the reports land.
 *   plain                allocate, exit
 *   close2 FILE          close fd 2, open FILE (which takes fd 2), write "mine" to it, exit
 *   launch N             start N copies of itself (fork and exec, "leaf"), release them
 *                        together once all have allocated, wait for them, exit
 *   forks N              the same with fork alone: the children exit without an exec
 * Each process prints "pid N" on stdout. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void allocate(void) {
  for (int i = 1; i <= 64; i++) {
    char *p = malloc((size_t)i * 40);
    if (p == NULL) exit(3);
    memset(p, i, (size_t)i * 40);
    if (i % 2) free(p); /* some live, some freed: the report has numbers to write */
  }
  printf("pid %d\n", (int)getpid());
  fflush(stdout);
}

/* A child: allocates, says it is ready, waits for the go (the pipe's end), exits. */
static int leaf(int ready, int go) {
  allocate();
  char c = 1, buf;
  if (write(ready, &c, 1) != 1) return 4;
  while (read(go, &buf, 1) > 0) {}
  return 0;
}

static int launch(const char *self, int n, int exec_it) {
  int ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) return 5;
  for (int i = 0; i < n; i++) {
    pid_t pid = fork();
    if (pid < 0) return 6;
    if (pid > 0) continue;
    close(ready[0]);
    close(go[1]);
    if (!exec_it) exit(leaf(ready[1], go[0]));
    char r[16], g[16];
    snprintf(r, sizeof r, "%d", ready[1]);
    snprintf(g, sizeof g, "%d", go[0]);
    execl(self, self, "leaf", r, g, (char *)NULL);
    _exit(7);
  }
  close(ready[1]);
  close(go[0]);
  char c;
  for (int i = 0; i < n; i++)
    if (read(ready[0], &c, 1) != 1) return 8;
  allocate();
  close(go[1]); /* every child exits now, together */
  int bad = 0, status;
  while (wait(&status) > 0) bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  return bad ? 9 : 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "plain";
  if (strcmp(mode, "plain") == 0) {
    allocate();
    return 0;
  }
  if (strcmp(mode, "close2") == 0 && argc == 3) {
    allocate();
    close(2);
    int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd != 2) return 10;
    return write(fd, "mine\n", 5) == 5 ? 0 : 11;
  }
  if (strcmp(mode, "leaf") == 0 && argc == 4) return leaf(atoi(argv[2]), atoi(argv[3]));
  if (strcmp(mode, "launch") == 0 && argc == 3) return launch(argv[0], atoi(argv[2]), 1);
  if (strcmp(mode, "forks") == 0 && argc == 3) return launch(argv[0], atoi(argv[2]), 0);
  fprintf(stderr, "usage: stats_exit plain|close2 FILE|launch N|forks N\n");
  return 2;
}
