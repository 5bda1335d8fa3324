#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TH_MAX 512

static struct {
  const char *name;
  th_fn fn;
} th_tests[TH_MAX];
static int th_count;

void th_register(const char *name, th_fn fn) {
  if (th_count == TH_MAX) {
    fprintf(stderr, "harness: too many tests\n");
    exit(2);
  }
  th_tests[th_count].name = name;
  th_tests[th_count].fn = fn;
  th_count++;
}

void th_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "  FAIL %s:%d [pid %d]: ", file, line, (int)getpid());
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  fflush(stderr);
  exit(1);
}

void th_check_acl(const char *file, int line, const char *call, aclError got, aclError want, const char *needle) {
  const char *m = aclGetRecentErrMsg();
  if (got != want) th_fail(file, line, "%s returned %d, expected %d (%s)", call, got, (int)want, m ? m : "no message");
  if (got != ACL_SUCCESS && (m == NULL || m[0] == '\0'))
    th_fail(file, line, "%s failed with %d but left no message", call, got);
  if (needle && (!m || !strstr(m, needle)))
    th_fail(file, line, "%s: message \"%s\" lacks \"%s\"", call, m ? m : "(none)", needle);
}

static int th_timeout(void) {
  const char *s = getenv("TEST_TIMEOUT");
  int t = s ? atoi(s) : 0;
  return t > 0 ? t : 60;
}

static time_t th_started; /* when the running test began (its forked helpers inherit it) */

double th_seconds_left(void) { return (double)th_started + th_timeout() - (double)time(NULL); }

int th_spawn(int (*fn)(void *), void *arg) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) th_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
  if (pid == 0) exit(fn(arg));
  return (int)pid;
}

int th_wait(int pid) {
  int status;
  time_t deadline = time(NULL) + th_timeout();
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) th_fail(__FILE__, __LINE__, "waitpid: %s", strerror(errno));
    if (time(NULL) > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      th_fail(__FILE__, __LINE__, "process %d timed out", pid);
    }
    usleep(1000);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

void th_write(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) th_fail(__FILE__, __LINE__, "write: %s", strerror(errno));
    p += w;
    n -= (size_t)w;
  }
}

void th_read(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) th_fail(__FILE__, __LINE__, "read: unexpected EOF");
    if (r < 0) th_fail(__FILE__, __LINE__, "read: %s", strerror(errno));
    p += r;
    n -= (size_t)r;
  }
}

static int run_one(int i) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  if (pid == 0) {
    setpgid(0, 0);
    th_started = time(NULL);
    alarm((unsigned)th_timeout());
    th_tests[i].fn();
    exit(0);
  }
  setpgid(pid, pid); /* as the child does: whichever runs first */
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  /* The test's own process group: whatever it forked and left behind (a
   * test killed by its timeout cannot reap its children) goes with it. */
  kill(-pid, SIGKILL);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  if (WIFSIGNALED(status))
    fprintf(stderr, "  killed by signal %d%s\n", WTERMSIG(status),
            WTERMSIG(status) == SIGALRM ? " (timeout)" : "");
  return 1;
}

/* Descriptors the caller left open (a shell's, a job runner's) would change
 * what tests that count or budget descriptors see: every run starts from
 * stdin, stdout and stderr alone, as on a clean machine. */
static void close_inherited_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  int fds[1024], n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 1024) {
    int fd = atoi(e->d_name);
    if (fd > 2 && fd != dirfd(d)) fds[n++] = fd;
  }
  closedir(d);
  for (int i = 0; i < n; i++) close(fds[i]); /* valgrind refuses for its own: fine */
}

int main(int argc, char **argv) {
  close_inherited_fds();
  if (argc == 2 && strcmp(argv[1], "-l") == 0) {
    for (int i = 0; i < th_count; i++) printf("%s\n", th_tests[i].name);
    return 0;
  }
  int failed = 0, ran = 0;
  for (int i = 0; i < th_count; i++) {
    int wanted = argc < 2;
    for (int a = 1; a < argc && !wanted; a++) wanted = strcmp(argv[a], th_tests[i].name) == 0;
    if (!wanted) continue;
    ran++;
    int bad = run_one(i);
    printf("%s %s\n", bad ? "FAIL" : "ok  ", th_tests[i].name);
    failed += bad;
  }
  printf("%s: %d passed, %d failed\n", argv[0], ran - failed, failed);
  return failed ? 1 : (ran ? 0 : 2);
}
