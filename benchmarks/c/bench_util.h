/* What the C benchmarks share: a clock, ACL() that exits on failure naming
 * the call, medians, and whole reads and writes on pipes. Header-only: each
 * benchmark is one .c file. BENCH_NAME names the program in messages. */
#ifndef ASCEND_IPC_BENCH_UTIL_H_
#define ASCEND_IPC_BENCH_UTIL_H_

#include <errno.h>
#include <stdio.h>
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

#endif
