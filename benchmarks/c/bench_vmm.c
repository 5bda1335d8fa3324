/*
 * Physical memory sharing benchmark (make bench-c), one run, interleaved in
 * blocks so that drift in the machine's load hits every row alike:
 *   (a) bare Unix SEQPACKET round trip between two processes: the floor
 *   (b) memory key: aclrtIpcMemImportByKey + first touch + aclrtIpcMemClose
 *   (g) shareable handle: aclrtMemImportFromShareableHandle + aclrtMapMem
 *       (into a reservation made once) + first touch + aclrtUnmapMem +
 *       aclrtFreePhysical
 *   (h) the same with aclrtReserveMemAddress / aclrtReleaseMemAddress per
 *       hand-off
 * at 2 MiB and 64 MiB. Pinned to one CPU unless BENCH_PIN=0 (bench_util.h).
 * Prints a table and a JSON line, also written to BENCH_VMM_JSON
 * (default build/bench_vmm.json).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define BENCH_NAME "bench_vmm"
#include "bench_util.h"

#define NSIZES 2
static const size_t sizes[NSIZES] = {(size_t)2 << 20, (size_t)64 << 20};
static const char *size_names[NSIZES] = {"2 MiB", "64 MiB"};

typedef struct shared {
  char keys[NSIZES][ACL_IPC_MEM_KEY_LEN];
  uint64_t handles[NSIZES];
} shared;

static aclrtPhysicalMemProp prop0(void) {
  aclrtPhysicalMemProp p;
  memset(&p, 0, sizeof p);
  p.handleType = ACL_MEM_HANDLE_TYPE_NONE;
  p.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
  p.memAttr = ACL_HBM_MEM_HUGE;
  p.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
  return p;
}

/* Allocates both kinds at each size, first page touched, and shares them. */
static void exporter(int up, int down) {
  shared s;
  memset(&s, 0, sizeof s);
  void *dev[NSIZES];
  aclrtDrvMemHandle ph[NSIZES];
  aclrtPhysicalMemProp prop = prop0();
  for (int i = 0; i < NSIZES; i++) {
    ACL(aclrtMalloc(&dev[i], sizes[i], ACL_MEM_MALLOC_HUGE_FIRST));
    ((volatile char *)dev[i])[0] = 1;
    ACL(aclrtIpcMemGetExportKey(dev[i], sizes[i], s.keys[i], ACL_IPC_MEM_KEY_LEN,
                                ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION));
    ACL(aclrtMallocPhysical(&ph[i], sizes[i], &prop, 0));
    ACL(aclrtMemExportToShareableHandle(ph[i], ACL_MEM_HANDLE_TYPE_NONE,
                                        ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION, &s.handles[i]));
  }
  xwrite(up, &s, sizeof s);
  char done;
  xread(down, &done, 1);
  for (int i = 0; i < NSIZES; i++) {
    ACL(aclrtIpcMemClose(s.keys[i]));
    ACL(aclrtFree(dev[i]));
    ACL(aclrtFreePhysical(ph[i]));
  }
  ACL(aclFinalize());
}

int main(int argc, char **argv) {
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  int reps = quick ? 200 : 2000;
  cpu_set_t saved;
  int pinned = bench_pin(&saved);
  ACL(aclInit(NULL));
  int echo_fd;
  pid_t echo = bench_echo_start(&echo_fd);
  int up[2], down[2];
  if (pipe(up) || pipe(down)) return 5;
  pid_t pid = fork();
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    close(echo_fd);
    exporter(up[1], down[0]);
    _exit(0);
  }
  close(up[1]);
  close(down[0]);
  shared s;
  xread(up[0], &s, sizeof s);

  void *range;
  ACL(aclrtReserveMemAddress(&range, sizes[NSIZES - 1], 0, NULL, 0));
  enum { ROUNDS = 10 };
  int block = reps / ROUNDS, n = 0;
  double *rt = malloc(sizeof(double) * (size_t)(block * ROUNDS));
  double *key[NSIZES], *vmm[NSIZES], *vmm_rr[NSIZES];
  for (int i = 0; i < NSIZES; i++) {
    key[i] = malloc(sizeof(double) * (size_t)(block * ROUNDS));
    vmm[i] = malloc(sizeof(double) * (size_t)(block * ROUNDS));
    vmm_rr[i] = malloc(sizeof(double) * (size_t)(block * ROUNDS));
  }
  char msg[64] = {1}, rep[512];
  for (int round = -1; round < ROUNDS; round++) { /* round -1 warms up */
    for (int r = 0; r < block; r++) {
      int at = round >= 0 ? n + r : -1;
      double t0 = now();
      if (send(echo_fd, msg, sizeof msg, 0) != (ssize_t)sizeof msg || recv(echo_fd, rep, sizeof rep, 0) <= 0) return 4;
      if (at >= 0) rt[at] = now() - t0;
      for (int i = 0; i < NSIZES; i++) {
        void *p = NULL;
        t0 = now();
        ACL(aclrtIpcMemImportByKey(&p, s.keys[i], 0));
        ((volatile char *)p)[0] += 1;
        ACL(aclrtIpcMemClose(s.keys[i]));
        if (at >= 0) key[i][at] = now() - t0;

        aclrtDrvMemHandle h;
        t0 = now();
        ACL(aclrtMemImportFromShareableHandle(s.handles[i], 0, &h));
        ACL(aclrtMapMem(range, sizes[i], 0, h, 0));
        ((volatile char *)range)[0] += 1;
        ACL(aclrtUnmapMem(range));
        ACL(aclrtFreePhysical(h));
        if (at >= 0) vmm[i][at] = now() - t0;

        void *own;
        t0 = now();
        ACL(aclrtMemImportFromShareableHandle(s.handles[i], 0, &h));
        ACL(aclrtReserveMemAddress(&own, sizes[i], 0, NULL, 0));
        ACL(aclrtMapMem(own, sizes[i], 0, h, 0));
        ((volatile char *)own)[0] += 1;
        ACL(aclrtUnmapMem(own));
        ACL(aclrtReleaseMemAddress(own));
        ACL(aclrtFreePhysical(h));
        if (at >= 0) vmm_rr[i][at] = now() - t0;
      }
    }
    if (round >= 0) n += block;
  }
  double rtt = median(rt, n), mk[NSIZES], mv[NSIZES], mvr[NSIZES];
  for (int i = 0; i < NSIZES; i++) {
    mk[i] = median(key[i], n);
    mv[i] = median(vmm[i], n);
    mvr[i] = median(vmm_rr[i], n);
  }
  close(echo_fd);
  waitpid(echo, NULL, 0);
  xwrite(down[1], "x", 1);
  waitpid(pid, NULL, 0);
  ACL(aclrtReleaseMemAddress(range));

  printf("physical memory sharing (medians of %d reps, interleaved; %s)\n", n,
         pinned >= 0 ? "pinned to one CPU" : "unpinned");
  printf("  (a) bare Unix SEQPACKET round trip                               %8.1f us  (floor)\n", rtt * 1e6);
  for (int i = 0; i < NSIZES; i++) {
    printf("  (b) memory key, %-6s: import + touch + close                    %8.1f us  (%.2fx floor)\n",
           size_names[i], mk[i] * 1e6, mk[i] / rtt);
    printf("  (g) shareable handle, %-6s: import + map + touch + unmap + free %8.1f us  (%.2fx floor, %.2fx key)\n",
           size_names[i], mv[i] * 1e6, mv[i] / rtt, mv[i] / mk[i]);
    printf("  (h) the same, reserving and releasing the range each time       %8.1f us  (%.2fx floor)\n",
           mvr[i] * 1e6, mvr[i] / rtt);
  }
  char json[1024];
  snprintf(json, sizeof json,
           "{\"pinned\": %s, \"reps\": %d, \"socket_rtt_us\": %.2f, "
           "\"key_import_touch_close_us\": {\"2MiB\": %.2f, \"64MiB\": %.2f}, "
           "\"vmm_import_map_touch_unmap_free_us\": {\"2MiB\": %.2f, \"64MiB\": %.2f}, "
           "\"vmm_with_reserve_release_us\": {\"2MiB\": %.2f, \"64MiB\": %.2f}}",
           pinned >= 0 ? "true" : "false", n, rtt * 1e6, mk[0] * 1e6, mk[1] * 1e6, mv[0] * 1e6, mv[1] * 1e6,
           mvr[0] * 1e6, mvr[1] * 1e6);
  printf("%s\n", json);
  FILE *f = fopen(getenv("BENCH_VMM_JSON") ? getenv("BENCH_VMM_JSON") : "build/bench_vmm.json", "w");
  if (f) {
    fprintf(f, "%s\n", json);
    fclose(f);
  }
  for (int i = 0; i < NSIZES; i++) {
    free(key[i]);
    free(vmm[i]);
    free(vmm_rr[i]);
  }
  free(rt);
  ACL(aclFinalize());
  return 0;
}
