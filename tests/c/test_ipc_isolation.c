/*
 * Isolation (SPEC 2.1): an importer reaches exactly the memory it was
 * granted, and only while it holds it. Each test plays the importer as an
 * attacker would: it looks through its own address space and descriptors,
 * keeps pointers past their close, and takes the descriptor the exporter
 * sends (by speaking the wire protocol by hand) to resize or punch it.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "proc_util.h"
#include "wire_util.h"

/* The exporter's secret: a long run of one byte value, written by
 * aclrtMemset, so that no copy of it sits in anybody's stack or heap. */
#define SECRET_BYTE 0xa7
#define SECRET_RUN 256

static void plant_secret(uint8_t *p, size_t n) { CHECK_OK(aclrtMemset(p, n, SECRET_BYTE, n)); }

/* Whether the secret appears anywhere this process can read: every readable
 * mapping, read through /proc/self/mem (unreadable pages are skipped, not
 * faulted on). Anonymous mappings over 1 GiB (a sanitizer's shadow memory)
 * are skipped; any memfd mapping, of any size, is read. */
static int secret_visible(void) {
  FILE *maps = fopen("/proc/self/maps", "r");
  int mem = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  CHECK(maps && mem >= 0);
  static uint8_t buf[1 << 16];
  char line[512];
  int found = 0;
  while (!found && fgets(line, sizeof line, maps)) {
    unsigned long lo, hi;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r') continue;
    if (strstr(line, "[vvar]") || strstr(line, "[vsyscall]")) continue;
    if (hi - lo > (1ul << 30) && !strstr(line, "memfd:")) continue;
    size_t run = 0;
    for (unsigned long a = lo; !found && a < hi; a += sizeof buf) {
      size_t want = hi - a < sizeof buf ? hi - a : sizeof buf;
      ssize_t got = pread(mem, buf, want, (off_t)a);
      if (got <= 0) {
        run = 0;
        continue;
      }
      for (ssize_t i = 0; i < got && !found; i++) {
        run = buf[i] == SECRET_BYTE ? run + 1 : 0;
        found = run >= SECRET_RUN;
      }
    }
  }
  fclose(maps);
  close(mem);
  return found;
}

/* The runtime's memfds among this process's descriptors, and the bytes of
 * its address space mapped from them. */
static int memfd_fds(void) {
  proc_snap s;
  proc_snap_take(&s, 0);
  int n = proc_snap_count_fds(&s, "/memfd:ascend_ipc_dev");
  proc_snap_free(&s);
  return n;
}

static size_t memfd_mapped_bytes(void) {
  FILE *maps = fopen("/proc/self/maps", "r");
  CHECK(maps != NULL);
  char line[512];
  size_t total = 0;
  while (fgets(line, sizeof line, maps)) {
    unsigned long lo, hi;
    if (strstr(line, "memfd:ascend_ipc_dev") && sscanf(line, "%lx-%lx", &lo, &hi) == 2) total += hi - lo;
  }
  fclose(maps);
  return total;
}

/* The children here are forked from the exporter, and a forked child keeps
 * its parent's device memory mapped (untracked). They drop it first, to be
 * an importer as any other process is. */
static void drop_inherited_device_memory(void) {
  FILE *maps = fopen("/proc/self/maps", "r");
  CHECK(maps != NULL);
  unsigned long lo[256], hi[256];
  int n = 0;
  char line[512];
  while (n < 256 && fgets(line, sizeof line, maps))
    if (strstr(line, "memfd:ascend_ipc_dev") && sscanf(line, "%lx-%lx", &lo[n], &hi[n]) == 2) n++;
  fclose(maps);
  for (int i = 0; i < n; i++) CHECK(munmap((void *)lo[i], hi[i] - lo[i]) == 0);
  CHECK_EQ(memfd_mapped_bytes(), 0);
}

/* ---- an importer reaches what it was granted, nothing else ------------------------------------ */

static int granted_only_child(chan *c, void *arg) {
  (void)arg;
  child_deadline();
  char key[KEYLEN];
  from_parent(c, key, KEYLEN);
  drop_inherited_device_memory();
  CHECK(!secret_visible());
  void *p = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  CHECK(check_pattern(p, 64 * KiB, 42u));
  /* no descriptor of the exporter's memory, one mapping of exactly the grant */
  CHECK_EQ(memfd_fds(), 0);
  CHECK_EQ(memfd_mapped_bytes(), 64 * KiB);
  /* the exporter's other allocations (never exported, or exported to others) are nowhere */
  CHECK(!secret_visible());
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_EQ(memfd_mapped_bytes(), 0);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(importer_reaches_only_its_grant) {
  /* neighbours on the same device, before and after the exported one */
  uint8_t *before = dmalloc(64 * KiB);
  char key[KEYLEN], other[KEYLEN];
  uint8_t *granted = export_new(64 * KiB, EXPORT_DEFAULT, key);
  uint8_t *to_someone_else = export_new(64 * KiB, EXPORT_DEFAULT, other);
  uint8_t *after = dmalloc(1 * MiB);
  plant_secret(before, 64 * KiB);
  plant_secret(to_someone_else, 64 * KiB);
  plant_secret(after, 1 * MiB);
  fill_pattern(granted, 64 * KiB, 42u);
  int32_t stranger = 1; /* init: never this test's importer */
  CHECK_OK(aclrtIpcMemSetImportPid(other, &stranger, 1));
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, granted_only_child, NULL);
  CHECK_OK(aclrtIpcMemSetImportPid(key, &pid, 1));
  to_child(&c, key, KEYLEN);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtIpcMemClose(other));
  CHECK_OK(aclrtFree(before));
  CHECK_OK(aclrtFree(granted));
  CHECK_OK(aclrtFree(to_someone_else));
  CHECK_OK(aclrtFree(after));
  CHECK_OK(aclFinalize());
}

/* ---- only while it holds it ---------------------------------------------------------------- */

static int after_close_child(chan *c, void *arg) {
  int touch = *(int *)arg;
  child_deadline();
  char key[KEYLEN];
  from_parent(c, key, KEYLEN);
  drop_inherited_device_memory();
  proc_snap before;
  proc_snap_take(&before, 0);
  volatile uint8_t *p = NULL;
  CHECK_OK(aclrtIpcMemImportByKey((void **)&p, key, 0));
  CHECK(check_pattern((const void *)p, 64 * KiB, 43u));
  CHECK_OK(aclrtIpcMemClose(key));
  /* no descriptor and no mapping of it stays (the connection to the exporter does) */
  CHECK_EQ(memfd_fds(), 0);
  CHECK_EQ(memfd_mapped_bytes(), 0);
  send_int(c->up[1], 1);
  CHECK_EQ(recv_int(c->down[0]), 2); /* the exporter has put new bytes there */
  if (touch) {
    (void)p[0]; /* the emulator's use-after-close check: this faults */
    return 3;
  }
  CHECK(!secret_visible());
  proc_snap_free(&before);
  CHECK_OK(aclFinalize());
  return 0;
}

static void after_close_round(int touch) {
  char key[KEYLEN];
  uint8_t *p = export_new(64 * KiB, EXPORT_ANY, key);
  fill_pattern(p, 64 * KiB, 43u);
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, after_close_child, &touch);
  to_child(&c, key, KEYLEN);
  CHECK_EQ(recv_int(c.up[0]), 1);
  plant_secret(p, 64 * KiB); /* what the exporter keeps there from now on */
  send_int(c.down[1], 2);
  int status = th_wait(pid);
#if defined(__SANITIZE_ADDRESS__)
  if (touch) /* ASan reports the fault (SEGV on unknown address) and exits */
    CHECK(status != 0 && status != 3);
#else
  if (touch && under_valgrind()) /* valgrind reports the invalid read and exits with its error code */
    CHECK(status != 0 && status != 3);
  else if (touch)
    CHECK_EQ(status, 128 + SIGSEGV);
#endif
  if (!touch) CHECK_EQ(status, 0);
  chan_close(&c);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
}

TEST(after_its_close_an_importer_keeps_nothing) { after_close_round(0); CHECK_OK(aclFinalize()); }

TEST(touch_after_close_faults) { after_close_round(1); CHECK_OK(aclFinalize()); }

/* ---- what the exporter sends cannot be turned against it ------------------------------------ */

static int hostile_memfd_child(chan *c, void *arg) {
  (void)arg;
  child_deadline();
  char key[KEYLEN];
  from_parent(c, key, KEYLEN);
  key_rec k = key_decode(key);
  int s = raw_connect(key);
  CHECK(s >= 0);
  uint8_t b[512];
  CHECK(raw_send(s, b, pkt_import(b, &k, 1), -1) == IMPORT_LEN);
  int fds[8], nfd = 0;
  CHECK(raw_recv(s, b, sizeof b, fds, &nfd, 0) > 0);
  CHECK(nfd >= 1);
  int fd = fds[0];
  for (int i = 1; i < nfd; i++) close(fds[i]);
  /* the allocation alone, not a device arena */
  struct stat st;
  CHECK(fstat(fd, &st) == 0);
  CHECK_EQ(st.st_size, 64 * KiB);
  /* sealed: it can be neither cut (a SIGBUS in the exporter) nor grown, nor resealed */
  int seals = fcntl(fd, F_GET_SEALS);
  CHECK(seals >= 0 && (seals & F_SEAL_SHRINK) && (seals & F_SEAL_GROW) && (seals & F_SEAL_SEAL));
  CHECK(ftruncate(fd, 0) != 0 && errno == EPERM);
  CHECK(ftruncate(fd, 4096) != 0 && errno == EPERM);
  CHECK(ftruncate(fd, 1 << 30) != 0 && errno == EPERM);
  CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) != 0 && errno == EPERM);
  /* punching holes reaches the granted bytes only (they read as zeros): the
   * exporter's other allocations are not in this file */
  CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 64 * KiB) == 0);
  close(fd);
  close(s);
  return 0;
}

TEST(received_memfd_cannot_be_resized_or_reach_further) {
  char key[KEYLEN];
  uint8_t *neighbour = dmalloc(64 * KiB);
  uint8_t *p = export_new(64 * KiB, EXPORT_ANY, key);
  fill_pattern(p, 64 * KiB, 44u);
  fill_pattern(neighbour, 64 * KiB, 45u);
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, hostile_memfd_child, NULL);
  to_child(&c, key, KEYLEN);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  /* the exporter lives on: every byte of its memory is readable, the
   * neighbour untouched, the granted one zeroed by the punch */
  CHECK(check_pattern(neighbour, 64 * KiB, 45u));
  for (size_t i = 0; i < 64 * KiB; i++) CHECK(p[i] == 0);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclrtFree(neighbour));
  CHECK_OK(aclFinalize());
}

/* ---- an imported pointer is not the importer's to free ---------------------------------------- */

static int free_imported_child(chan *c, void *arg) {
  (void)arg;
  child_deadline();
  char key[KEYLEN];
  from_parent(c, key, KEYLEN);
  void *p = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  CHECK_MSG(aclrtFree(p), ACL_ERROR_RT_INVALID_HANDLE, "released with aclrtIpcMemClose");
  CHECK(check_pattern(p, 64 * KiB, 46u)); /* nothing changed */
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_MSG(aclrtFree(p), ACL_ERROR_RT_INVALID_HANDLE, "not allocated"); /* CANN sample proc_b */
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(free_of_an_imported_pointer_refused) {
  char key[KEYLEN];
  uint8_t *p = export_new(64 * KiB, EXPORT_ANY, key);
  fill_pattern(p, 64 * KiB, 46u);
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, free_imported_child, NULL);
  to_child(&c, key, KEYLEN);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK(check_pattern(p, 64 * KiB, 46u));
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}
