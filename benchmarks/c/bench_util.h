/* What the C benchmarks share: a clock, ACL() that exits on failure naming
 * the call, medians, and whole reads and writes on pipes. Header-only: each
 * benchmark is one .c file. BENCH_NAME names the program in messages. */
#ifndef ASCEND_IPC_BENCH_UTIL_H_
#define ASCEND_IPC_BENCH_UTIL_H_

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "acl/acl.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, aclError rc) {
  const char *m = aclGetRecentErrMsg();
  fprintf(stderr, BENCH_NAME ": %s failed: %d (%s)\n", what, rc, m ? m : "no message");
  exit(1);
}
#define ACL(call)                       \
  do {                                  \
    aclError rc_ = (call);              \
    if (rc_ != ACL_SUCCESS) die(#call, rc_); \
  } while (0)

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void xwrite(int fd, const void *b, size_t n) {
  const char *p = b;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) exit(2);
    p += w;
    n -= (size_t)w;
  }
}
static void xread(int fd, void *b, size_t n) {
  char *p = b;
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) exit(2);
    p += r;
    n -= (size_t)r;
  }
}

/* The n-th CPU in allowed, or -1. */
static inline int bench_allowed_cpu(const cpu_set_t *allowed, int n) {
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
    if (CPU_ISSET(cpu, allowed) && n-- == 0) return cpu;
  return -1;
}

/* Runs this process (and the children it forks, and their threads) on cpu
 * alone. 0 or -1. */
static inline int bench_run_on(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return sched_setaffinity(0, sizeof one, &one);
}

/* Pins this process to the first CPU it may use, unless BENCH_PIN=0: on a
 * virtual machine, waking a peer on an idle vCPU costs tens of microseconds
 * at random. *saved gets the mask to restore. Returns that CPU, or -1 (not
 * pinned). */
static inline int bench_pin(cpu_set_t *saved) {
  const char *pin = getenv("BENCH_PIN");
  if ((pin && strcmp(pin, "0") == 0) || sched_getaffinity(0, sizeof *saved, saved) != 0) return -1;
  int cpu = bench_allowed_cpu(saved, 0);
  return cpu >= 0 && bench_run_on(cpu) == 0 ? cpu : -1;
}

/* Forks a peer that runs serve(its end of a SEQPACKET socketpair) and exits.
 * *fd gets this side's end; returns the pid. */
static inline pid_t bench_peer_start(int *fd, void (*serve)(int sock)) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) exit(3);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    serve(sv[1]);
    _exit(0);
  }
  close(sv[1]);
  *fd = sv[0];
  return pid;
}

/* How long the library polls before an IPC wait blocks, at most
 * (ASCEND_IPC_POLL_US, as the runtime reads it), in seconds. */
static inline double bench_poll_window(void) {
  const char *e = getenv("ASCEND_IPC_POLL_US");
  char *end;
  long v = e ? strtol(e, &end, 10) : -1;
  return (e && *e && !*end && v >= 0 && v <= 10000 ? (double)v : 100.0) * 1e-6;
}

/* Waits for input on fd the way the library does when it expects a reply:
 * polls (yielding the CPU between polls) for up to the window, and then
 * leaves the wait to the blocking receive that follows. */
static inline void bench_poll_for_input(int fd, double window) {
  if (window <= 0) return;
  double until = now() + window;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  while (poll(&p, 1, 0) == 0 && now() < until) sched_yield();
}

/* Echoes every packet until the socket closes, polling for each for up to
 * window seconds first (0: blocking in recv alone). */
static inline void bench_echo_loop(int sock, double window) {
  char b[512];
  for (;;) {
    bench_poll_for_input(sock, window);
    ssize_t r = recv(sock, b, sizeof b, 0);
    if (r <= 0 || send(sock, b, (size_t)r, MSG_NOSIGNAL) != r) return;
  }
}

/* The floor's peer: blocks for each packet. */
static inline void bench_echo_serve(int sock) { bench_echo_loop(sock, 0); }
static inline pid_t bench_echo_start(int *fd) { return bench_peer_start(fd, bench_echo_serve); }

/* The same, waiting for each packet the way the library does. */
static inline void bench_echo_poll_serve(int sock) { bench_echo_loop(sock, bench_poll_window()); }

#endif
