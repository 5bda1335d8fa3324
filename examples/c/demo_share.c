/*
 * demo_share: one process exports a device buffer; several worker processes
 * (fork + exec of this program) import it by key, each fills its own slice,
 * and the exporter verifies every byte. The CANN A/B flow, with N Bs:
 *
 *   A: aclrtMalloc -> aclrtIpcMemGetExportKey -> aclrtIpcMemSetImportPid(Bs)
 *   B: aclrtDeviceGetBareTgid -> aclrtIpcMemImportByKey -> write -> aclrtIpcMemClose
 *   A: (after every B closed) aclrtIpcMemClose -> aclrtFree
 *
 *   build/examples/demo_share [workers] [MiB]      (make demo)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "acl/acl.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define CHECK(call)                                                                        \
  do {                                                                                     \
    aclError rc_ = (call);                                                                 \
    if (rc_ != ACL_SUCCESS) {                                                              \
      const char *m_ = aclGetRecentErrMsg();                                               \
      fprintf(stderr, "[%d] %s failed: %d (%s)\n", (int)getpid(), #call, rc_, m_ ? m_ : ""); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

static void xwrite(int fd, const void *b, size_t n) {
  if (write(fd, b, n) != (ssize_t)n) {
    perror("write");
    exit(1);
  }
}
static void xread(int fd, void *b, size_t n) {
  char *p = b;
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      fprintf(stderr, "[%d] pipe closed early\n", (int)getpid());
      exit(1);
    }
    p += r;
    n -= (size_t)r;
  }
}

static uint8_t byte_of(int worker, size_t i) { return (uint8_t)(worker * 31 + 7 + (i % 251)); }

typedef struct report {
  int32_t pid;
  int32_t device;
  double import_us, fill_ms, close_us;
} report;

/* ---- a worker (process B) --------------------------------------------------------- */

static int worker(int index, int nworkers, const char *key, size_t size, int go_fd, int out_fd) {
  int32_t tgid;
  CHECK(aclrtDeviceGetBareTgid(&tgid)); /* the pid the exporter must whitelist */
  int32_t dev = index % 2;              /* half the workers on another device than the exporter's */
  CHECK(aclrtSetDevice(dev));
  xwrite(out_fd, &tgid, sizeof tgid);
  char go;
  xread(go_fd, &go, 1); /* whitelisted now */
  report r = {tgid, dev, 0, 0, 0};
  void *p = NULL;
  double t0 = now();
  CHECK(aclrtIpcMemImportByKey(&p, key, 0));
  r.import_us = (now() - t0) * 1e6;
  size_t slice = size / (size_t)nworkers, off = slice * (size_t)index;
  uint8_t *mine = (uint8_t *)p + off;
  t0 = now();
  if (dev == 0) {
    for (size_t i = 0; i < slice; i++) mine[i] = byte_of(index, i); /* same device: direct writes */
  } else {
    /* another device: CANN allows only asynchronous device-to-device copies on
     * imported memory, so fill a local buffer and copy it over on a stream */
    uint8_t *local = NULL;
    CHECK(aclrtMalloc((void **)&local, slice, ACL_MEM_MALLOC_HUGE_FIRST));
    for (size_t i = 0; i < slice; i++) local[i] = byte_of(index, i);
    aclrtStream s;
    CHECK(aclrtCreateStream(&s));
    CHECK(aclrtMemcpyAsync(mine, slice, local, slice, ACL_MEMCPY_DEVICE_TO_DEVICE, s));
    CHECK(aclrtSynchronizeStream(s));
    CHECK(aclrtDestroyStream(s));
    CHECK(aclrtFree(local));
  }
  r.fill_ms = (now() - t0) * 1e3;
  t0 = now();
  CHECK(aclrtIpcMemClose(key));
  r.close_us = (now() - t0) * 1e6;
  xwrite(out_fd, &r, sizeof r);
  CHECK(aclFinalize());
  return 0;
}

/* ---- the exporter (process A) -------------------------------------------------------- */

int main(int argc, char **argv) {
  if (argc == 8 && strcmp(argv[1], "--worker") == 0)
    return worker(atoi(argv[2]), atoi(argv[3]), argv[4], strtoull(argv[5], NULL, 10), atoi(argv[6]),
                  atoi(argv[7]));
  int nworkers = argc > 1 ? atoi(argv[1]) : 4;
  size_t mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 64;
  if (nworkers < 1 || nworkers > 256 || mib < 1) {
    fprintf(stderr, "usage: %s [workers 1..256] [MiB]\n", argv[0]);
    return 2;
  }
  size_t size = mib << 20;
  CHECK(aclInit(NULL));
  CHECK(aclrtSetDevice(0));
  void *buf = NULL;
  CHECK(aclrtMalloc(&buf, size, ACL_MEM_MALLOC_HUGE_FIRST));
  CHECK(aclrtMemset(buf, size, 0, size));
  char key[ACL_IPC_MEM_KEY_LEN];
  CHECK(aclrtIpcMemGetExportKey(buf, size, key, sizeof key, ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT));
  printf("exporter %d: %zu MiB on device 0, key %s\n", (int)getpid(), mib, key);

  char self[PATH_MAX];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) return 1;
  self[sl] = '\0';
  int *go = calloc((size_t)nworkers, sizeof *go), *res = calloc((size_t)nworkers, sizeof *res);
  pid_t *pids = calloc((size_t)nworkers, sizeof *pids);
  int32_t *tgids = calloc((size_t)nworkers, sizeof *tgids);
  for (int i = 0; i < nworkers; i++) {
    int gp[2], rp[2];
    if (pipe(gp) || pipe(rp)) return 1;
    fflush(stdout);
    pids[i] = fork();
    if (pids[i] == 0) {
      close(gp[1]);
      close(rp[0]);
      char a[5][32];
      snprintf(a[0], 32, "%d", i);
      snprintf(a[1], 32, "%d", nworkers);
      snprintf(a[2], 32, "%zu", size);
      snprintf(a[3], 32, "%d", gp[0]);
      snprintf(a[4], 32, "%d", rp[1]);
      execl(self, self, "--worker", a[0], a[1], key, a[2], a[3], a[4], (char *)NULL);
      _exit(127);
    }
    close(gp[0]);
    close(rp[1]);
    go[i] = gp[1];
    res[i] = rp[0];
  }
  for (int i = 0; i < nworkers; i++) xread(res[i], &tgids[i], sizeof tgids[i]);
  CHECK(aclrtIpcMemSetImportPid(key, tgids, (size_t)nworkers));
  printf("exporter: whitelisted %d worker(s) (fork+exec), releasing them\n", nworkers);
  for (int i = 0; i < nworkers; i++) xwrite(go[i], "g", 1);

  printf("\n%-8s %-8s %-7s %12s %12s %10s\n", "worker", "pid", "device", "import (us)", "fill (ms)", "close (us)");
  for (int i = 0; i < nworkers; i++) {
    report r;
    xread(res[i], &r, sizeof r);
    printf("%-8d %-8d %-7d %12.1f %12.2f %10.1f\n", i, (int)r.pid, (int)r.device, r.import_us, r.fill_ms,
           r.close_us);
  }
  printf("(a worker's first import includes connecting to the exporter and receiving its memory's fd)\n");
  int failed = 0;
  for (int i = 0; i < nworkers; i++) {
    int st;
    waitpid(pids[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      printf("worker %d exited abnormally (status %d)\n", i, st);
      failed = 1;
    }
    close(go[i]);
    close(res[i]);
  }

  /* every importer closed: now the exporter may close, then free */
  size_t slice = size / (size_t)nworkers, bad = 0;
  const uint8_t *b = buf;
  for (int w = 0; w < nworkers; w++)
    for (size_t i = 0; i < slice; i++)
      if (b[slice * (size_t)w + i] != byte_of(w, i)) bad++;
  for (size_t i = slice * (size_t)nworkers; i < size; i++)
    if (b[i] != 0) bad++;
  printf("\nexporter: verified %zu bytes written by %d processes through one shared buffer: %s\n", size,
         nworkers, bad ? "MISMATCH" : "all correct");
  if (bad) printf("exporter: %zu bad bytes\n", bad);
  CHECK(aclrtIpcMemClose(key));
  CHECK(aclrtFree(buf));
  CHECK(aclFinalize());
  free(go);
  free(res);
  free(pids);
  free(tgids);
  return bad || failed ? 1 : 0;
}
