/*
 * White-box tests of the runtime's internals: the ordered map, the buddy
 * allocator, pins (the IPC layer's hold on exported blocks) and imported
 * blocks with the cross-device copy rule. The test links the runtime's
 * static library (libaipc_internal.a), whose internal names the shared
 * library hides, so it calls aipc__emu_* and the other parts directly.
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <unistd.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <errno.h>

#include "harness.h"

#include "core/error.h"
#include "core/ordmap.h"
#include "emu/buddy.h"
#include "emu/emu_internal.h"

static uint64_t rs = 88172645463325252ULL;
static uint64_t rnd(void) {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return rs;
}

/* ---- ordered map -------------------------------------------------------- */

typedef struct item {
  aipc__onode node;
  int live;
} item;

/* Checks order and heap property; returns the height. */
static int validate(const aipc__onode *t, uintptr_t lo, uintptr_t hi, size_t *count) {
  if (!t) return 0;
  CHECK(t->key >= lo && t->key <= hi);
  for (int k = 0; k < 2; k++)
    if (t->kid[k]) CHECK(t->kid[k]->prio <= t->prio);
  (*count)++;
  int l = validate(t->kid[0], lo, t->key ? t->key - 1 : 0, count);
  int r = validate(t->kid[1], t->key + 1, hi, count);
  return 1 + (l > r ? l : r);
}

TEST(ordmap_matches_a_reference) {
  enum { K = 4096, OPS = 200000 };
  static item items[K]; /* key of items[i] is (i + 1) * 4096 */
  aipc__omap m = AIPC__OMAP_INIT;
  for (int op = 0; op < OPS; op++) {
    int i = (int)(rnd() % K);
    uintptr_t key = (uintptr_t)(i + 1) * 4096;
    switch (rnd() % 4) {
      case 0:
      case 1:
        if (items[i].live) {
          CHECK(aipc__omap_get(&m, key) == &items[i].node);
          aipc__omap_remove(&m, &items[i].node);
          items[i].live = 0;
        } else {
          items[i].node.key = key;
          CHECK_EQ(aipc__omap_insert(&m, &items[i].node), 0);
          items[i].live = 1;
          item dup = {.node = {.key = key}};
          CHECK_EQ(aipc__omap_insert(&m, &dup.node), -1);
        }
        break;
      case 2: { /* floor of a key inside item i's page */
        uintptr_t q = key + rnd() % 4096;
        int j = i;
        while (j >= 0 && !items[j].live) j--;
        aipc__onode *f = aipc__omap_floor(&m, q);
        CHECK(f == (j >= 0 ? &items[j].node : NULL));
        break;
      }
      case 3: {
        int j = i + 1;
        while (j < K && !items[j].live) j++;
        aipc__onode *n = aipc__omap_next(&m, key);
        CHECK(n == (j < K ? &items[j].node : NULL));
        break;
      }
    }
    if (op % 20000 == 0) {
      size_t count = 0;
      int h = validate(m.root, 0, UINTPTR_MAX, &count);
      CHECK_EQ(count, m.len);
      CHECK(h < 64); /* balanced: ~2.5 log2(n) expected */
    }
  }
  size_t live = 0;
  for (int i = 0; i < K; i++) live += items[i].live;
  CHECK_EQ(m.len, live);
  /* An in-order walk visits every live item once, ascending. */
  size_t seen = 0;
  for (aipc__onode *n = aipc__omap_next(&m, 0); n; n = aipc__omap_next(&m, n->key)) seen++;
  CHECK_EQ(seen, live);
}

static void count_node(aipc__onode *n, void *arg) {
  (void)n;
  (*(size_t *)arg)++;
}

TEST(ordmap_sorted_inserts_stay_shallow_and_drain) {
  enum { K = 100000 };
  item *items = calloc(K, sizeof *items);
  aipc__omap m = AIPC__OMAP_INIT;
  for (int i = 0; i < K; i++) { /* ascending keys, like arena addresses */
    items[i].node.key = (uintptr_t)(i + 1) * 4096;
    CHECK_EQ(aipc__omap_insert(&m, &items[i].node), 0);
  }
  size_t count = 0;
  int h = validate(m.root, 0, UINTPTR_MAX, &count);
  CHECK_EQ(count, K);
  CHECK(h < 80);
  size_t drained = 0;
  aipc__omap_drain(&m, count_node, &drained);
  CHECK_EQ(drained, K);
  CHECK(m.root == NULL && m.len == 0);
  free(items);
}

/* ---- buddy allocator ---------------------------------------------------- */

static void check_single_free_block(aipc__buddy *b) { CHECK(aipc__buddy_all_free(b)); }

TEST(buddy_random_alloc_free) {
  enum { PAGES = 16384, LIVE = 2000 };
  aipc__buddy b;
  CHECK_EQ(aipc__buddy_init(&b, (uint64_t)PAGES * 4096), 0);
  static unsigned char owner[PAGES]; /* page -> in use */
  static uint64_t off[LIVE], len[LIVE];
  size_t used = 0;
  for (int round = 0; round < 100000; round++) {
    int i = (int)(rnd() % LIVE);
    if (len[i]) {
      for (uint64_t p = off[i] / 4096; p < (off[i] + len[i]) / 4096; p++) owner[p] = 0;
      aipc__buddy_free(&b, off[i], len[i]);
      used -= len[i];
      len[i] = 0;
    } else {
      uint64_t n = (1 + rnd() % (rnd() % 8 == 0 ? 300 : 9)) * 4096;
      uint64_t o;
      if (aipc__buddy_alloc(&b, n, &o) != 0) {
        CHECK(used + n > (uint64_t)PAGES * 4096 / 4); /* only fails when fairly full */
        continue;
      }
      CHECK(o % 4096 == 0 && o + n <= (uint64_t)PAGES * 4096);
      for (uint64_t p = o / 4096; p < (o + n) / 4096; p++) {
        CHECK(!owner[p]); /* no overlap with a live range */
        owner[p] = 1;
      }
      off[i] = o;
      len[i] = n;
      used += n;
    }
  }
  for (int i = 0; i < LIVE; i++)
    if (len[i]) aipc__buddy_free(&b, off[i], len[i]);
  check_single_free_block(&b); /* everything merged back */
  aipc__buddy_destroy(&b);
}

TEST(buddy_fills_exactly_and_tails_come_back) {
  aipc__buddy b;
  CHECK_EQ(aipc__buddy_init(&b, 256 * 4096), 0);
  uint64_t o, offs[256];
  /* A 3-page block takes a 4-page one and gives its last page back: 64 of
   * them fill the arena's aligned runs, and the 64 tails still serve
   * single pages. */
  uint64_t tails[64];
  for (int i = 0; i < 64; i++) CHECK_EQ(aipc__buddy_alloc(&b, 3 * 4096, &offs[i]), 0);
  CHECK_EQ(aipc__buddy_alloc(&b, 3 * 4096, &o), -1);
  CHECK_EQ(aipc__buddy_alloc(&b, 2 * 4096, &o), -1);
  for (int i = 0; i < 64; i++) {
    CHECK_EQ(aipc__buddy_alloc(&b, 4096, &tails[i]), 0);
    CHECK_EQ(tails[i] % (4 * 4096), 3 * 4096);
  }
  CHECK_EQ(aipc__buddy_alloc(&b, 4096, &o), -1);
  for (int i = 0; i < 64; i++) aipc__buddy_free(&b, tails[i], 4096);
  for (int i = 0; i < 64; i++) aipc__buddy_free(&b, offs[i], 3 * 4096);
  check_single_free_block(&b);
  CHECK_EQ(aipc__buddy_alloc(&b, 256 * 4096, &o), 0);
  CHECK_EQ(o, 0);
  CHECK_EQ(aipc__buddy_alloc(&b, 4096, &o), -1);
  CHECK_EQ(aipc__buddy_alloc(&b, 257 * 4096, &o), -1);
  aipc__buddy_free(&b, 0, 256 * 4096);
  for (int i = 0; i < 256; i++) CHECK_EQ(aipc__buddy_alloc(&b, 4096, &offs[i]), 0);
  CHECK_EQ(aipc__buddy_alloc(&b, 4096, &o), -1);
  for (int i = 255; i >= 0; i -= 2) aipc__buddy_free(&b, offs[i], 4096);
  for (int i = 0; i < 256; i += 2) aipc__buddy_free(&b, offs[i], 4096);
  check_single_free_block(&b);
  aipc__buddy_destroy(&b);
}

/* ---- pins --------------------------------------------------------------- */

static void *dev_alloc(size_t n) {
  void *p = NULL;
  CHECK_OK(aipc__emu_malloc(&p, n, ACL_MEM_MALLOC_HUGE_FIRST));
  return p;
}

/* A copy of the block holding p (kind 0: none). */
static aipc__block block_at(const void *p) {
  aipc__block b = {0};
  aipc__mem_lookup(p, &b);
  return b;
}

/* Pins the DEVICE block holding p, as an export does; its handle. */
static aipc__block *pin(const void *p) {
  aipc__mem_pinned pn = {0};
  CHECK_OK(aipc__mem_export_pin("test", p, 1, AIPC_MEM_DEVICE, &pn));
  return pn.block;
}

TEST(pinned_free_defers_release) {
  void *p = dev_alloc(3 * 4096);
  aipc__block s = block_at((char *)p + 5000);
  CHECK(s.base == (uintptr_t)p && s.size == 3 * 4096 && s.kind == AIPC_MEM_DEVICE && s.device == 0);
  aipc__mem_pinned pn = {0};
  CHECK_OK(aipc__mem_export_pin("test", (char *)p + 5000, 3 * 4096 - 5000, AIPC_MEM_DEVICE, &pn));
  CHECK(pn.block && pn.device == 0 && pn.offset == 5000);
  aipc__block *b = pn.block;
  CHECK(pin(p) == b);
  CHECK_OK(aipc__emu_free(p)); /* default mode: succeeds, release deferred */
  CHECK(block_at(p).base == (uintptr_t)p && aipc__mem_pinned_freed(b, NULL));
  CHECK_EQ(aipc__mem_used(0), 3 * 4096); /* still counted */
  /* Gone for the user. */
  char h[16];
  CHECK_MSG(aipc__emu_free(p), ACL_ERROR_RT_INVALID_HANDLE, "already freed");
  CHECK_MSG(aipc__emu_memcpy(h, 16, p, 16, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_INVALID_PARAM, "released");
  CHECK_ACL(aipc__emu_memcpy(p, 16, h, 16, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aipc__emu_memset(p, 16, 0, 16), ACL_ERROR_INVALID_PARAM);
  /* The memory itself stays valid for the exporter's importers. */
  ((char *)p)[0] = 42;
  aipc__mem_unpin(b);
  CHECK(block_at(p).base == (uintptr_t)p);
  aipc__mem_unpin(b); /* the last one releases it */
  CHECK(block_at(p).kind == 0);
  CHECK_EQ(aipc__mem_used(0), 0);
  CHECK_MSG(aipc__emu_free(p), ACL_ERROR_RT_INVALID_HANDLE, "not allocated");
  /* The range is reusable and zeroed (its pages were punched out). */
  void *q = dev_alloc(3 * 4096);
  CHECK(q == p);
  CHECK_EQ(((char *)q)[0], 0);
  CHECK_OK(aipc__emu_free(q));
  CHECK_OK(aipc__emu_finalize());
}

TEST(pin_then_unpin_without_free_keeps_the_block) {
  void *p = dev_alloc(4096);
  aipc__block *b = pin(p);
  aipc__mem_unpin(b);
  CHECK(block_at(p).base == (uintptr_t)p && !block_at(p).user_freed);
  CHECK_OK(aipc__emu_memset(p, 4096, 1, 4096));
  CHECK_OK(aipc__emu_free(p));
  CHECK_EQ(aipc__mem_used(0), 0);
  CHECK_OK(aipc__emu_finalize());
}

TEST(pinned_free_fails_in_strict_mode) {
  setenv("ASCEND_IPC_STRICT", "1", 1);
  void *p = dev_alloc(4096);
  aipc__block *b = pin(p);
  CHECK_MSG(aipc__emu_free(p), ACL_ERROR_RT_INTERNAL_ERROR, "aclrtIpcMemClose");
  CHECK(!aipc__mem_pinned_freed(b, NULL));
  CHECK_OK(aipc__emu_memset(p, 4096, 1, 4096)); /* still the user's */
  aipc__mem_unpin(b);
  CHECK_OK(aipc__emu_free(p));
  CHECK_OK(aipc__emu_finalize());
}

TEST(finalize_with_pinned_and_imported_blocks_leaks_nothing) {
  void *p = dev_alloc(4096), *q = dev_alloc(4096);
  pin(p);
  pin(q);
  CHECK_OK(aipc__emu_free(q));
  void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(aipc__mem_add_import(m, 4096, 1, AIPC_MEM_IMPORT, NULL) != NULL);
  CHECK_OK(aipc__emu_finalize()); /* valgrind checks the bookkeeping went */
  CHECK(block_at(p).kind == 0 && block_at(m).kind == 0);
  munmap(m, 4096);
}

/* ---- imported blocks and the cross-device rule -------------------------- */

/* Maps device dev's block at p a second time, as the IPC layer does for an
 * importer, and registers the mapping as an import (*ib its handle). */
static void *fake_import(void *p, size_t n, int32_t dev, aipc__block **ib) {
  aipc__block b = block_at(p);
  int fd = b.fd;
  uint64_t off = (uintptr_t)p - b.base;
  CHECK(b.kind == AIPC_MEM_DEVICE && fd >= 0);
  void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
  CHECK(m != MAP_FAILED);
  *ib = aipc__mem_add_import(m, n, dev, AIPC_MEM_IMPORT, (void *)0x1);
  b = block_at(m);
  CHECK(*ib && b.kind == AIPC_MEM_IMPORT && b.device == dev && b.ipc == (void *)0x1);
  return m;
}

static void drop_import(void *m, size_t n, aipc__block *ib) {
  aipc__mem_remove_import(ib);
  munmap(m, n);
}

/* Each allocation is a memfd of its own, exactly its size, sealed against
 * shrinking and growing: what IPC shares reaches that allocation only. */
TEST(allocation_memfds) {
  void *p = dev_alloc(3 * 4096), *q = dev_alloc(4096);
  int fp = block_at(p).fd, fq = block_at(q).fd;
  CHECK(fp >= 0 && fq >= 0 && fp != fq);
  struct stat st;
  CHECK(fstat(fp, &st) == 0 && st.st_size == 3 * 4096);
  int seals = fcntl(fp, F_GET_SEALS);
  CHECK(seals >= 0 && (seals & F_SEAL_SHRINK) && (seals & F_SEAL_GROW) && (seals & F_SEAL_SEAL));
  CHECK(ftruncate(fp, 0) != 0 && errno == EPERM);
  CHECK(ftruncate(fp, 1 << 20) != 0 && errno == EPERM);
  /* the memfd is the memory */
  ((char *)p)[4096] = 42;
  char c = 0;
  CHECK(pread(fp, &c, 1, 4096) == 1 && c == 42);
  /* freeing closes it; the range goes back to the reservation (no access) */
  CHECK_OK(aipc__emu_free(p));
  CHECK(fcntl(fp, F_GETFD) < 0 && errno == EBADF);
  CHECK(block_at(p).kind == 0);
  CHECK_OK(aipc__emu_free(q));
  CHECK(fcntl(fq, F_GETFD) < 0);
  CHECK_OK(aipc__emu_finalize());
}

TEST(import_blocks_are_not_freeable) {
  CHECK_OK(aipc__emu_set_device(1));
  void *src = dev_alloc(2 * 4096);
  aipc__block *ib;
  void *imp = fake_import(src, 2 * 4096, 1, &ib);
  CHECK_MSG(aipc__emu_free(imp), ACL_ERROR_RT_INVALID_HANDLE, "released with aclrtIpcMemClose");
  CHECK_MSG(aipc__emu_free((char *)imp + 4096), ACL_ERROR_RT_INVALID_HANDLE, "aclrtIpcMemClose");
  CHECK_MSG(aipc__emu_free_host(imp), ACL_ERROR_INVALID_PARAM, "aclrtIpcMemClose");
  /* Overlapping registrations are refused, as are empty ones. */
  CHECK(aipc__mem_add_import(imp, 4096, 1, AIPC_MEM_IMPORT, NULL) == NULL);
  CHECK(aipc__mem_add_import((char *)imp + 4096, 4096, 1, AIPC_MEM_IMPORT, NULL) == NULL);
  CHECK(aipc__mem_add_import(src, 4096, 1, AIPC_MEM_IMPORT, NULL) == NULL);
  CHECK(aipc__mem_add_import(NULL, 4096, 1, AIPC_MEM_IMPORT, NULL) == NULL);
  CHECK(aipc__mem_add_import((char *)imp + 65536, 0, 1, AIPC_MEM_IMPORT, NULL) == NULL);
  drop_import(imp, 2 * 4096, ib);
  CHECK_OK(aipc__emu_free(src));
  CHECK_OK(aipc__emu_finalize());
}

TEST(cross_device_rule_on_imported_memory) {
  enum { N = 2 * 4096 };
  CHECK_OK(aipc__emu_set_device(1));
  void *exported = dev_alloc(N); /* "the exporter's" block on device 1 */
  aipc__block *ib;
  void *imp = fake_import(exported, N, 1, &ib);
  CHECK_OK(aipc__emu_set_device(0));
  void *local = dev_alloc(N);
  char *h = calloc(1, N);
  aclrtStream s;
  CHECK_OK(aipc__emu_create_stream(&s));

  /* Current device 0, memory imported from device 1. */
  CHECK_MSG(aipc__emu_memcpy(imp, N, h, N, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "imported from device 1");
  CHECK_ACL(aipc__emu_memcpy(imp, N, h, N, ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  CHECK_ACL(aipc__emu_memcpy(h, N, imp, N, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  CHECK_ACL(aipc__emu_memcpy(h, N, imp, N, ACL_MEMCPY_DEFAULT), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  CHECK_ACL(aipc__emu_memcpy(local, N, imp, N, ACL_MEMCPY_DEFAULT), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  CHECK_MSG(aipc__emu_memcpy(local, N, imp, N, ACL_MEMCPY_DEVICE_TO_DEVICE), ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "asynchronous");
  CHECK_ACL(aipc__emu_memcpy(imp, N, local, N, ACL_MEMCPY_DEVICE_TO_DEVICE), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  CHECK_ACL(aipc__emu_memcpy(imp, N, local, N, ACL_MEMCPY_INTER_DEVICE_TO_DEVICE), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  CHECK_ACL(aipc__emu_memcpy(imp, N, local, N, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aipc__emu_memcpy(imp, N, h, N, ACL_MEMCPY_HOST_TO_HOST), ACL_ERROR_INVALID_PARAM);
  /* The same on a stream, except device-to-device. */
  CHECK_ACL(aipc__emu_memcpy_async(imp, N, h, N, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  CHECK_ACL(aipc__emu_memcpy_async(h, N, imp, N, ACL_MEMCPY_DEVICE_TO_HOST, s), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  CHECK_ACL(aipc__emu_memcpy_async(local, N, imp, N, ACL_MEMCPY_DEFAULT, s), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  CHECK_ACL(aipc__emu_memcpy_async(h, N, imp, N, ACL_MEMCPY_DEFAULT, NULL), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  memset(exported, 0x5c, N);
  CHECK_OK(aipc__emu_memcpy_async(local, N, imp, N, ACL_MEMCPY_DEVICE_TO_DEVICE, s));
  CHECK_OK(aipc__emu_synchronize_stream(s));
  CHECK(((unsigned char *)local)[N - 1] == 0x5c);
  CHECK_OK(aipc__emu_memset(local, N, 0x6d, N));
  CHECK_OK(aipc__emu_memcpy_async(imp, N, local, N, ACL_MEMCPY_INTER_DEVICE_TO_DEVICE, s));
  CHECK_OK(aipc__emu_synchronize_stream(s));
  CHECK(((unsigned char *)exported)[0] == 0x6d); /* same bytes, no copy */
  CHECK_OK(aipc__emu_memcpy_async(imp, N, imp, N, ACL_MEMCPY_DEVICE_TO_DEVICE, NULL));
  CHECK_OK(aipc__emu_synchronize_stream(NULL));
  /* Memset has no such limit. */
  CHECK_OK(aipc__emu_memset(imp, N, 0x11, N));
  CHECK(((unsigned char *)exported)[N - 1] == 0x11);
  /* Overruns of an import are caught like any block's. */
  CHECK_ACL(aipc__emu_memset((char *)imp + 1, N, 0, N), ACL_ERROR_INVALID_PARAM);

  /* On the exporter's device (1) every kind works. */
  CHECK_OK(aipc__emu_set_device(1));
  memset(h, 0x22, N);
  CHECK_OK(aipc__emu_memcpy(imp, N, h, N, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_OK(aipc__emu_memcpy(h, N, imp, N, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK_OK(aipc__emu_memcpy(h, N, imp, N, ACL_MEMCPY_DEFAULT));
  CHECK_OK(aipc__emu_memcpy(local, N, imp, N, ACL_MEMCPY_DEVICE_TO_DEVICE));
  CHECK_OK(aipc__emu_memcpy(local, N, imp, N, ACL_MEMCPY_INTER_DEVICE_TO_DEVICE));
  CHECK_OK(aipc__emu_memcpy(exported, N, imp, N, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE));
  CHECK_OK(aipc__emu_memcpy_async(imp, N, h, N, ACL_MEMCPY_HOST_TO_DEVICE, s));
  CHECK_OK(aipc__emu_synchronize_stream(s));
  CHECK(((unsigned char *)local)[7] == 0x22);

  CHECK_OK(aipc__emu_destroy_stream(s));
  drop_import(imp, N, ib);
  CHECK_OK(aipc__emu_free(exported));
  CHECK_OK(aipc__emu_free(local));
  free(h);
  CHECK_OK(aipc__emu_finalize());
}

TEST(import_removed_before_queued_copy_runs) {
  enum { N = 4096 };
  size_t big = 64 << 20;
  CHECK_OK(aipc__emu_set_device(1));
  void *exported = dev_alloc(N);
  aipc__block *ib;
  void *imp = fake_import(exported, N, 1, &ib);
  CHECK_OK(aipc__emu_set_device(0));
  void *a = dev_alloc(big), *b = dev_alloc(big), *local = dev_alloc(N);
  aclrtStream s;
  CHECK_OK(aipc__emu_create_stream(&s));
  CHECK_OK(aipc__emu_memset(a, big, 1, big));
  for (int i = 0; i < 4; i++) CHECK_OK(aipc__emu_memcpy_async(b, big, a, big, ACL_MEMCPY_DEVICE_TO_DEVICE, s));
  CHECK_OK(aipc__emu_memcpy_async(local, N, imp, N, ACL_MEMCPY_DEVICE_TO_DEVICE, s));
  /* The writer waits for the running copy, and the queued one then sees
   * the import gone (the map forgets it, under the lock, before the unmap). */
  aipc__mem_remove_import(ib);
  munmap(imp, N);
  CHECK_MSG(aipc__emu_synchronize_stream(s), ACL_ERROR_INVALID_PARAM, "queued work failed");
  CHECK_OK(aipc__emu_destroy_stream(s));
  CHECK_OK(aipc__emu_free(a));
  CHECK_OK(aipc__emu_free(b));
  CHECK_OK(aipc__emu_free(local));
  CHECK_OK(aipc__emu_free(exported));
  CHECK_OK(aipc__emu_finalize());
}
