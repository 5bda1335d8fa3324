/*
 * Device memory in huge pages: aclrtMalloc's HUGE_FIRST and HUGE_ONLY
 * policies (the default's among them) take 2 MiB pages from the kernel's
 * hugetlb pool for requests above 1 MiB when the pool has them, normal
 * pages otherwise; NORMAL_ONLY and small requests never do. An import of a
 * huge-page allocation maps on a 2 MiB boundary, in huge pages, and is gone
 * after its close. A read of every page of such an import costs one fault
 * per 2 MiB instead of one per 4 KiB (make bench-c, row (e)).
 *
 * Huge pages are opt-in (ASCEND_IPC_HUGE_PAGES=1): an importer that punches
 * a page out of a huge-page allocation and drains the pool makes the
 * exporter's next touch of it SIGBUS (docs/design.md, security model).
 * The tests that need a pool make one where they may (root: they raise
 * vm.nr_hugepages by what they need and put it back when they end) and say
 * "skipped" where they may not.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>

#include "ipc_util.h"

/* Every test's runtime reads it at its first call (each test is a process):
 * the transparent tests below set their own before it. */
__attribute__((constructor)) static void huge_pages_on(void) { setenv("ASCEND_IPC_HUGE_PAGES", "1", 1); }

#define TWO_MIB ((size_t)2 << 20)

/* One HugePages_* figure of /proc/meminfo (pages), or -1. */
static long meminfo(const char *field) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[128], name[64];
  long v = -1, x;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%63[^:]: %ld", name, &x) == 2 && strcmp(name, field) == 0) v = x;
  fclose(f);
  return v;
}

static long g_pool_before = -1; /* vm.nr_hugepages before this test raised it */

static void write_pool(long pages) {
  FILE *f = fopen("/proc/sys/vm/nr_hugepages", "w");
  if (!f) return;
  fprintf(f, "%ld\n", pages);
  fclose(f);
}

static void pool_restore(void) {
  if (g_pool_before >= 0) write_pool(g_pool_before);
}

/* Whether the pool has n free pages, raising it by what is missing where
 * this process may (put back at exit). */
static int pool_has(long n) {
  long free_pages = meminfo("HugePages_Free"), total = meminfo("HugePages_Total");
  if (free_pages < 0 || total < 0) return 0;
  if (free_pages >= n) return 1;
  if (access("/proc/sys/vm/nr_hugepages", W_OK) != 0) return 0;
  if (g_pool_before < 0) {
    g_pool_before = total;
    atexit(pool_restore);
  }
  write_pool(total + (n - free_pages));
  return meminfo("HugePages_Free") >= n;
}

#define NEEDS_POOL(n)                                                                            \
  do {                                                                                           \
    if (!pool_has(n)) {                                                                          \
      fprintf(stderr, "skipped: no %ld free huge pages, and this process may not add them "      \
                      "(vm.nr_hugepages)\n", (long)(n));                                         \
      return;                                                                                    \
    }                                                                                            \
  } while (0)

/* The page size (KiB) backing address p in this process, from /proc/self/smaps; 0 if unmapped. */
static long kernel_page_kib(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  CHECK(f != NULL);
  char line[512];
  int inside = 0;
  long kib = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7[rwxps-] ", &lo, &hi, perms) == 3) { /* a mapping's first line */
      inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (inside && sscanf(line, "KernelPageSize: %ld kB", &kib) == 1) break;
  }
  fclose(f);
  return inside ? kib : 0;
}

static size_t range_size(void *p) {
  void *base = NULL;
  size_t size = 0;
  CHECK_OK(aclrtMemGetAddressRange(p, &base, &size));
  CHECK(base == p);
  return size;
}

static void *alloc_policy(size_t n, aclrtMemMallocPolicy policy) {
  void *p = NULL;
  CHECK_OK(aclrtMalloc(&p, n, policy));
  return p;
}

TEST(normal_only_and_small_requests_take_normal_pages) {
  pool_has(8); /* with huge pages free where this process may add them; without, too */
  void *a = alloc_policy(3 * MiB, ACL_MEM_MALLOC_NORMAL_ONLY);
  void *b = alloc_policy(3 * MiB, ACL_MEM_MALLOC_NORMAL_ONLY_P2P);
  void *c = alloc_policy(MiB, ACL_MEM_MALLOC_HUGE_FIRST); /* 1 MiB and below: normal pages, as CANN */
  void *d = alloc_policy(MiB, ACL_MEM_MALLOC_HUGE_ONLY);
  void *all[] = {a, b, c, d};
  for (int i = 0; i < 4; i++) {
    memset(all[i], 1, PAGE);
    CHECK_EQ(kernel_page_kib(all[i]), 4);
  }
  CHECK_EQ(range_size(a), 3 * MiB);
  CHECK_EQ(range_size(c), MiB);
  for (int i = 0; i < 4; i++) CHECK_OK(aclrtFree(all[i]));
}

TEST(the_pool_is_used_only_when_asked_for) {
  pool_has(4);
  unsetenv("ASCEND_IPC_HUGE_PAGES"); /* read at the runtime's first call in this process */
  void *p = alloc_policy(3 * MiB, ACL_MEM_MALLOC_HUGE_ONLY);
  memset(p, 1, PAGE);
  CHECK_EQ(kernel_page_kib(p), 4); /* not hugetlbfs (transparent huge pages, maybe: below) */
  CHECK_OK(aclrtFree(p));
}

TEST(huge_first_takes_huge_pages_from_the_pool) {
  NEEDS_POOL(8);
  aclrtMemMallocPolicy policies[] = {ACL_MEM_MALLOC_HUGE_FIRST, ACL_MEM_MALLOC_HUGE_ONLY,
                                     ACL_MEM_MALLOC_HUGE_FIRST_P2P, ACL_MEM_MALLOC_HUGE_ONLY_P2P};
  for (int i = 0; i < 4; i++) {
    size_t before_free, before_total, after_free, total;
    CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &before_free, &before_total));
    uint8_t *p = alloc_policy(MiB + 1, policies[i]); /* just above CANN's 1 MiB line */
    CHECK_EQ((uintptr_t)p % TWO_MIB, 0);
    CHECK_EQ(range_size(p), TWO_MIB); /* whole huge pages, as the device's capacity counts them */
    CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &after_free, &total));
    CHECK_EQ(before_free - after_free, TWO_MIB);
    fill_pattern(p, TWO_MIB, 11);
    CHECK_EQ(kernel_page_kib(p), 2048);
    CHECK(check_pattern(p, TWO_MIB, 11));
    CHECK_OK(aclrtFree(p));
    CHECK(kernel_page_kib(p) != 2048); /* the range went back to the reservation */
  }
}

TEST(more_than_the_pool_holds_falls_back_to_normal_pages) {
  long total = meminfo("HugePages_Total");
  if (total < 0 || total > 4096) {
    fprintf(stderr, "skipped: the pool is %ld pages, more than this test asks for beyond it\n", total);
    return;
  }
  /* One page more than the whole pool: a huge-page allocation is all or
   * nothing, so this one takes normal pages whatever else holds the pool. */
  size_t n = (size_t)(total + 1) * TWO_MIB;
  uint8_t *p = alloc_policy(n, ACL_MEM_MALLOC_HUGE_ONLY);
  memset(p, 3, PAGE);
  p[n - 1] = 4;
  CHECK_EQ(kernel_page_kib(p), 4);
  CHECK_EQ(range_size(p), n);
  CHECK_OK(aclrtFree(p));
}

static int import_huge(chan *c, void *arg) {
  (void)arg;
  char key[KEYLEN];
  from_parent(c, key, KEYLEN);
  uint8_t *q = NULL;
  int ok = aclrtIpcMemImportByKey((void **)&q, key, 0) == ACL_SUCCESS;
  ok = ok && (uintptr_t)q % TWO_MIB == 0;
  ok = ok && check_pattern(q, 4 * MiB, 21) && kernel_page_kib(q) == 2048;
  if (ok) fill_pattern(q, 4 * MiB, 22); /* the exporter sees the importer's writes */
  ok = ok && aclrtIpcMemClose(key) == ACL_SUCCESS;
  ok = ok && kernel_page_kib(q) == 0; /* nothing left mapped there */
  /* and a second import maps again, on the boundary */
  ok = ok && aclrtIpcMemImportByKey((void **)&q, key, 0) == ACL_SUCCESS && (uintptr_t)q % TWO_MIB == 0;
  ok = ok && check_pattern(q, 4 * MiB, 22) && aclrtIpcMemClose(key) == ACL_SUCCESS;
  send_int(c->up[1], ok);
  to_parent(c, "done", 5);
  return 0;
}

TEST(an_import_of_huge_pages_maps_them_on_their_boundary) {
  NEEDS_POOL(4);
  char key[KEYLEN];
  uint8_t *p = export_new(4 * MiB, EXPORT_ANY, key);
  CHECK_EQ(kernel_page_kib(p), 2048);
  fill_pattern(p, 4 * MiB, 21);
  char msg[5];
  CHECK_EQ(ask_child(import_huge, NULL, key, msg, sizeof msg), 1);
  CHECK(check_pattern(p, 4 * MiB, 22));
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
}

static int import_sub_range(chan *c, void *arg) {
  (void)arg;
  char key[KEYLEN];
  from_parent(c, key, KEYLEN);
  uint8_t *q = NULL;
  int ok = aclrtIpcMemImportByKey((void **)&q, key, 0) == ACL_SUCCESS;
  /* the granted range starts one page into a huge page: so does the pointer */
  ok = ok && (uintptr_t)q % TWO_MIB == PAGE && check_pattern(q, 3 * MiB, 31);
  if (ok) fill_pattern(q, 3 * MiB, 32);
  ok = ok && aclrtIpcMemClose(key) == ACL_SUCCESS && kernel_page_kib(q) == 0 && kernel_page_kib(q - PAGE) == 0;
  send_int(c->up[1], ok);
  to_parent(c, "done", 5);
  return 0;
}

TEST(a_sub_range_of_huge_pages_imports_at_its_offset) {
  NEEDS_POOL(4);
  char key[KEYLEN] = {0};
  uint8_t *blk = alloc_policy(6 * MiB, ACL_MEM_MALLOC_HUGE_FIRST);
  CHECK_EQ(kernel_page_kib(blk), 2048);
  uint8_t *p = blk + PAGE; /* as torch's allocator hands out tensors inside a segment */
  CHECK_OK(aclrtIpcMemGetExportKey(p, 3 * MiB, key, KEYLEN, EXPORT_ANY));
  fill_pattern(p, 3 * MiB, 31);
  char msg[5];
  CHECK_EQ(ask_child(import_sub_range, NULL, key, msg, sizeof msg), 1);
  CHECK(check_pattern(p, 3 * MiB, 32));
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(blk));
}

/* ---- transparent huge pages, the default (ASCEND_IPC_HUGE_PAGES=2) --------
 * A huge-policy block above 1 MiB is rounded to 2 MiB and its pages are
 * made at aclrtMalloc in transparent 2 MiB pages (MADV_COLLAPSE), other
 * blocks' pages in normal pages, where the host can spare them; with 0,
 * every page is made at its first touch. No pool is involved. */

/* The KiB of the mapping holding p that are mapped by 2 MiB entries
 * (ShmemPmdMapped / FilePmdMapped in /proc/self/smaps). */
static long pmd_kib(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  CHECK(f != NULL);
  char line[512];
  int inside = 0;
  long kib = 0, v;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7[rwxps-] ", &lo, &hi, perms) == 3) {
      if (inside) break;
      inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (inside && (sscanf(line, "ShmemPmdMapped: %ld kB", &v) == 1 || sscanf(line, "FilePmdMapped: %ld kB", &v) == 1))
      kib += v;
  }
  fclose(f);
  return kib;
}

/* This process's shared memory in normal pages, KiB (RssShmem). */
static long rss_shmem_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  CHECK(f != NULL);
  char line[128];
  long kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "RssShmem: %ld kB", &kib) == 1) break;
  fclose(f);
  return kib;
}

/* Whether this kernel makes a memfd's pages transparent huge pages on
 * request (MADV_COLLAPSE, Linux 6.1 and newer, unless THP is denied). */
static int kernel_collapses(void) {
  int fd = memfd_create("probe", MFD_CLOEXEC);
  CHECK(fd >= 0);
  CHECK(ftruncate(fd, (off_t)TWO_MIB) == 0);
  uint8_t *r = mmap(NULL, 2 * TWO_MIB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(r != MAP_FAILED);
  uint8_t *a = (uint8_t *)(((uintptr_t)r + TWO_MIB - 1) & ~(uintptr_t)(TWO_MIB - 1));
  CHECK(mmap(a, TWO_MIB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == a);
  a[0] = 0;
  int ok = madvise(a, TWO_MIB, 25 /* MADV_COLLAPSE */) == 0;
  munmap(r, 2 * TWO_MIB);
  close(fd);
  return ok;
}

#define NEEDS_COLLAPSE()                                                                              \
  do {                                                                                                \
    if (!kernel_collapses()) {                                                                        \
      fprintf(stderr, "skipped: this kernel makes no transparent huge pages on request (MADV_COLLAPSE: " \
                      "Linux 6.1 and newer, THP not denied); device memory takes normal pages\n");     \
      return;                                                                                         \
    }                                                                                                 \
  } while (0)

static int all_zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i += PAGE)
    if (p[i] != 0 || p[i + PAGE - 1] != 0) return 0;
  return 1;
}

TEST(huge_policies_take_transparent_huge_pages_at_malloc) {
  unsetenv("ASCEND_IPC_HUGE_PAGES");
  NEEDS_COLLAPSE();
  aclrtMemMallocPolicy policies[] = {ACL_MEM_MALLOC_HUGE_FIRST, ACL_MEM_MALLOC_HUGE_ONLY,
                                     ACL_MEM_MALLOC_HUGE_FIRST_P2P, ACL_MEM_MALLOC_HUGE_ONLY_P2P};
  for (int i = 0; i < 4; i++) {
    size_t before_free, total, after_free;
    CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &before_free, &total));
    uint8_t *p = alloc_policy(3 * MiB, policies[i]);
    CHECK_EQ((uintptr_t)p % TWO_MIB, 0);
    CHECK_EQ(range_size(p), 4 * MiB); /* whole huge pages, as the device's capacity counts them */
    CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &after_free, &total));
    CHECK_EQ(before_free - after_free, 4 * MiB);
    CHECK_EQ(pmd_kib(p), 4096); /* made and mapped by aclrtMalloc, before any touch */
    CHECK(all_zero(p, 4 * MiB));
    fill_pattern(p, 4 * MiB, 41);
    CHECK(check_pattern(p, 4 * MiB, 41));
    CHECK_EQ(pmd_kib(p), 4096);
    CHECK_OK(aclrtFree(p));
    CHECK_EQ(pmd_kib(p), 0); /* the range went back to the reservation */
  }
  /* a new block over the same range reads zeros */
  uint8_t *q = alloc_policy(4 * MiB, ACL_MEM_MALLOC_HUGE_FIRST);
  CHECK(all_zero(q, 4 * MiB));
  CHECK_OK(aclrtFree(q));
}

TEST(other_blocks_take_normal_pages_made_at_malloc) {
  unsetenv("ASCEND_IPC_HUGE_PAGES");
  long before = rss_shmem_kib();
  uint8_t *a = alloc_policy(8 * MiB, ACL_MEM_MALLOC_NORMAL_ONLY);
  uint8_t *b = alloc_policy(MiB, ACL_MEM_MALLOC_HUGE_FIRST); /* 1 MiB and below: normal pages, as CANN */
  CHECK(rss_shmem_kib() - before >= 9 * 1024); /* made, untouched */
  CHECK_EQ(range_size(a), 8 * MiB);
  CHECK_EQ(range_size(b), MiB);
  CHECK_EQ(pmd_kib(a), 0);
  CHECK_EQ(pmd_kib(b), 0);
  CHECK(all_zero(a, 8 * MiB) && all_zero(b, MiB));
  CHECK_OK(aclrtFree(a));
  CHECK_OK(aclrtFree(b));
  CHECK(rss_shmem_kib() - before < 1024);
}

TEST(zero_makes_every_page_at_its_first_touch) {
  setenv("ASCEND_IPC_HUGE_PAGES", "0", 1);
  long before = rss_shmem_kib();
  uint8_t *a = alloc_policy(3 * MiB, ACL_MEM_MALLOC_HUGE_FIRST);
  uint8_t *b = alloc_policy(8 * MiB, ACL_MEM_MALLOC_NORMAL_ONLY);
  CHECK_EQ(range_size(a), 3 * MiB);
  CHECK(rss_shmem_kib() - before < 1024);
  a[0] = 1;
  b[8 * MiB - 1] = 2;
  CHECK_EQ(pmd_kib(a), 0);
  CHECK(rss_shmem_kib() - before < 1024);
  CHECK_OK(aclrtFree(a));
  CHECK_OK(aclrtFree(b));
}

static int import_transparent(chan *c, void *arg) {
  size_t n = *(size_t *)arg;
  char key[KEYLEN];
  from_parent(c, key, KEYLEN);
  uint8_t *q = NULL;
  int ok = aclrtIpcMemImportByKey((void **)&q, key, 0) == ACL_SUCCESS;
  ok = ok && (uintptr_t)q % TWO_MIB == 0 && check_pattern(q, n, 51);
  ok = ok && pmd_kib(q) == (long)(n >> 10); /* read through 2 MiB entries */
  if (ok) fill_pattern(q, n, 52);
  ok = ok && aclrtIpcMemClose(key) == ACL_SUCCESS && kernel_page_kib(q) == 0;
  ok = ok && aclrtIpcMemImportByKey((void **)&q, key, 0) == ACL_SUCCESS && (uintptr_t)q % TWO_MIB == 0;
  ok = ok && check_pattern(q, n, 52) && aclrtIpcMemClose(key) == ACL_SUCCESS;
  send_int(c->up[1], ok);
  to_parent(c, "done", 5);
  return 0;
}

TEST(an_import_of_transparent_huge_pages_maps_them_whole) {
  unsetenv("ASCEND_IPC_HUGE_PAGES");
  NEEDS_COLLAPSE();
  size_t sizes[] = {4 * MiB, 64 * MiB};
  for (int i = 0; i < 2; i++) {
    char key[KEYLEN];
    uint8_t *p = export_new(sizes[i], EXPORT_ANY, key);
    fill_pattern(p, sizes[i], 51);
    char msg[5];
    CHECK_EQ(ask_child(import_transparent, &sizes[i], key, msg, sizeof msg), 1);
    CHECK(check_pattern(p, sizes[i], 52));
    CHECK_OK(aclrtIpcMemClose(key));
    CHECK_OK(aclrtFree(p));
  }
}

static int import_transparent_sub_range(chan *c, void *arg) {
  (void)arg;
  char key[KEYLEN];
  from_parent(c, key, KEYLEN);
  uint8_t *q = NULL;
  int ok = aclrtIpcMemImportByKey((void **)&q, key, 0) == ACL_SUCCESS;
  /* at its offset's place in 2 MiB, and nothing of the block outside the grant mapped */
  ok = ok && (uintptr_t)q % TWO_MIB == PAGE && check_pattern(q, 5 * MiB, 61);
  ok = ok && kernel_page_kib(q - PAGE) == 0 && kernel_page_kib(q + 5 * MiB) == 0;
  ok = ok && pmd_kib(q) == 2048; /* the one whole 2 MiB page inside the grant */
  if (ok) fill_pattern(q, 5 * MiB, 62);
  ok = ok && aclrtIpcMemClose(key) == ACL_SUCCESS && kernel_page_kib(q) == 0;
  send_int(c->up[1], ok);
  to_parent(c, "done", 5);
  return 0;
}

TEST(a_sub_range_of_transparent_huge_pages_maps_only_the_range) {
  unsetenv("ASCEND_IPC_HUGE_PAGES");
  NEEDS_COLLAPSE();
  char key[KEYLEN] = {0};
  uint8_t *blk = alloc_policy(8 * MiB, ACL_MEM_MALLOC_HUGE_FIRST);
  uint8_t *p = blk + PAGE;
  fill_pattern(blk, 8 * MiB, 60);
  CHECK_OK(aclrtIpcMemGetExportKey(p, 5 * MiB, key, KEYLEN, EXPORT_ANY));
  fill_pattern(p, 5 * MiB, 61);
  char msg[5];
  CHECK_EQ(ask_child(import_transparent_sub_range, NULL, key, msg, sizeof msg), 1);
  CHECK(check_pattern(p, 5 * MiB, 62));
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(blk));
}

/* Physical memory (aclrtMallocPhysical) follows the same rule: huge
 * attributes' pages made at the call in transparent 2 MiB pages, which
 * aclrtMapMem, on the granularity's boundary, maps whole. */
TEST(physical_memory_in_huge_pages_maps_them_whole) {
  unsetenv("ASCEND_IPC_HUGE_PAGES");
  NEEDS_COLLAPSE();
  aclrtMemAttr attrs[] = {ACL_HBM_MEM_HUGE, ACL_MEM_HUGE, ACL_HBM_MEM_NORMAL};
  for (int i = 0; i < 3; i++) {
    aclrtPhysicalMemProp prop = phys_prop_on(0);
    prop.memAttr = attrs[i];
    aclrtDrvMemHandle h = NULL;
    CHECK_OK(aclrtMallocPhysical(&h, 4 * MiB, &prop, 0));
    void *va = NULL;
    CHECK_OK(aclrtReserveMemAddress(&va, 4 * MiB, 0, NULL, 0));
    CHECK_OK(aclrtMapMem(va, 4 * MiB, 0, h, 0));
    uint8_t *p = va;
    CHECK(all_zero(p, 4 * MiB)); /* every page read: made at the call, mapped by its size */
    CHECK_EQ(pmd_kib(p), i < 2 ? 4096 : 0);
    fill_pattern(p, 4 * MiB, 71);
    CHECK(check_pattern(p, 4 * MiB, 71));
    CHECK_OK(aclrtUnmapMem(va));
    CHECK_OK(aclrtReleaseMemAddress(va));
    CHECK_OK(aclrtFreePhysical(h));
  }
}
