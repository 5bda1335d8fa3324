/* Virtual memory and physical memory sharing: CANN's rules for each call,
 * several physical allocations side by side in one reservation, access
 * control, and sharing between real processes through shareable handles,
 * with and without the whitelist, across an exporter's death. */
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/mman.h>

#include "ipc_util.h"

#define GRAN (2 * MiB)

static void *reserve(size_t size) {
  void *v = NULL;
  CHECK_OK(aclrtReserveMemAddress(&v, size, 0, NULL, 0));
  CHECK(v != NULL && (uintptr_t)v % GRAN == 0);
  return v;
}

static aclrtMemAccessDesc rw_on(uint32_t device) {
  aclrtMemAccessDesc d;
  memset(&d, 0, sizeof d);
  d.flags = ACL_RT_MEM_ACCESS_FLAGS_READWRITE;
  d.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = device;
  return d;
}

TEST(granularity_and_properties) {
  aclrtPhysicalMemProp p = phys_prop_on(0);
  size_t g = 0;
  CHECK_ACL(aclrtMemGetAllocationGranularity(NULL, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &g), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMemGetAllocationGranularity(&p, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtMemGetAllocationGranularity(&p, ACL_RT_MEM_ALLOC_GRANULARITY_UNDEF, &g), ACL_ERROR_RT_PARAM_INVALID,
            "option");
  CHECK_OK(aclrtMemGetAllocationGranularity(&p, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &g));
  CHECK_EQ(g, GRAN);
  CHECK_OK(aclrtMemGetAllocationGranularity(&p, ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED, &g));
  CHECK_EQ(g, GRAN);
  p.memAttr = ACL_MEM_HUGE1G;
  CHECK_OK(aclrtMemGetAllocationGranularity(&p, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &g));
  CHECK_EQ(g, (size_t)1 << 30);
  /* CANN's property checks, the same for every call that takes one */
  aclrtPhysicalMemProp q;
  q = phys_prop_on(0), q.handleType = ACL_MEM_HANDLE_TYPE_POSIX;
  CHECK_MSG(aclrtMemGetAllocationGranularity(&q, 0, &g), ACL_ERROR_INVALID_PARAM, "handleType");
  q = phys_prop_on(0), q.allocationType = 7;
  CHECK_MSG(aclrtMemGetAllocationGranularity(&q, 0, &g), ACL_ERROR_INVALID_PARAM, "allocationType");
  q = phys_prop_on(0), q.location.type = ACL_MEM_LOCATION_TYPE_MANAGED;
  CHECK_MSG(aclrtMemGetAllocationGranularity(&q, 0, &g), ACL_ERROR_INVALID_PARAM, "location.type");
  q = phys_prop_on(0), q.memAttr = ACL_HBM_MEM;
  CHECK_MSG(aclrtMemGetAllocationGranularity(&q, 0, &g), ACL_ERROR_INVALID_PARAM, "memAttr");
  q = phys_prop_on(0), q.memAttr = (aclrtMemAttr)99;
  CHECK_MSG(aclrtMemGetAllocationGranularity(&q, 0, &g), ACL_ERROR_INVALID_PARAM, "memAttr");
  q = phys_prop_on(0), q.memAttr = ACL_DDR_MEM_HUGE;
  CHECK_MSG(aclrtMemGetAllocationGranularity(&q, 0, &g), ACL_ERROR_INVALID_PARAM, "host (DDR) memory");
  q = phys_prop_on(0), q.location.type = ACL_MEM_LOCATION_TYPE_HOST;
  CHECK_MSG(aclrtMemGetAllocationGranularity(&q, 0, &g), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "device physical memory only");
  q = phys_prop_on(4096);
  CHECK_MSG(aclrtMemGetAllocationGranularity(&q, 0, &g), ACL_ERROR_RT_INVALID_DEVICEID, "location.id");
  CHECK_OK(aclFinalize());
}

TEST(malloc_and_free_physical) {
  aclrtPhysicalMemProp p = phys_prop_on(0);
  aclrtDrvMemHandle h = NULL;
  int fds0 = fd_count();
  CHECK_ACL(aclrtMallocPhysical(NULL, GRAN, &p, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMallocPhysical(&h, GRAN, NULL, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMallocPhysical(&h, 0, &p, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtMallocPhysical(&h, GRAN, &p, 1), ACL_ERROR_INVALID_PARAM, "flags");
  CHECK_MSG(aclrtMallocPhysical(&h, (size_t)1 << 50, &p, 0), ACL_ERROR_RT_MEMORY_ALLOCATION, "ASCEND_IPC_EMU_MEMORY");
  CHECK(h == NULL); /* untouched on failure */
  size_t free0, total;
  CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free0, &total));
  h = phys_new(4096); /* rounded up to the granularity, counted against the device */
  size_t free1;
  CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free1, &total));
  CHECK_EQ(free0 - free1, GRAN);
  CHECK_ACL(aclrtFreePhysical(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtFreePhysical(h));
  CHECK_MSG(aclrtFreePhysical(h), ACL_ERROR_RT_INVALID_HANDLE, "not a live physical memory handle");
  int junk = 0;
  CHECK_ACL(aclrtFreePhysical(&junk), ACL_ERROR_RT_INVALID_HANDLE);
  CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free1, &total));
  CHECK_EQ(free1, free0);
  CHECK_EQ(fd_count(), fds0);
  CHECK_OK(aclFinalize());
}

TEST(reserve_and_release) {
  void *v = NULL;
  CHECK_ACL(aclrtReserveMemAddress(NULL, GRAN, 0, NULL, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtReserveMemAddress(&v, 0, 0, NULL, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtReserveMemAddress(&v, GRAN, 0, NULL, 2), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtReserveMemAddress(&v, GRAN, 4096, NULL, 0), ACL_ERROR_RT_PARAM_INVALID, "alignment");
  CHECK_MSG(aclrtReserveMemAddress(&v, GRAN + 4096, 0, NULL, 0), ACL_ERROR_RT_PARAM_INVALID, "granularity");
  CHECK_MSG(aclrtReserveMemAddress(&v, GRAN, 0, (void *)(uintptr_t)0x10000000, 0), ACL_ERROR_RT_PARAM_INVALID,
            "[16 TiB, 24 TiB)");
  void *want = (void *)((uintptr_t)20 << 40);
  CHECK_MSG(aclrtReserveMemAddress(&v, GRAN, 0, (char *)want + 4096, 0), ACL_ERROR_RT_PARAM_INVALID, "boundary");
  CHECK(v == NULL);
  CHECK_OK(aclrtReserveMemAddress(&v, 2 * GRAN, 0, want, 0));
  CHECK(v == want);
  void *again = NULL;
  CHECK_MSG(aclrtReserveMemAddress(&again, GRAN, 0, want, 0), ACL_ERROR_RT_PARAM_INVALID, "already in use");
  /* a reservation is address space only: nothing there is memory yet */
  char host[8];
  CHECK_ACL(aclrtMemcpy(host, sizeof host, v, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtReleaseMemAddress(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtReleaseMemAddress((char *)v + GRAN), ACL_ERROR_RT_PARAM_INVALID, "into the reservation");
  CHECK_OK(aclrtReleaseMemAddress(v));
  CHECK_MSG(aclrtReleaseMemAddress(v), ACL_ERROR_RT_PARAM_INVALID, "not a reservation");
  void *big = reserve((size_t)4 << 30); /* large ranges start on a 1 GiB boundary */
  CHECK((uintptr_t)big % ((size_t)1 << 30) == 0);
  CHECK_OK(aclrtReleaseMemAddress(big));
  CHECK_OK(aclFinalize());
}

TEST(two_allocations_side_by_side) {
  aclrtDrvMemHandle a = phys_new(GRAN), b = phys_new(GRAN);
  unsigned char *v = reserve(4 * GRAN);
  CHECK_OK(aclrtMapMem(v, GRAN, 0, a, 0));
  CHECK_OK(aclrtMapMem(v + GRAN, GRAN, 0, b, 0));
  aclrtMemAccessDesc d = rw_on(0);
  CHECK_OK(aclrtMemSetAccess(v, GRAN, &d, 1)); /* the owner has access already; asking again is fine */
  /* one copy across both: they are one range of device memory now */
  unsigned char *host = malloc(2 * GRAN);
  CHECK(host != NULL);
  fill_pattern(host, 2 * GRAN, 7);
  CHECK_OK(aclrtMemcpy(v + GRAN / 2, GRAN, host, GRAN, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK(memcmp(v + GRAN / 2, host, GRAN) == 0);
  CHECK_OK(aclrtMemset(v, 2 * GRAN, 0x5a, 2 * GRAN));
  CHECK_EQ(v[2 * GRAN - 1], 0x5a);
  /* but a copy may not run past the mappings into the unmapped rest */
  CHECK_MSG(aclrtMemcpy(host, 2 * GRAN, v + GRAN, 2 * GRAN, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_INVALID_PARAM,
            "overruns");
  CHECK_ACL(aclrtMemcpy(host, 2 * GRAN, v, 2 * GRAN, ACL_MEMCPY_DEVICE_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
  /* the rules of aclrtMapMem */
  aclrtDrvMemHandle c = phys_new(GRAN);
  int junk = 0;
  CHECK_ACL(aclrtMapMem(NULL, GRAN, 0, c, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMapMem(v + 2 * GRAN, GRAN, 0, NULL, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMapMem(v + 2 * GRAN, 0, 0, c, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMapMem(v + 2 * GRAN, GRAN, 0, c, 1), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMapMem(v + 2 * GRAN, GRAN, 0, &junk, 0), ACL_ERROR_RT_INVALID_HANDLE);
  CHECK_MSG(aclrtMapMem(v + 2 * GRAN, GRAN, 4096, c, 0), ACL_ERROR_RT_PARAM_INVALID, "offset");
  CHECK_MSG(aclrtMapMem(v + 2 * GRAN, GRAN / 2, 0, c, 0), ACL_ERROR_RT_PARAM_INVALID, "maps whole");
  CHECK_MSG(aclrtMapMem(v + 2 * GRAN + 4096, GRAN, 0, c, 0), ACL_ERROR_RT_PARAM_INVALID, "aligned");
  CHECK_MSG(aclrtMapMem(v + GRAN, GRAN, 0, c, 0), ACL_ERROR_RT_PARAM_INVALID, "overlaps");
  CHECK_MSG(aclrtMapMem(v + 4 * GRAN, GRAN, 0, c, 0), ACL_ERROR_RT_PARAM_INVALID, "inside one reservation");
  void *elsewhere = dmalloc(GRAN);
  CHECK_ACL(aclrtMapMem(elsewhere, GRAN, 0, c, 0), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_OK(aclrtFree(elsewhere));
  /* memory of another device may not join the reservation */
  aclrtPhysicalMemProp p1 = phys_prop_on(1);
  aclrtDrvMemHandle other = NULL;
  CHECK_OK(aclrtMallocPhysical(&other, GRAN, &p1, 0));
  CHECK_MSG(aclrtMapMem(v + 2 * GRAN, GRAN, 0, other, 0), ACL_ERROR_RT_PARAM_INVALID, "device 1");
  CHECK_OK(aclrtFreePhysical(other));
  /* mapped memory is not aclrtMalloc memory */
  CHECK_MSG(aclrtFree(v), ACL_ERROR_RT_INVALID_HANDLE, "aclrtUnmapMem");
  char key[KEYLEN];
  CHECK_MSG(aclrtIpcMemGetExportKey(v, GRAN, key, KEYLEN, 0), ACL_ERROR_INVALID_PARAM, "aclrtMemExportToShareableHandle");
  /* release needs every mapping gone; unmap needs a mapping's start */
  CHECK_MSG(aclrtReleaseMemAddress(v), ACL_ERROR_RT_PARAM_INVALID, "aclrtUnmapMem them first");
  CHECK_ACL(aclrtUnmapMem(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtUnmapMem(v + 4096), ACL_ERROR_RT_PARAM_INVALID, "bytes into the mapping");
  CHECK_MSG(aclrtUnmapMem(v + 3 * GRAN), ACL_ERROR_RT_PARAM_INVALID, "not the start of a mapping");
  /* freeing a mapped allocation is allowed: the memory stays until the unmap */
  CHECK_OK(aclrtFreePhysical(a));
  v[0] = 0x11;
  CHECK_EQ(v[0], 0x11);
  CHECK_OK(aclrtUnmapMem(v));
  CHECK_OK(aclrtUnmapMem(v + GRAN));
  CHECK_ACL(aclrtUnmapMem(v), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_OK(aclrtReleaseMemAddress(v));
  CHECK_OK(aclrtFreePhysical(b));
  CHECK_OK(aclrtFreePhysical(c));
  free(host);
  CHECK_OK(aclFinalize());
}

static int touch_child(void *p) {
  *(volatile char *)p = 1; /* faults */
  return 3;
}

TEST(no_access_until_set_access) {
  aclrtDrvMemHandle h = phys_new(GRAN);
  unsigned char *v = reserve(GRAN);
  CHECK_OK(aclrtMemMapNoAccess(v, GRAN, 0, h, 0));
  char host[16];
  CHECK_MSG(aclrtMemcpy(host, sizeof host, v, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_INVALID_PARAM,
            "aclrtMemSetAccess");
  CHECK_MSG(aclrtMemset(v, GRAN, 0, 16), ACL_ERROR_INVALID_PARAM, "no access yet");
  /* a touch faults */
  int status = th_wait(th_spawn(touch_child, v));
#if defined(__SANITIZE_ADDRESS__)
  CHECK(status != 0 && status != 3); /* ASan reports the fault and exits */
#else
  if (under_valgrind()) /* valgrind reports the invalid write and exits with its error code */
    CHECK(status != 0 && status != 3);
  else
    CHECK_EQ(status, 128 + SIGSEGV);
#endif
  /* the rules of aclrtMemSetAccess */
  aclrtMemAccessDesc d = rw_on(0);
  CHECK_ACL(aclrtMemSetAccess(NULL, GRAN, &d, 1), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtMemSetAccess(v, GRAN, NULL, 1), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtMemSetAccess(v, GRAN, &d, 0), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_MSG(aclrtMemSetAccess(v, GRAN / 2, &d, 1), ACL_ERROR_RT_PARAM_INVALID, "size of the mapping");
  CHECK_MSG(aclrtMemSetAccess(v + 4096, GRAN, &d, 1), ACL_ERROR_RT_PARAM_INVALID, "into the mapping");
  aclrtMemAccessDesc bad = d;
  bad.flags = ACL_RT_MEM_ACCESS_FLAGS_READ;
  CHECK_MSG(aclrtMemSetAccess(v, GRAN, &bad, 1), ACL_ERROR_RT_PARAM_INVALID, "READWRITE");
  bad = d, bad.location.type = ACL_MEM_LOCATION_TYPE_MANAGED;
  CHECK_MSG(aclrtMemSetAccess(v, GRAN, &bad, 1), ACL_ERROR_RT_PARAM_INVALID, "location.type");
  bad = d, bad.location.id = 4096;
  CHECK_ACL(aclrtMemSetAccess(v, GRAN, &bad, 1), ACL_ERROR_RT_INVALID_DEVICEID);
  bad = d, bad.rsv[3] = 1;
  CHECK_MSG(aclrtMemSetAccess(v, GRAN, &bad, 1), ACL_ERROR_RT_PARAM_INVALID, "rsv");
  CHECK_MSG(aclrtMemcpy(host, sizeof host, v, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_INVALID_PARAM,
            "no access yet"); /* nothing above changed it */
  aclrtMemAccessDesc two[2] = {rw_on(0), rw_on(0)};
  two[1].location.type = ACL_MEM_LOCATION_TYPE_HOST;
  two[1].location.id = 0;
  CHECK_OK(aclrtMemSetAccess(v, GRAN, two, 2));
  CHECK_OK(aclrtMemset(v, GRAN, 0x33, GRAN));
  CHECK_OK(aclrtMemcpy(host, sizeof host, v + GRAN - sizeof host, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK_EQ(host[15], 0x33);
  CHECK_OK(aclrtUnmapMem(v));
  CHECK_OK(aclrtReleaseMemAddress(v));
  CHECK_OK(aclrtFreePhysical(h));
  CHECK_OK(aclFinalize());
}

TEST(retain_counts_a_reference) {
  aclrtDrvMemHandle h = phys_new(GRAN), r = NULL;
  unsigned char *v = reserve(GRAN);
  CHECK_OK(aclrtMapMem(v, GRAN, 0, h, 0));
  CHECK_ACL(aclrtMemRetainAllocationHandle(NULL, &r), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMemRetainAllocationHandle(v, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtMemRetainAllocationHandle(v + 4096, &r), ACL_ERROR_RT_PARAM_INVALID, "into the mapping");
  CHECK_OK(aclrtMemRetainAllocationHandle(v, &r));
  CHECK(r == h);
  CHECK_OK(aclrtFreePhysical(h));
  CHECK_OK(aclrtFreePhysical(r)); /* two references, two frees */
  CHECK_ACL(aclrtFreePhysical(h), ACL_ERROR_RT_INVALID_HANDLE);
  /* the mapping still holds the memory, and a retain gives a handle again */
  v[100] = 9;
  CHECK_OK(aclrtMemRetainAllocationHandle(v, &r));
  CHECK_OK(aclrtUnmapMem(v));
  aclrtDrvMemHandle again = r;
  CHECK_OK(aclrtMapMem(v, GRAN, 0, again, 0));
  CHECK_EQ(v[100], 9); /* the same physical memory */
  CHECK_OK(aclrtUnmapMem(v));
  CHECK_OK(aclrtFreePhysical(again));
  CHECK_OK(aclrtReleaseMemAddress(v));
  CHECK_OK(aclFinalize());
}

/* ---- sharing ---------------------------------------------------------------- */

/* Imports handle h, maps it, checks the pattern of seed and writes seed + 1's. */
static void import_check_write(uint64_t h, uint32_t seed) {
  aclrtDrvMemHandle mine = NULL;
  CHECK_OK(aclrtMemImportFromShareableHandle(h, 0, &mine));
  unsigned char *v = reserve(GRAN);
  CHECK_OK(aclrtMapMem(v, GRAN, 0, mine, 0));
  CHECK(check_pattern(v, GRAN, seed));
  fill_pattern(v, GRAN, seed + 1);
  CHECK_MSG(aclrtMemExportToShareableHandle(mine, ACL_MEM_HANDLE_TYPE_NONE, 0, &h), ACL_ERROR_RT_PARAM_INVALID,
            "imported from another process");
  CHECK_OK(aclrtUnmapMem(v));
  CHECK_OK(aclrtReleaseMemAddress(v));
  CHECK_OK(aclrtFreePhysical(mine));
}

static int whitelisted_importer(chan *c, void *arg) {
  (void)arg;
  uint64_t h;
  from_parent(c, &h, sizeof h);
  aclrtDrvMemHandle mine = NULL;
  CHECK_MSG(aclrtMemImportFromShareableHandle(h, 0, &mine), ACL_ERROR_RT_NO_PERMISSION,
            "aclrtMemSetPidToShareableHandle");
  send_int(c->up[1], 1);
  CHECK_EQ(recv_int(c->down[0]), 2); /* now whitelisted */
  import_check_write(h, 41);
  send_int(c->up[1], 3);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(share_with_a_whitelisted_process) {
  aclrtDrvMemHandle ph = phys_new(GRAN);
  unsigned char *v = reserve(GRAN);
  CHECK_OK(aclrtMapMem(v, GRAN, 0, ph, 0));
  fill_pattern(v, GRAN, 41);
  uint64_t h = 0, h2;
  CHECK_ACL(aclrtMemExportToShareableHandle(NULL, ACL_MEM_HANDLE_TYPE_NONE, 0, &h), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMemExportToShareableHandle(ph, ACL_MEM_HANDLE_TYPE_POSIX, 0, &h), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMemExportToShareableHandle(ph, ACL_MEM_HANDLE_TYPE_NONE, 0, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtMemExportToShareableHandle(ph, ACL_MEM_HANDLE_TYPE_NONE, 2, &h), ACL_ERROR_RT_PARAM_INVALID, "flags");
  CHECK_OK(aclrtMemExportToShareableHandle(ph, ACL_MEM_HANDLE_TYPE_NONE, ACL_RT_VMM_EXPORT_FLAG_DEFAULT, &h));
  CHECK((h >> 32) != 0 && (h & 0xffffffffu) != 0); /* this process's door, and the export there */
  CHECK_MSG(aclrtMemExportToShareableHandle(ph, ACL_MEM_HANDLE_TYPE_NONE, 0, &h2), ACL_ERROR_RT_PARAM_INVALID,
            "already exported");
  aclrtDrvMemHandle own = NULL;
  CHECK_MSG(aclrtMemImportFromShareableHandle(h, 0, &own), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "this process");
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, whitelisted_importer, NULL);
  to_child(&c, &h, sizeof h);
  CHECK_EQ(recv_int(c.up[0]), 1);
  int32_t who = pid;
  CHECK_ACL(aclrtMemSetPidToShareableHandle(h, NULL, 1), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMemSetPidToShareableHandle(h, &who, 0), ACL_ERROR_INVALID_PARAM);
  int32_t zero = 0;
  CHECK_ACL(aclrtMemSetPidToShareableHandle(h, &zero, 1), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMemSetPidToShareableHandle(0, &who, 1), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtMemSetPidToShareableHandle(h, &who, 1));
  send_int(c.down[1], 2);
  CHECK_EQ(recv_int(c.up[0]), 3);
  CHECK(check_pattern(v, GRAN, 42)); /* the child's bytes, in our mapping */
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclrtUnmapMem(v));
  CHECK_OK(aclrtReleaseMemAddress(v));
  CHECK_OK(aclrtFreePhysical(ph));
  CHECK_OK(aclFinalize());
}

/* Exports two allocations without a whitelist, then dies. */
static int dying_exporter(chan *c, void *arg) {
  (void)arg;
  uint64_t h[2];
  for (int i = 0; i < 2; i++) {
    aclrtDrvMemHandle ph = phys_new(GRAN);
    unsigned char *v = reserve(GRAN);
    CHECK_OK(aclrtMapMem(v, GRAN, 0, ph, 0));
    fill_pattern(v, GRAN, 100 + (uint32_t)i);
    CHECK_OK(aclrtMemExportToShareableHandleV2(ph, ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION,
                                               ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, &h[i]));
  }
  to_parent(c, h, sizeof h);
  CHECK_EQ(recv_int(c->down[0]), 1);
  _exit(0); /* no finalize, no free: the importer's handles keep the memory */
}

TEST(imported_memory_outlives_its_exporter) {
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, dying_exporter, NULL);
  uint64_t h[2];
  from_child(&c, h, sizeof h);
  aclrtDrvMemHandle mine[2] = {NULL, NULL};
  CHECK_ACL(aclrtMemImportFromShareableHandleV2(&h[0], ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, 1, &mine[0]),
            ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMemImportFromShareableHandleV2(NULL, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, 0, &mine[0]),
            ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMemImportFromShareableHandle(h[0], 0, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMemImportFromShareableHandle(h[0], 4096, &mine[0]), ACL_ERROR_RT_INVALID_DEVICEID);
  aclrtMemFabricHandle not_fabric; /* a DEFAULT handle's number where a fabric handle is due */
  memset(&not_fabric, 0, sizeof not_fabric);
  memcpy(not_fabric.data, &h[0], sizeof h[0]);
  CHECK_MSG(aclrtMemImportFromShareableHandleV2(&not_fabric, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, 0, &mine[0]),
            ACL_ERROR_INVALID_PARAM, "not an aclrtMemFabricHandle");
  CHECK_ACL(aclrtMemImportFromShareableHandleV2(&h[0], (aclrtMemSharedHandleType)7, 0, &mine[0]),
            ACL_ERROR_RT_PARAM_INVALID);
  CHECK_OK(aclrtMemImportFromShareableHandleV2(&h[0], ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, 0, &mine[0]));
  CHECK_OK(aclrtMemImportFromShareableHandle(h[1], 0, &mine[1]));
  send_int(c.down[1], 1);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  /* the exporter is gone: its handles import nothing more, ours still hold the memory */
  aclrtDrvMemHandle late = NULL;
  CHECK_MSG(aclrtMemImportFromShareableHandle(h[0], 0, &late), ACL_ERROR_RT_IPC_ERROR, "gone");
  unsigned char *v = reserve(4 * GRAN);
  CHECK_OK(aclrtMapMem(v + GRAN, GRAN, 0, mine[1], 0));
  CHECK_OK(aclrtMapMem(v, GRAN, 0, mine[0], 0));
  CHECK(check_pattern(v, GRAN, 100));
  CHECK(check_pattern(v + GRAN, GRAN, 101));
  /* allocated and imported handles do not share a reservation */
  aclrtDrvMemHandle local = phys_new(GRAN);
  CHECK_MSG(aclrtMapMem(v + 2 * GRAN, GRAN, 0, local, 0), ACL_ERROR_RT_PARAM_INVALID, "separate reservations");
  CHECK_OK(aclrtFreePhysical(local));
  int fds = fd_count();
  CHECK_OK(aclrtFreePhysical(mine[0]));
  CHECK_OK(aclrtFreePhysical(mine[1]));
  CHECK_EQ(fd_count(), fds); /* still mapped: the descriptors stay */
  CHECK_OK(aclrtUnmapMem(v));
  CHECK_OK(aclrtUnmapMem(v + GRAN));
  CHECK_EQ(fd_count(), fds - 2); /* the last holder let go */
  CHECK_OK(aclrtReleaseMemAddress(v));
  CHECK_OK(aclFinalize());
}

static int forger(chan *c, void *arg) {
  (void)arg;
  uint64_t h;
  from_parent(c, &h, sizeof h);
  aclrtDrvMemHandle mine = NULL;
  CHECK_MSG(aclrtMemImportFromShareableHandle(0, 0, &mine), ACL_ERROR_INVALID_PARAM, "not a shareable handle");
  CHECK_MSG(aclrtMemImportFromShareableHandle(h >> 32 << 32, 0, &mine), ACL_ERROR_INVALID_PARAM,
            "not a shareable handle");
  CHECK_MSG(aclrtMemImportFromShareableHandle(h & 0xffffffffu, 0, &mine), ACL_ERROR_INVALID_PARAM,
            "not a shareable handle");
  CHECK_MSG(aclrtMemImportFromShareableHandle(h ^ 1, 0, &mine), ACL_ERROR_RT_NO_PERMISSION, "never issued");
  uint64_t nobody = (h >> 32 ^ 0x5a5a5a5a) << 32 | 12345; /* a door no process opened */
  CHECK_MSG(aclrtMemImportFromShareableHandle(nobody, 0, &mine), ACL_ERROR_RT_IPC_ERROR, "gone");
  int32_t me = getpid();
  CHECK_MSG(aclrtMemSetPidToShareableHandle(h, &me, 1), ACL_ERROR_RT_NO_PERMISSION, "only the exporting process");
  CHECK(mine == NULL);
  CHECK_OK(aclrtMemImportFromShareableHandle(h, 0, &mine)); /* the share itself is untouched */
  CHECK_OK(aclrtFreePhysical(mine));
  send_int(c->up[1], 1);
  CHECK_EQ(recv_int(c->down[0]), 2); /* the exporter freed it */
  CHECK_MSG(aclrtMemImportFromShareableHandle(h, 0, &mine), ACL_ERROR_RT_NO_PERMISSION, "never issued");
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(forged_and_stale_handles_are_refused) {
  aclrtDrvMemHandle ph = phys_new(GRAN);
  uint64_t h;
  aclrtMemFabricHandle fh; /* a fabric handle is a handle of its own: one per allocation, as a DEFAULT one */
  aclrtDrvMemHandle ph3 = phys_new(GRAN);
  CHECK_OK(aclrtMemExportToShareableHandleV2(ph3, 0, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, &fh));
  CHECK_MSG(aclrtMemExportToShareableHandleV2(ph3, 0, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, &h), ACL_ERROR_RT_PARAM_INVALID,
            "already exported");
  CHECK_OK(aclrtFreePhysical(ph3));
  CHECK_ACL(aclrtMemExportToShareableHandleV2(ph, 0, (aclrtMemSharedHandleType)0, &h), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtMemExportToShareableHandleV2(ph, 0, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtMemExportToShareableHandleV2(ph, ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION,
                                             ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, &h));
  uint64_t h2;
  aclrtDrvMemHandle ph2 = phys_new(GRAN);
  CHECK_OK(aclrtMemExportToShareableHandle(ph2, ACL_MEM_HANDLE_TYPE_NONE, 1, &h2));
  CHECK_EQ(h2 >> 32, h >> 32); /* one door per process */
  CHECK(h2 != h);
  CHECK_OK(aclrtFreePhysical(ph2));
  /* a memory key forged to name the shareable export (our own nonce, its id, a zero secret) reaches nothing */
  char key[KEYLEN], forged[KEYLEN];
  void *p = export_new(PAGE, EXPORT_ANY, key);
  key_rec kr = key_decode(key);
  kr.id = h;
  memset(kr.secret, 0, sizeof kr.secret);
  key_encode(&kr, forged);
  int32_t me = getpid();
  CHECK_ACL(aclrtIpcMemSetImportPid(forged, &me, 1), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtIpcMemClose(forged), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  int32_t pid1 = 1;
  memset(&fh, 0, sizeof fh);
  memcpy(fh.data, &h, sizeof h);
  CHECK_MSG(aclrtMemSetPidToShareableHandleV2(&fh, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, &pid1, 1),
            ACL_ERROR_INVALID_PARAM, "not an aclrtMemFabricHandle");
  CHECK_ACL(aclrtMemSetPidToShareableHandleV2(NULL, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, &pid1, 1),
            ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtMemSetPidToShareableHandleV2(&h, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, &pid1, 1));
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, forger, NULL);
  to_child(&c, &h, sizeof h);
  CHECK_EQ(recv_int(c.up[0]), 1);
  CHECK_OK(aclrtFreePhysical(ph)); /* ends the share */
  send_int(c.down[1], 2);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclFinalize());
}

/* What a child inherits through fork is not its to share or free. */
static int forked_child(void *arg) {
  aclrtDrvMemHandle ph = arg;
  uint64_t h;
  CHECK_ACL(aclrtMemExportToShareableHandle(ph, ACL_MEM_HANDLE_TYPE_NONE, 0, &h), ACL_ERROR_RT_INVALID_HANDLE);
  CHECK_ACL(aclrtFreePhysical(ph), ACL_ERROR_RT_INVALID_HANDLE);
  return 0;
}

TEST(finalize_and_fork_leave_nothing_behind) {
  int fds0 = fd_count();
  aclrtDrvMemHandle ph = phys_new(GRAN);
  unsigned char *v = reserve(2 * GRAN);
  CHECK_OK(aclrtMapMem(v, GRAN, 0, ph, 0));
  uint64_t h;
  CHECK_OK(aclrtMemExportToShareableHandle(ph, ACL_MEM_HANDLE_TYPE_NONE, 1, &h));
  CHECK_EQ(th_wait(th_spawn(forked_child, ph)), 0);
  CHECK_OK(aclFinalize()); /* unmaps, releases, ends the share */
  CHECK_ACL(aclrtFreePhysical(ph), ACL_ERROR_RT_INVALID_HANDLE);
  CHECK_EQ(fd_count(), fds0);
  void *p = mmap(v, 2 * GRAN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  CHECK(p == v); /* the reservation's address space is free again */
  munmap(p, 2 * GRAN);
}

TEST(mapped_memory_on_streams) {
  aclrtDrvMemHandle a = phys_new(GRAN), b = phys_new(GRAN);
  unsigned char *v = reserve(2 * GRAN);
  CHECK_OK(aclrtMapMem(v, GRAN, 0, a, 0));
  CHECK_OK(aclrtMapMem(v + GRAN, GRAN, 0, b, 0));
  aclrtStream s;
  CHECK_OK(aclrtCreateStream(&s));
  CHECK_OK(aclrtMemsetAsync(v, 2 * GRAN, 0x21, 2 * GRAN, s)); /* across both mappings */
  unsigned char host[64];
  CHECK_OK(aclrtMemcpyAsync(host, sizeof host, v + GRAN - 32, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  for (size_t i = 0; i < sizeof host; i++) CHECK_EQ(host[i], 0x21);
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtUnmapMem(v));
  CHECK_OK(aclrtUnmapMem(v + GRAN));
  CHECK_OK(aclrtReleaseMemAddress(v));
  CHECK_OK(aclrtFreePhysical(a));
  CHECK_OK(aclrtFreePhysical(b));
  CHECK_OK(aclFinalize());
}

static void *map_copy_unmap_loop(void *arg) {
  int rounds = *(int *)arg;
  for (int i = 0; i < rounds; i++) {
    aclrtDrvMemHandle h = phys_new(GRAN);
    unsigned char *v = reserve(GRAN);
    CHECK_OK(aclrtMapMem(v, GRAN, 0, h, 0));
    uint64_t sh;
    CHECK_OK(aclrtMemExportToShareableHandle(h, ACL_MEM_HANDLE_TYPE_NONE, 1, &sh));
    uint32_t x = (uint32_t)i, y = 0;
    CHECK_OK(aclrtMemcpy(v + 4096, 4, &x, 4, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK_OK(aclrtMemcpy(&y, 4, v + 4096, 4, ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK_EQ(y, x);
    CHECK_OK(aclrtFreePhysical(h)); /* before the unmap: deferred */
    CHECK_OK(aclrtUnmapMem(v));
    CHECK_OK(aclrtReleaseMemAddress(v));
  }
  return NULL;
}

TEST(threads_map_share_and_copy_at_once) {
  int rounds = under_valgrind() ? 10 : 200;
  pthread_t t[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, map_copy_unmap_loop, &rounds) == 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  size_t free_b, total;
  CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free_b, &total));
  CHECK_EQ(free_b, total); /* every physical allocation given back */
  CHECK_OK(aclFinalize());
}

/* Imports, maps, writes, and is killed holding it all. */
static int killed_importer(chan *c, void *arg) {
  (void)arg;
  uint64_t h;
  from_parent(c, &h, sizeof h);
  aclrtDrvMemHandle mine;
  CHECK_OK(aclrtMemImportFromShareableHandle(h, 0, &mine));
  unsigned char *v = reserve(GRAN);
  CHECK_OK(aclrtMapMem(v, GRAN, 0, mine, 0));
  v[7] = 77;
  send_int(c->up[1], 1);
  raise(SIGKILL);
  return 0;
}

TEST(an_importer_killed_holding_memory_leaves_the_exporter_whole) {
  aclrtDrvMemHandle ph = phys_new(GRAN);
  unsigned char *v = reserve(GRAN);
  CHECK_OK(aclrtMapMem(v, GRAN, 0, ph, 0));
  uint64_t h;
  CHECK_OK(aclrtMemExportToShareableHandle(ph, ACL_MEM_HANDLE_TYPE_NONE, 1, &h));
  for (int round = 0; round < 2; round++) { /* the second importer is served as the first was */
    chan c;
    chan_open(&c);
    int pid = chan_spawn(&c, killed_importer, NULL);
    to_child(&c, &h, sizeof h);
    CHECK_EQ(recv_int(c.up[0]), 1);
    CHECK_EQ(th_wait(pid), 128 + SIGKILL);
    chan_close(&c);
    CHECK_EQ(v[7], 77);
    v[7] = 0;
  }
  CHECK_OK(aclrtUnmapMem(v));
  CHECK_OK(aclrtReleaseMemAddress(v));
  CHECK_OK(aclrtFreePhysical(ph));
  CHECK_OK(aclFinalize());
}

TEST(address_ranges) {
  aclrtDrvMemHandle h = phys_new(GRAN);
  unsigned char *v = reserve(2 * GRAN);
  CHECK_OK(aclrtMapMem(v + GRAN, GRAN, 0, h, 0));
  void *base = NULL;
  size_t size = 0;
  CHECK_ACL(aclrtMemGetAddressRange(NULL, &base, &size), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtMemGetAddressRange(v + GRAN, NULL, NULL), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_OK(aclrtMemGetAddressRange(v + GRAN + 12345, &base, &size));
  CHECK(base == v + GRAN && size == GRAN);
  CHECK_MSG(aclrtMemGetAddressRange(v, &base, &size), ACL_ERROR_RT_PARAM_INVALID, "not in memory");
  unsigned char *d = dmalloc(3 * PAGE);
  CHECK_OK(aclrtMemGetAddressRange(d + PAGE, NULL, &size)); /* aclrtMalloc memory too */
  CHECK_EQ(size, 3 * PAGE);
  CHECK_OK(aclrtFree(d));
  CHECK_ACL(aclrtMemGetAddressRange(d, &base, NULL), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_OK(aclrtUnmapMem(v + GRAN));
  CHECK_OK(aclrtReleaseMemAddress(v));
  CHECK_OK(aclrtFreePhysical(h));
  CHECK_OK(aclFinalize());
}

TEST(one_gib_pages) {
  aclrtPhysicalMemProp p = phys_prop_on(0);
  p.memAttr = ACL_HBM_MEM_HUGE1G;
  aclrtDrvMemHandle h;
  size_t gib = (size_t)1 << 30, free_b, total;
  CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free_b, &total));
  if (total < gib) { /* a small emulated device (valgrind runs): the rounding alone is too much */
    CHECK_MSG(aclrtMallocPhysical(&h, GRAN, &p, 0), ACL_ERROR_RT_MEMORY_ALLOCATION, "rounded to the 1073741824");
    CHECK_OK(aclFinalize());
    return;
  }
  CHECK_OK(aclrtMallocPhysical(&h, GRAN, &p, 0)); /* rounded up to 1 GiB (nothing is touched) */
  unsigned char *v = reserve(2 * gib);
  CHECK_MSG(aclrtMapMem(v, GRAN, 0, h, 0), ACL_ERROR_RT_PARAM_INVALID, "maps whole");
  CHECK_MSG(aclrtMapMem(v + GRAN, gib, 0, h, 0), ACL_ERROR_RT_PARAM_INVALID, "aligned");
  CHECK_OK(aclrtMapMem(v + gib, gib, 0, h, 0));
  v[2 * gib - 1] = 1;
  CHECK_OK(aclrtUnmapMem(v + gib));
  CHECK_OK(aclrtReleaseMemAddress(v));
  CHECK_OK(aclrtFreePhysical(h));
  CHECK_OK(aclFinalize());
}

/* Descriptors of this process whose target names an ascend_ipc memfd; the last one in *fd. */
static int ascend_memfds(int *fd) {
  DIR *d = opendir("/proc/self/fd");
  CHECK(d != NULL);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    char path[300], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    if (strstr(target, "memfd:ascend_ipc")) {
      n++;
      *fd = atoi(e->d_name);
    }
  }
  closedir(d);
  return n;
}

/* A whitelisted importer turning on what it was given: it finds exactly the
 * one allocation it imported, cannot resize it, and floods the exporter's
 * door with connections; then, as another user, it is refused. */
static int hostile_importer(chan *c, void *arg) {
  (void)arg;
  uint64_t h;
  from_parent(c, &h, sizeof h);
  int fd = -1;
  CHECK_EQ(ascend_memfds(&fd), 0);
  aclrtDrvMemHandle mine;
  CHECK_OK(aclrtMemImportFromShareableHandle(h, 0, &mine));
  CHECK_EQ(ascend_memfds(&fd), 1); /* that allocation, nothing else of the exporter's */
  struct stat st;
  CHECK(fstat(fd, &st) == 0);
  CHECK_EQ((size_t)st.st_size, GRAN);
  CHECK(ftruncate(fd, 0) != 0 && errno == EPERM); /* sealed: no SIGBUS for the exporter */
  CHECK(ftruncate(fd, 2 * GRAN) != 0 && errno == EPERM);
  /* the door takes a flood like the main socket: capped per process, and it keeps serving */
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  int nlen = snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "ascend_ipc.%u.%016llx", (unsigned)(h >> 32), 0ULL);
  int flood[200], nflood = 0;
  for (int i = 0; i < 200; i++) {
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s >= 0 && connect(s, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nlen)) == 0)
      flood[nflood++] = s;
    else if (s >= 0)
      close(s);
  }
  CHECK(nflood > 64);
  aclrtDrvMemHandle again;
  /* one imported handle per shareable handle in a process (CANN) */
  CHECK_MSG(aclrtMemImportFromShareableHandle(h, 0, &again), ACL_ERROR_RT_PARAM_INVALID, "already imported");
  CHECK_OK(aclrtFreePhysical(mine));
  CHECK_OK(aclrtMemImportFromShareableHandle(h, 0, &again)); /* its own connection still works */
  CHECK_OK(aclrtFreePhysical(again));
  for (int i = 0; i < nflood; i++) close(flood[i]);
  if (geteuid() == 0) { /* as another user: refused, whatever the whitelist says */
    CHECK_OK(aclFinalize());
    CHECK(setgroups(0, NULL) == 0);
    CHECK(setgid(65534) == 0);
    CHECK(setuid(65534) == 0);
    CHECK_MSG(aclrtMemImportFromShareableHandle(h, 0, &mine), ACL_ERROR_RT_NO_PERMISSION, "same user");
  }
  send_int(c->up[1], 1);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(a_hostile_importer_reaches_only_its_grant) {
  aclrtDrvMemHandle ph = phys_new(GRAN);
  unsigned char *v = reserve(GRAN);
  CHECK_OK(aclrtMapMem(v, GRAN, 0, ph, 0));
  fill_pattern(v, GRAN, 5);
  uint64_t h;
  CHECK_OK(aclrtMemExportToShareableHandle(ph, ACL_MEM_HANDLE_TYPE_NONE, ACL_RT_VMM_EXPORT_FLAG_DEFAULT, &h));
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, hostile_importer, NULL);
  int32_t who = pid;
  CHECK_OK(aclrtMemSetPidToShareableHandle(h, &who, 1));
  to_child(&c, &h, sizeof h);
  CHECK_EQ(recv_int(c.up[0]), 1);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK(check_pattern(v, GRAN, 5)); /* whole, and no SIGBUS here */
  CHECK_OK(aclrtUnmapMem(v));
  CHECK_OK(aclrtReleaseMemAddress(v));
  CHECK_OK(aclrtFreePhysical(ph));
  CHECK_OK(aclFinalize());
}

/* ---- one imported handle per shareable handle (CANN: one to one in a process) ---- */

typedef struct import_race {
  uint64_t h;
  aclrtDrvMemHandle got;
  aclError rc;
} import_race;

static void *race_import(void *p) {
  import_race *r = p;
  r->rc = aclrtMemImportFromShareableHandle(r->h, 0, &r->got);
  return NULL;
}

static int twice_importer(chan *c, void *arg) {
  (void)arg;
  uint64_t h;
  from_parent(c, &h, sizeof h);
  enum { T = 6 };
  pthread_t th[T];
  import_race r[T];
  for (int i = 0; i < T; i++) {
    r[i] = (import_race){h, NULL, -1};
    CHECK(pthread_create(&th[i], NULL, race_import, &r[i]) == 0);
  }
  int won = -1;
  for (int i = 0; i < T; i++) {
    CHECK(pthread_join(th[i], NULL) == 0);
    if (r[i].rc == ACL_SUCCESS) {
      CHECK(won < 0); /* exactly one import wins */
      won = i;
    } else {
      CHECK_EQ(r[i].rc, ACL_ERROR_RT_PARAM_INVALID);
    }
  }
  CHECK(won >= 0);
  aclrtDrvMemHandle again = NULL;
  CHECK_MSG(aclrtMemImportFromShareableHandle(h, 0, &again), ACL_ERROR_RT_PARAM_INVALID, "one to one");
  CHECK_MSG(aclrtMemImportFromShareableHandleV2(&h, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, 0, &again),
            ACL_ERROR_RT_PARAM_INVALID, "already imported");
  CHECK(again == NULL);
  /* a retain is the same handle, not a second import */
  unsigned char *v = reserve(GRAN);
  CHECK_OK(aclrtMapMem(v, GRAN, 0, r[won].got, 0));
  CHECK(check_pattern(v, GRAN, 77));
  CHECK_OK(aclrtFreePhysical(r[won].got));
  /* the first handle freed (its mapping may stay): the shareable handle imports again */
  CHECK_OK(aclrtMemImportFromShareableHandle(h, 0, &again));
  CHECK_OK(aclrtFreePhysical(again));
  CHECK_OK(aclrtUnmapMem(v));
  CHECK_OK(aclrtReleaseMemAddress(v));
  /* held at aclFinalize: aclFinalize ends it, so it imports again after */
  CHECK_OK(aclrtMemImportFromShareableHandle(h, 0, &again));
  send_int(c->up[1], 1);
  CHECK_OK(aclFinalize());
  CHECK_OK(aclrtMemImportFromShareableHandle(h, 0, &again));
  CHECK_OK(aclrtFreePhysical(again));
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(one_imported_handle_per_shareable_handle_in_a_process) {
  aclrtDrvMemHandle ph = phys_new(GRAN);
  unsigned char *v = reserve(GRAN);
  CHECK_OK(aclrtMapMem(v, GRAN, 0, ph, 0));
  fill_pattern(v, GRAN, 77);
  uint64_t h;
  CHECK_OK(aclrtMemExportToShareableHandle(ph, ACL_MEM_HANDLE_TYPE_NONE,
                                           ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION, &h));
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, twice_importer, NULL);
  to_child(&c, &h, sizeof h);
  CHECK_EQ(recv_int(c.up[0]), 1);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclrtUnmapMem(v));
  CHECK_OK(aclrtReleaseMemAddress(v));
  CHECK_OK(aclrtFreePhysical(ph));
  CHECK_OK(aclFinalize());
}
