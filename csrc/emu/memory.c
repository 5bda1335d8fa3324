/*
 * Device memory, host memory and the block map.
 *
 * Each device has one arena per process: a reservation of address space
 * (PROT_NONE, nothing committed) of next_pow2(2 * capacity) bytes, made at
 * the device's first aclrtMalloc, so device pointers come from one range per
 * device. A buddy allocator (buddy.c) hands out ranges of it, and every
 * aclrtMalloc allocation is a memfd of its own, sealed against shrinking and
 * growing, mapped over its range. The IPC layer shares an allocation by
 * passing that memfd: it reaches that allocation and nothing else. aclrtFree
 * puts the reservation back over the range and closes the memfd, so the
 * pages go back to the OS once no importer maps them, and a new allocation
 * (a new memfd) never shows an old one's bytes.
 *
 * Every block this process knows (device, host, imported) sits in one
 * ordered map keyed by base address, so "which block holds p" is a
 * O(log n) lookup.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "buddy.h"
#include "core/ordmap.h"
#include "os/os.h"
#include "emu_internal.h"

typedef struct mblock {
  aipc__block pub;
  aipc__onode node;
} mblock;

typedef struct arena {
  uint8_t *base; /* NULL until the device's first aclrtMalloc */
  uint64_t vsize;
  aipc__buddy buddy;
} arena;

/* Writer-preferring: long copies hold the lock shared, and a steady stream
 * of them must not starve aclrtFree or an import. Not recursive. */
static pthread_rwlock_t g_lock = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static aipc__omap g_map = AIPC__OMAP_INIT;
/* vmm.c's reservations, by base, so that a copy into one's unmapped part is
 * refused rather than faulting (size in a node of its own). */
typedef struct reserved {
  aipc__onode node;
  size_t size;
} reserved;
static aipc__omap g_reserved = AIPC__OMAP_INIT;
static arena g_arenas[AIPC_MAX_DEVICES];
static uint64_t g_used[AIPC_MAX_DEVICES];

/* Taken only here: every operation other files call takes it itself. */
static void aipc__mem_rdlock(void) { pthread_rwlock_rdlock(&g_lock); }
static void aipc__mem_wrlock(void) { pthread_rwlock_wrlock(&g_lock); }
static void aipc__mem_unlock(void) { pthread_rwlock_unlock(&g_lock); }

static mblock *mb_of(aipc__block *b) { return (mblock *)((char *)b - offsetof(mblock, pub)); }
static mblock *mb_of_node(aipc__onode *n) { return (mblock *)((char *)n - offsetof(mblock, node)); }

static size_t page_round(size_t n) { return (n + AIPC_PAGE_SIZE - 1) & ~(AIPC_PAGE_SIZE - 1); }

/* Block containing p, or NULL. O(log n). Lock held. */
static aipc__block *find_block(const void *p) {
  aipc__onode *n = aipc__omap_floor(&g_map, (uintptr_t)p);
  if (!n) return NULL;
  mblock *mb = mb_of_node(n);
  if ((uintptr_t)p - mb->pub.base >= mb->pub.size) return NULL;
  return &mb->pub;
}

/* The device whose arena address space holds p, or -1. */
static int32_t arena_of(const void *p) {
  uintptr_t a = (uintptr_t)p;
  for (int32_t d = 0; d < AIPC_MAX_DEVICES; d++) {
    const arena *ar = &g_arenas[d];
    if (ar->base && a - (uintptr_t)ar->base < ar->vsize) return d;
  }
  return -1;
}


uint64_t aipc__mem_used(int32_t device) {
  if (device < 0 || device >= AIPC_MAX_DEVICES) return 0;
  aipc__mem_rdlock();
  uint64_t u = g_used[device];
  aipc__mem_unlock();
  return u;
}

bool aipc__mem_lookup(const void *p, aipc__block *out) {
  aipc__mem_rdlock();
  const aipc__block *b = find_block(p);
  if (b) {
    *out = *b;
    out->impl_ = NULL; /* a copy, not a handle */
  }
  aipc__mem_unlock();
  return b != NULL;
}

/* Inserts a new block unless it overlaps a known one. Write lock held. */
static mblock *add_block(uintptr_t base, size_t size, aipc__mem_kind kind, int32_t device) {
  aipc__onode *n = aipc__omap_floor(&g_map, base + size - 1);
  if (n) {
    mblock *o = mb_of_node(n);
    if (o->pub.base + o->pub.size > base) return NULL;
  }
  mblock *mb = calloc(1, sizeof *mb);
  if (!mb) return NULL;
  mb->pub.base = base;
  mb->pub.size = size;
  mb->pub.kind = kind;
  mb->pub.device = device;
  mb->pub.impl_ = mb;
  mb->pub.fd = -1;
  mb->node.key = base;
  if (aipc__omap_insert(&g_map, &mb->node) != 0) {
    free(mb);
    return NULL;
  }
  return mb;
}

/* ---- device arenas ------------------------------------------------------ */

static uint64_t arena_vsize(uint64_t capacity) {
  uint64_t v = AIPC_PAGE_SIZE;
  while (v < 2 * capacity) v <<= 1;
  return v;
}

/* Smallest arena worth having when address space is short. */
#define MIN_ARENA ((uint64_t)64 << 20)

static aclError arena_open(int32_t dev) {
  arena *ar = &g_arenas[dev];
  uint64_t vsize = arena_vsize(aipc__config_get()->memory);
  /* Address space can be short (ulimit -v, valgrind caps a mapping near
   * 32 GiB): halve the reservation until it maps. A smaller arena only
   * means large requests may find no free range. */
  void *base = MAP_FAILED;
  int e = 0;
  for (; vsize >= MIN_ARENA || vsize == arena_vsize(aipc__config_get()->memory); vsize >>= 1) {
    /* On a 2 MiB boundary, where huge-page blocks must sit (the buddy
     * aligns each block to its power of two within the arena). */
    uint8_t *r = mmap(NULL, vsize + AIPC_OS_HUGE_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) {
      e = errno;
      continue;
    }
    uint8_t *a = (uint8_t *)(((uintptr_t)r + AIPC_OS_HUGE_PAGE - 1) & ~(uintptr_t)(AIPC_OS_HUGE_PAGE - 1));
    if (a > r) munmap(r, (size_t)(a - r));
    munmap(a + vsize, (size_t)(r + AIPC_OS_HUGE_PAGE - a));
    base = a;
    break;
  }
  if (base == MAP_FAILED)
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMalloc: cannot reserve address space for device %d: %s",
                      (int)dev, strerror(e));
  if (aipc__buddy_init(&ar->buddy, vsize) != 0) {
    munmap(base, vsize);
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMalloc: out of host memory for bookkeeping");
  }
  ar->base = base;
  ar->vsize = vsize;
  return ACL_SUCCESS;
}

static void arena_close(arena *ar, bool unmap) {
  if (!ar->base) return;
  if (unmap) munmap(ar->base, ar->vsize);
  aipc__buddy_destroy(&ar->buddy);
  *ar = (arena){0};
}

/* Whether an allocation of size bytes under policy asks for huge pages:
 * CANN serves requests of up to 1 MiB from normal pages whatever the
 * policy, and the *_NORMAL_ONLY policies never from huge ones. */
static bool wants_huge(size_t size, aclrtMemMallocPolicy policy) {
  return size > ((size_t)1 << 20) && policy != ACL_MEM_MALLOC_NORMAL_ONLY && policy != ACL_MEM_MALLOC_NORMAL_ONLY_P2P &&
         aipc__config_get()->pages != AIPC_PAGES_AT_TOUCH;
}

/* When the pool last had too few pages: it is asked again a second later,
 * not at every large aclrtMalloc. */
static uint64_t g_huge_refused_ms;
/* Set once the kernel said it cannot make transparent huge pages on request,
 * or pages on request at all (EINVAL): not asked again. */
static bool g_no_thp, g_no_populate;

/* How a new block's pages are made, after it is mapped (block_pages). */
typedef enum { MAKE_AT_TOUCH, MAKE_NOW, MAKE_HUGE_NOW } page_making;

/* A new sealed memfd for an allocation of size bytes on dev, or a recorded
 * error. In the hugetlb pool when ASCEND_IPC_HUGE_PAGES=1 and the policy
 * asks for huge pages and the pool has them; else, by default, seeded for
 * transparent huge pages (huge policy) or normal pages, made once mapped
 * where the host can spare them (*make); else normal pages, made at first
 * touch. HUGE_ONLY too takes normal pages where no huge ones are to be had,
 * so that a program runs on any host. *len: its size (page- or
 * huge-page-rounded). Made before the memory lock is taken: copies wait on
 * none of it. */
static aclError block_memfd(int32_t dev, size_t size, aclrtMemMallocPolicy policy, int *fd_out, size_t *len,
                            page_making *make) {
  char name[32];
  snprintf(name, sizeof name, "ascend_ipc_dev%d", (int)dev);
  int mode = aipc__config_get()->pages;
  bool huge = wants_huge(size, policy);
  size_t huge_len = (size + AIPC_OS_HUGE_PAGE - 1) & ~(size_t)(AIPC_OS_HUGE_PAGE - 1);
  *make = MAKE_AT_TOUCH;
  if (huge && mode == AIPC_PAGES_POOL) {
    uint64_t now = aipc__os_now_ms_coarse(), refused = __atomic_load_n(&g_huge_refused_ms, __ATOMIC_RELAXED);
    if (refused == 0 || now - refused >= 1000) {
      int fd = aipc__os_memfd_sealed_huge(name, huge_len);
      if (fd >= 0) {
        *fd_out = fd;
        *len = huge_len;
        return ACL_SUCCESS;
      }
      __atomic_store_n(&g_huge_refused_ms, now ? now : 1, __ATOMIC_RELAXED);
    }
  }
  *len = page_round(size);
  if (mode != AIPC_PAGES_AT_TOUCH && !__atomic_load_n(&g_no_populate, __ATOMIC_RELAXED)) {
    huge = huge && !__atomic_load_n(&g_no_thp, __ATOMIC_RELAXED);
    if (aipc__os_memory_to_spare(huge ? huge_len : *len)) {
      *make = huge ? MAKE_HUGE_NOW : MAKE_NOW;
      if (huge) *len = huge_len; /* its pages' size, as an NPU rounds a huge-page block */
    }
  }
  int fd = aipc__os_memfd_sealed(name, *len);
  if (fd < 0 && errno == EMFILE && aipc__os_raise_fd_limit()) fd = aipc__os_memfd_sealed(name, *len);
  if (fd < 0) {
    int e = errno;
    char limit[320];
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMalloc: cannot create the memory of an allocation on device %d: %s",
                      (int)dev, aipc__os_memfd_error_text(e, limit, sizeof limit));
  }
  if (*make == MAKE_HUGE_NOW && aipc__os_memfd_seed_huge(fd, *len) != 0) *make = MAKE_NOW;
  *fd_out = fd;
  return ACL_SUCCESS;
}

/* Makes a new block's pages now, as block_memfd chose, once it is mapped at
 * p (a huge-page block on a 2 MiB boundary: the buddy aligns a block to its
 * power of two). Under the read lock, with the block looked up again: a
 * thread that guessed the pointer may have freed it since the write lock
 * was let go, and then nothing is done. Contents are kept either way, so at
 * worst a block allocated over the same range gets its pages made early. */
static void block_pages(void *p, size_t len, page_making make) {
  if (make == MAKE_AT_TOUCH) return;
  aipc__mem_rdlock();
  const aipc__block *b = find_block(p);
  if (b && b->base == (uintptr_t)p && b->size == len && b->kind == AIPC_MEM_DEVICE) {
    if (make == MAKE_HUGE_NOW && aipc__os_pages_make_huge(p, len) != 0) {
      if (errno == EINVAL) __atomic_store_n(&g_no_thp, true, __ATOMIC_RELAXED);
      make = MAKE_NOW; /* no 2 MiB page free for some of it: the rest in normal pages */
    }
    if (make == MAKE_NOW && aipc__os_pages_make(p, len) != 0 && errno == EINVAL)
      __atomic_store_n(&g_no_populate, true, __ATOMIC_RELAXED);
  }
  aipc__mem_unlock();
}

/* Maps fd over [p, p + len) of a reservation, or a recorded error. */
static aclError block_map(int fd, void *p, size_t len, int32_t dev) {
  if (mmap(p, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) != MAP_FAILED) return ACL_SUCCESS;
  return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMalloc: cannot map %zu bytes on device %d: %s", len,
                    (int)dev, strerror(errno));
}

/* Puts the reservation back over a block's range: its pages are no longer
 * reachable here (an importer's mapping keeps them alive until it closes). */
static void block_unmap(void *p, size_t len) {
  if (mmap(p, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
    munmap(p, len); /* a hole in the reservation is still better than the old pages */
}

/* Gives a DEVICE block back: its memory, its range to the buddy, its bytes to
 * the capacity. Write lock held. */
static void release_device_block(mblock *mb) {
  arena *ar = &g_arenas[mb->pub.device];
  aipc__omap_remove(&g_map, &mb->node);
  block_unmap((void *)mb->pub.base, mb->pub.size);
  close(mb->pub.fd);
  aipc__buddy_free(&ar->buddy, mb->pub.base - (uintptr_t)ar->base, mb->pub.size);
  g_used[mb->pub.device] -= mb->pub.size;
  free(mb);
}

aclError aipc__emu_malloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
  if (!devPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc: devPtr is NULL");
  if (size == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc: size is 0");
  if ((unsigned)policy > ACL_MEM_MALLOC_NORMAL_ONLY_P2P)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc: policy %d is not an aclrtMemMallocPolicy (0..5)", (int)policy);
  int32_t dev = aipc__device_current();
  uint64_t cap = aipc__config_get()->memory;
  aclError rc = ACL_SUCCESS;
  int fd = -1;
  size_t len = page_round(size);
  page_making make = MAKE_AT_TOUCH;
  if (size <= cap && (rc = block_memfd(dev, size, policy, &fd, &len, &make)) != ACL_SUCCESS) return rc;
  aipc__mem_wrlock();
  uint64_t used = g_used[dev];
  if (size > cap || len > cap - used) {
    rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION,
                    "aclrtMalloc: out of memory on device %d: requested %zu bytes, %" PRIu64 " of %" PRIu64
                    " bytes in use (ASCEND_IPC_EMU_MEMORY sets the capacity)",
                    (int)dev, size, used, cap);
    goto out;
  }
  arena *ar = &g_arenas[dev];
  if (!ar->base && (rc = arena_open(dev)) != ACL_SUCCESS) goto out;
  uint64_t off;
  if (aipc__buddy_alloc(&ar->buddy, len, &off) != 0) {
    rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION,
                    "aclrtMalloc: device %d has no free range of %zu bytes (%" PRIu64 " of %" PRIu64
                    " bytes in use; the arena reserves %" PRIu64 " bytes of address space)",
                    (int)dev, len, used, cap, ar->vsize);
    goto out;
  }
  if ((rc = block_map(fd, ar->base + off, len, dev)) != ACL_SUCCESS) {
    aipc__buddy_free(&ar->buddy, off, len);
    goto out;
  }
  mblock *mb = add_block((uintptr_t)ar->base + off, len, AIPC_MEM_DEVICE, dev);
  if (!mb) {
    block_unmap(ar->base + off, len);
    aipc__buddy_free(&ar->buddy, off, len);
    rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMalloc: out of host memory for bookkeeping");
    goto out;
  }
  mb->pub.fd = fd;
  fd = -1; /* the block's now */
  g_used[dev] += len;
  *devPtr = (void *)mb->pub.base;
out:
  aipc__mem_unlock();
  if (fd >= 0) close(fd);
  if (rc == ACL_SUCCESS) block_pages(*devPtr, len, make);
  return rc;
}

static const char sync_text[] =
    "the runtime's state page of an event or notify, not memory (events and notifies are released with "
    "aclrtDestroyEvent / aclrtDestroyNotify)";

static const char mapped_text[] =
    "virtual memory mapped with aclrtMapMem; release it with aclrtUnmapMem, aclrtFreePhysical and "
    "aclrtReleaseMemAddress";

/* Why p is not something aclrtFree/aclrtFreeHost accepts. Lock held. */
static aclError explain_unknown(aclError code, const char *call, const void *p) {
  int32_t d = arena_of(p);
  if (d >= 0)
    return aipc__fail(code,
                      "%s: %p lies in device %d memory that is not allocated (already freed?)", call, p, (int)d);
  return aipc__fail(code, "%s: %p was not allocated by %s in this process", call, p,
                    strcmp(call, AIPC_CALL_NAME(free)) == 0 ? AIPC_CALL_NAME(malloc) : AIPC_CALL_NAME(malloc_host));
}

/*
 * CANN's aclrtFree checks only devPtr != NULL itself (ACL_ERROR_INVALID_PARAM)
 * and hands every other pointer to the driver (rtFree -> ApiImpl::DevFree ->
 * NpuDriver::DevMemFree -> halMemFree, src/runtime/driver/npu_driver_mem.cc).
 * A pointer the driver holds no allocation for (src/cmodel_driver/driver_mem.c,
 * drvFreeDeviceHBM: "memory block is not found") is DRV_ERROR_INVALID_HANDLE,
 * which errcode_manage.cc turns into ACL_ERROR_RT_INVALID_HANDLE (107017). So
 * every refusal below but the strict-mode one answers that code: an imported
 * pointer before or after aclrtIpcMemClose, host memory, an interior pointer, a
 * double free, a pointer never allocated.
 */
aclError aipc__emu_free(void *devPtr) {
  const char *call = AIPC_CALL_NAME(free);
  const aclError bad = ACL_ERROR_RT_INVALID_HANDLE;
  if (!devPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: devPtr is NULL", call);
  aclError rc = ACL_SUCCESS;
  aipc__mem_wrlock();
  aipc__block *b = find_block(devPtr);
  if (!b) {
    rc = explain_unknown(bad, call, devPtr);
  } else if (b->kind == AIPC_MEM_HOST) {
    rc = aipc__fail(bad,
                    "%s: %p is host memory from aclrtMallocHost; release it with aclrtFreeHost", call, devPtr);
  } else if (b->kind == AIPC_MEM_IMPORT) {
    rc = aipc__fail(bad,
                    "%s: %p is IPC-imported memory; imported memory is released with aclrtIpcMemClose", call, devPtr);
  } else if (b->kind == AIPC_MEM_SYNC || b->kind == AIPC_MEM_SYNC_IMPORT) {
    rc = aipc__fail(bad, "%s: %p is %s", call, devPtr, sync_text);
  } else if (b->kind == AIPC_MEM_MAPPED) {
    rc = aipc__fail(bad, "%s: %p is %s", call, devPtr, mapped_text);
  } else if (b->user_freed) {
    rc = aipc__fail(bad, "%s: %p was already freed (double free)", call, devPtr);
  } else if (b->base != (uintptr_t)devPtr) {
    rc = aipc__fail(bad,
                    "%s: %p points %zu bytes into the allocation at %p; pass the address aclrtMalloc returned", call,
                    devPtr, (size_t)((uintptr_t)devPtr - b->base), (void *)b->base);
  } else if (b->pins > 0) {
    if (aipc__config_get()->strict)
      rc = aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR,
                      "%s: %p: memory is still exported; close its IPC keys (aclrtIpcMemClose) before aclrtFree "
                      "(ASCEND_IPC_STRICT=1)",
                      call, devPtr);
    else
      b->user_freed = true; /* the last unpin releases it */
  } else {
    release_device_block(mb_of(b));
  }
  aipc__mem_unlock();
  return rc;
}

/* ---- state pages of events and notifies ---------------------------------- */

/* Write lock held. */
static void release_sync_block(mblock *mb) {
  aipc__omap_remove(&g_map, &mb->node);
  munmap((void *)mb->pub.base, mb->pub.size);
  close(mb->pub.fd);
  free(mb);
}

aclError aipc__mem_sync_alloc(const char *call, int32_t device, void **base) {
  char name[40];
  snprintf(name, sizeof name, "ascend_ipc_sync_dev%d", (int)device);
  int fd = aipc__os_memfd_sealed(name, AIPC_PAGE_SIZE);
  if (fd < 0 && errno == EMFILE && aipc__os_raise_fd_limit()) fd = aipc__os_memfd_sealed(name, AIPC_PAGE_SIZE);
  if (fd < 0) {
    int e = errno;
    char limit[320];
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: cannot create the shared state: %s", call,
                      aipc__os_memfd_error_text(e, limit, sizeof limit));
  }
  void *p = aipc__os_map_shared(fd, AIPC_PAGE_SIZE);
  if (!p) {
    int e = errno;
    close(fd);
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: cannot map the shared state: %s", call, strerror(e));
  }
  aipc__mem_wrlock();
  mblock *mb = add_block((uintptr_t)p, AIPC_PAGE_SIZE, AIPC_MEM_SYNC, device);
  if (mb) mb->pub.fd = fd;
  aipc__mem_unlock();
  if (!mb) {
    munmap(p, AIPC_PAGE_SIZE);
    close(fd);
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory for bookkeeping", call);
  }
  *base = p;
  return ACL_SUCCESS;
}

void aipc__mem_sync_free(void *base) {
  aipc__mem_wrlock();
  aipc__block *b = find_block(base);
  if (b && b->kind == AIPC_MEM_SYNC && !b->user_freed) {
    if (b->pins > 0)
      b->user_freed = true; /* the last unpin releases it */
    else
      release_sync_block(mb_of(b));
  }
  aipc__mem_unlock();
}

/* ---- exports: pins ------------------------------------------------------- */

/* What a block is, in the words of an export refused. */
static const char *export_kind_text(aipc__mem_kind kind) {
  switch (kind) {
    case AIPC_MEM_HOST: return "host memory from aclrtMallocHost";
    case AIPC_MEM_IMPORT: return "imported IPC memory (only the owner of memory can export it)";
    case AIPC_MEM_SYNC: return "the state of an event or notify";
    case AIPC_MEM_SYNC_IMPORT: return "the state of an imported event or notify";
    case AIPC_MEM_MAPPED:
      return "virtual memory mapped with aclrtMapMem (share its physical allocation with "
             "aclrtMemExportToShareableHandle instead)";
    default: return "device memory";
  }
}

aclError aipc__mem_export_pin(const char *call, const void *devPtr, size_t size, aipc__mem_kind kind,
                              aipc__mem_pinned *out) {
  aclError rc = ACL_SUCCESS;
  aipc__mem_wrlock();
  aipc__block *b = find_block(devPtr);
  if (!b) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: devPtr %p is not inside a live aclrtMalloc allocation of this process",
                    call, devPtr);
  } else if (b->kind != kind) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: devPtr %p is %s, not device memory from aclrtMalloc", call, devPtr,
                    export_kind_text(b->kind));
  } else if (b->user_freed) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: devPtr %p belongs to an allocation already freed with aclrtFree",
                    call, devPtr);
  } else if (size > b->size - ((uintptr_t)devPtr - b->base)) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM,
                    "%s: [devPtr, devPtr + %zu) overruns its allocation (%zu bytes at %p, devPtr %p)", call, size, b->size,
                    (void *)b->base, devPtr);
  } else {
    b->pins++;
    *out = (aipc__mem_pinned){b, b->device, (uint64_t)((uintptr_t)devPtr - b->base)};
  }
  aipc__mem_unlock();
  return rc;
}

void aipc__mem_unpin(aipc__block *b) {
  aipc__mem_wrlock();
  if (b->pins > 0) b->pins--;
  if (b->pins == 0 && b->user_freed) (b->kind == AIPC_MEM_SYNC ? release_sync_block : release_device_block)(mb_of(b));
  aipc__mem_unlock();
}

bool aipc__mem_pinned_freed(const aipc__block *b, int *memfd) {
  aipc__mem_rdlock();
  bool freed = b->user_freed;
  if (memfd) *memfd = b->fd;
  aipc__mem_unlock();
  return freed;
}

/* ---- blocks and reservations other parts own ----------------------------- */

/* Whether any known block overlaps [base, base+size). Lock held. */
static bool overlaps_block(uintptr_t base, size_t size) {
  aipc__onode *n = aipc__omap_floor(&g_map, base + size - 1);
  if (!n) return false;
  mblock *o = mb_of_node(n);
  return o->pub.base + o->pub.size > base;
}

/* Write lock held. */
static aipc__block *add_owned(void *base, size_t size, int32_t device, aipc__mem_kind kind, void *ipc) {
  if (!base || size == 0) return NULL;
  mblock *mb = add_block((uintptr_t)base, size, kind, device);
  if (!mb) return NULL;
  mb->pub.ipc = ipc;
  return &mb->pub;
}

aipc__block *aipc__mem_add_import(void *base, size_t size, int32_t device, aipc__mem_kind kind, void *ipc) {
  aipc__mem_wrlock();
  aipc__block *b = add_owned(base, size, device, kind, ipc);
  aipc__mem_unlock();
  return b;
}

void aipc__mem_remove_import(aipc__block *b) {
  if (!b) return;
  mblock *mb = mb_of(b);
  aipc__mem_wrlock();
  aipc__omap_remove(&g_map, &mb->node);
  aipc__mem_unlock();
  free(mb);
}

int aipc__mem_add_mapping(void *base, size_t size, int fd, bool access, int32_t device, void *owner,
                          aipc__block **out) {
  int err = 0;
  aipc__mem_wrlock();
  if (overlaps_block((uintptr_t)base, size)) {
    err = -1;
  } else if (mmap(base, size, access ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0) ==
             MAP_FAILED) {
    err = errno;
    /* A failed MAP_FIXED may have unmapped the range: the reservation takes it back. */
    mmap(base, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  } else if (!(*out = add_owned(base, size, device, AIPC_MEM_MAPPED, owner))) {
    err = ENOMEM;
    mmap(base, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  } else {
    (*out)->no_access = !access;
  }
  aipc__mem_unlock();
  return err;
}

void aipc__mem_remove_mapping(aipc__block *b) {
  mblock *mb = mb_of(b);
  aipc__mem_wrlock(); /* no copy runs on it meanwhile */
  aipc__omap_remove(&g_map, &mb->node);
  block_unmap((void *)b->base, b->size);
  aipc__mem_unlock();
  free(mb);
}

int aipc__mem_open_mapping(aipc__block *b) {
  int err = 0;
  aipc__mem_wrlock();
  if (b->no_access) {
    if (mprotect((void *)b->base, b->size, PROT_READ | PROT_WRITE) == 0)
      b->no_access = false;
    else
      err = errno;
  }
  aipc__mem_unlock();
  return err;
}

bool aipc__mem_add_reserved(uintptr_t base, size_t size) {
  reserved *r = calloc(1, sizeof *r);
  if (!r) return false;
  r->node.key = base;
  r->size = size;
  aipc__mem_wrlock();
  bool ok = aipc__omap_insert(&g_reserved, &r->node) == 0;
  aipc__mem_unlock();
  if (!ok) free(r);
  return ok;
}

void aipc__mem_remove_reserved(uintptr_t base) {
  aipc__mem_wrlock();
  aipc__onode *n = aipc__omap_get(&g_reserved, base);
  if (n) aipc__omap_remove(&g_reserved, n);
  aipc__mem_unlock();
  if (n) free((reserved *)((char *)n - offsetof(reserved, node)));
}

/* The reservation holding a, or NULL. Lock held. */
static const reserved *reserved_at(uintptr_t a) {
  aipc__onode *n = aipc__omap_floor(&g_reserved, a);
  const reserved *r = n ? (const reserved *)((const char *)n - offsetof(reserved, node)) : NULL;
  return r && a - r->node.key < r->size ? r : NULL;
}

bool aipc__mem_charge(int32_t device, uint64_t len) {
  uint64_t cap = aipc__config_get()->memory;
  aipc__mem_wrlock();
  bool ok = device >= 0 && device < AIPC_MAX_DEVICES && len <= cap - g_used[device];
  if (ok) g_used[device] += len;
  aipc__mem_unlock();
  return ok;
}

void aipc__mem_uncharge(int32_t device, uint64_t len) {
  aipc__mem_wrlock();
  if (device >= 0 && device < AIPC_MAX_DEVICES) g_used[device] -= len < g_used[device] ? len : g_used[device];
  aipc__mem_unlock();
}

/* Capacity left on the calling thread's current device. */
aclError aipc__emu_get_mem_info(aclrtMemAttr attr, size_t *free, size_t *total) {
  if ((unsigned)attr > ACL_HBM_MEM_P2P_NORMAL)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "aclrtGetMemInfo: attr %d is not an aclrtMemAttr (0..9)", (int)attr);
  if (!free) return aipc__fail(ACL_ERROR_INVALID_PARAM, "aclrtGetMemInfo: free is NULL");
  if (!total) return aipc__fail(ACL_ERROR_INVALID_PARAM, "aclrtGetMemInfo: total is NULL");
  uint64_t cap = aipc__config_get()->memory;
  uint64_t used = aipc__mem_used(aipc__device_current());
  *free = (size_t)(cap - used);
  *total = (size_t)cap;
  return ACL_SUCCESS;
}

/* ---- host memory -------------------------------------------------------- */

aclError aipc__emu_malloc_host(void **hostPtr, size_t size) {
  if (!hostPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "aclrtMallocHost: hostPtr is NULL");
  if (size == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "aclrtMallocHost: size is 0");
  if (size > SIZE_MAX - AIPC_PAGE_SIZE)
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMallocHost: cannot allocate %zu bytes", size);
  size_t len = page_round(size);
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMallocHost: cannot allocate %zu bytes: %s", size,
                      strerror(errno));
  aipc__mem_wrlock();
  mblock *mb = add_block((uintptr_t)p, len, AIPC_MEM_HOST, -1);
  aipc__mem_unlock();
  if (!mb) {
    munmap(p, len);
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMallocHost: out of host memory for bookkeeping");
  }
  *hostPtr = p;
  return ACL_SUCCESS;
}

aclError aipc__emu_free_host(void *hostPtr) {
  const char *call = AIPC_CALL_NAME(free_host);
  if (!hostPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: hostPtr is NULL", call);
  aclError rc = ACL_SUCCESS;
  void *unmap = NULL;
  size_t len = 0;
  aipc__mem_wrlock();
  aipc__block *b = find_block(hostPtr);
  if (!b) {
    rc = explain_unknown(ACL_ERROR_INVALID_PARAM, call, hostPtr);
  } else if (b->kind == AIPC_MEM_SYNC || b->kind == AIPC_MEM_SYNC_IMPORT) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %p is %s", call, hostPtr, sync_text);
  } else if (b->kind == AIPC_MEM_MAPPED) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %p is %s", call, hostPtr, mapped_text);
  } else if (b->kind != AIPC_MEM_HOST) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %p is %s memory; release it with %s", call, hostPtr,
                    b->kind == AIPC_MEM_DEVICE ? "device" : "IPC-imported",
                    b->kind == AIPC_MEM_DEVICE ? AIPC_CALL_NAME(free) : AIPC_CALL_NAME(ipc_close));
  } else if (b->base != (uintptr_t)hostPtr) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM,
                    "%s: %p points %zu bytes into the allocation at %p; pass the address aclrtMallocHost returned",
                    call, hostPtr, (size_t)((uintptr_t)hostPtr - b->base), (void *)b->base);
  } else {
    mblock *mb = mb_of(b);
    unmap = (void *)b->base;
    len = b->size;
    aipc__omap_remove(&g_map, &mb->node);
    free(mb);
  }
  aipc__mem_unlock();
  /* Outside the lock: the range is no longer reachable through the map. */
  if (unmap) munmap(unmap, len);
  return rc;
}

/* ---- copies ------------------------------------------------------------- */

const char *aipc__memcpy_kind_name(int kind) {
  static const char *const names[] = {
      "ACL_MEMCPY_HOST_TO_HOST",         "ACL_MEMCPY_HOST_TO_DEVICE",        "ACL_MEMCPY_DEVICE_TO_HOST",
      "ACL_MEMCPY_DEVICE_TO_DEVICE",     "ACL_MEMCPY_DEFAULT",               "ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE",
      "ACL_MEMCPY_INNER_DEVICE_TO_DEVICE", "ACL_MEMCPY_INTER_DEVICE_TO_DEVICE",
  };
  return kind >= 0 && kind < 8 ? names[kind] : "unknown kind";
}

typedef struct operand {
  bool device;   /* device memory (local or imported) */
  bool imported; /* an IPC mapping */
  int32_t dev;   /* device it belongs to, when device */
  bool acl_host; /* host memory of the runtime's (aclrtMallocHost), not memory it never saw */
} operand;

/* Finds what [p, p+count) is. The range must lie inside one block; a range
 * outside every block is host memory the runtime does not manage. */
static aclError classify(const char *call, const char *role, const void *p, size_t count, operand *o) {
  uintptr_t a = (uintptr_t)p;
  if (count > UINTPTR_MAX - a)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s %p + %zu bytes wraps around the address space", call, role, p, count);
  aipc__block *b = find_block(p);
  if (!b) {
    int32_t d = arena_of(p);
    if (d >= 0)
      return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s %p lies in device %d memory that is not allocated (freed?)", call,
                        role, p, (int)d);
    const reserved *r = reserved_at(a);
    if (r)
      return aipc__fail(ACL_ERROR_INVALID_PARAM,
                        "%s: %s %p lies in the reservation at %p where nothing is mapped (aclrtMapMem)", call, role, p,
                        (void *)r->node.key);
    aipc__onode *n = aipc__omap_next(&g_map, a);
    if (n && n->key < a + count)
      return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s range [%p, +%zu) runs into the allocation at %p", call, role, p,
                        count, (void *)n->key);
    n = aipc__omap_next(&g_reserved, a);
    if (n && n->key < a + count)
      return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s range [%p, +%zu) runs into the reservation at %p", call, role,
                        p, count, (void *)n->key);
    *o = (operand){false, false, -1, false};
    return ACL_SUCCESS;
  }
  if (b->kind == AIPC_MEM_SYNC || b->kind == AIPC_MEM_SYNC_IMPORT)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s %p is %s", call, role, p, sync_text);
  if (b->kind == AIPC_MEM_MAPPED && b->no_access)
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      "%s: %s %p lies in a mapping made with aclrtMemMapNoAccess that has no access yet: call "
                      "aclrtMemSetAccess first",
                      call, role, p);
  if (b->kind == AIPC_MEM_DEVICE && b->user_freed)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s %p belongs to an allocation already released with aclrtFree", call,
                      role, p);
  /* Mappings side by side in a reservation are one range of device memory
   * (how an expandable segment grows): a copy may run across them. */
  const aipc__block *last = b;
  const reserved *home = b->kind == AIPC_MEM_MAPPED ? reserved_at(b->base) : NULL;
  while (last->kind == AIPC_MEM_MAPPED && count > last->base + last->size - a) {
    aipc__block *next = find_block((void *)(last->base + last->size));
    if (!next || next->kind != AIPC_MEM_MAPPED || next->device != b->device || reserved_at(next->base) != home) break;
    if (next->no_access)
      return aipc__fail(ACL_ERROR_INVALID_PARAM,
                        "%s: %s range [%p, +%zu) runs into a mapping made with aclrtMemMapNoAccess that has no access "
                        "yet: call aclrtMemSetAccess first",
                        call, role, p, count);
    last = next;
  }
  if (count > last->base + last->size - a)
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      "%s: %s range [%p, +%zu) overruns its allocation [%p, +%zu) by %zu bytes", call, role, p, count,
                      (void *)b->base, (size_t)(last->base + last->size - b->base),
                      (size_t)(a + count - (last->base + last->size)));
  if (b->kind == AIPC_MEM_HOST)
    *o = (operand){false, false, -1, true};
  else
    *o = (operand){true, b->kind == AIPC_MEM_IMPORT, b->device, false};
  return ACL_SUCCESS;
}

static aclError want_class(const char *call, aclrtMemcpyKind kind, const char *role, const void *p, const operand *o,
                           bool device) {
  if (o->device == device) return ACL_SUCCESS;
  if (device)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s: %s %p is host memory, not device memory", call,
                      aipc__memcpy_kind_name(kind), role, p);
  return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s: %s %p is device memory (device %d), not host memory", call,
                    aipc__memcpy_kind_name(kind), role, p, (int)o->dev);
}

/* Cross-device rule of CANN IPC: memory imported from another device is
 * reachable only by asynchronous device-to-device copies. */
static aclError cross_device_rule(const char *call, aclrtMemcpyKind kind, const void *dst, const operand *od,
                                  const void *src, const operand *os, int32_t cur_dev, bool async) {
  const char *role = NULL;
  const void *p = NULL;
  const operand *o = NULL;
  if (os->imported && os->dev != cur_dev) {
    role = "src", p = src, o = os;
  } else if (od->imported && od->dev != cur_dev) {
    role = "dst", p = dst, o = od;
  }
  if (!o) return ACL_SUCCESS;
  bool d2d = kind == ACL_MEMCPY_DEVICE_TO_DEVICE || kind == ACL_MEMCPY_INNER_DEVICE_TO_DEVICE ||
             kind == ACL_MEMCPY_INTER_DEVICE_TO_DEVICE;
  if (d2d && async) return ACL_SUCCESS;
  return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                    "%s: %s: %s %p is IPC memory imported from device %d but the current device is %d; CANN allows "
                    "only asynchronous device-to-device copies (aclrtMemcpyAsync with ACL_MEMCPY_DEVICE_TO_DEVICE) on "
                    "memory imported from another device: no ACL_MEMCPY_DEFAULT, no host<->device, no synchronous "
                    "copy",
                    call, aipc__memcpy_kind_name(kind), role, p, (int)o->dev, (int)cur_dev);
}

/* Lock held. The rules of kind for operands classify() has found. */
static aclError kind_check(const char *call, void *dst, const operand *od, const void *src, const operand *os,
                           aclrtMemcpyKind kind, int32_t cur_dev, bool async) {
  aclError rc;
  switch (kind) {
    case ACL_MEMCPY_HOST_TO_HOST:
      if ((rc = want_class(call, kind, "src", src, os, false))) return rc;
      if ((rc = want_class(call, kind, "dst", dst, od, false))) return rc;
      break;
    case ACL_MEMCPY_HOST_TO_DEVICE:
    case ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE:
      if ((rc = want_class(call, kind, "src", src, os, false))) return rc;
      if ((rc = want_class(call, kind, "dst", dst, od, true))) return rc;
      break;
    case ACL_MEMCPY_DEVICE_TO_HOST:
      if ((rc = want_class(call, kind, "src", src, os, true))) return rc;
      if ((rc = want_class(call, kind, "dst", dst, od, false))) return rc;
      break;
    case ACL_MEMCPY_DEVICE_TO_DEVICE:
    case ACL_MEMCPY_INNER_DEVICE_TO_DEVICE:
    case ACL_MEMCPY_INTER_DEVICE_TO_DEVICE:
      if ((rc = want_class(call, kind, "src", src, os, true))) return rc;
      if ((rc = want_class(call, kind, "dst", dst, od, true))) return rc;
      if (kind == ACL_MEMCPY_INNER_DEVICE_TO_DEVICE && os->dev != od->dev)
        return aipc__fail(ACL_ERROR_INVALID_PARAM,
                          "%s: ACL_MEMCPY_INNER_DEVICE_TO_DEVICE: src is on device %d and dst on device %d; use "
                          "ACL_MEMCPY_INTER_DEVICE_TO_DEVICE",
                          call, (int)os->dev, (int)od->dev);
      if (kind == ACL_MEMCPY_INTER_DEVICE_TO_DEVICE && os->dev == od->dev)
        return aipc__fail(ACL_ERROR_INVALID_PARAM,
                          "%s: ACL_MEMCPY_INTER_DEVICE_TO_DEVICE: src and dst are both on device %d; use "
                          "ACL_MEMCPY_INNER_DEVICE_TO_DEVICE",
                          call, (int)os->dev);
      break;
    case ACL_MEMCPY_DEFAULT:
      break;
    default:
      return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: kind %d is not an aclrtMemcpyKind (0..7)", call, (int)kind);
  }
  return cross_device_rule(call, kind, dst, od, src, os, cur_dev, async);
}

/* Lock held (shared or exclusive). */
static aclError copy_check(const char *call, void *dst, size_t destMax, const void *src, size_t count,
                           aclrtMemcpyKind kind, int32_t cur_dev, bool async) {
  operand od, os;
  aclError rc;
  if ((rc = classify(call, "dst", dst, count, &od)) != ACL_SUCCESS) return rc;
  if ((rc = classify(call, "src", src, count, &os)) != ACL_SUCCESS) return rc;
  (void)destMax;
  return kind_check(call, dst, &od, src, &os, kind, cur_dev, async);
}

aclError aipc__emu_memcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind) {
  const char *call = AIPC_CALL_NAME(memcpy);
  if (!dst) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: dst is NULL", call);
  if (!src) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: src is NULL", call);
  if ((unsigned)kind > ACL_MEMCPY_INTER_DEVICE_TO_DEVICE)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: kind %d is not an aclrtMemcpyKind (0..7)", call, (int)kind);
  if (count > destMax)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: count %zu is larger than destMax %zu", call, count, destMax);
  if (count == 0) return ACL_SUCCESS;
  return aipc__mem_copy(call, dst, destMax, src, count, kind, aipc__device_current(), false);
}

aclError aipc__mem_copy_check(const char *call, void *dst, size_t destMax, const void *src, size_t count,
                              aclrtMemcpyKind kind, int32_t cur_dev, bool async) {
  aipc__mem_rdlock();
  aclError rc = copy_check(call, dst, destMax, src, count, kind, cur_dev, async);
  aipc__mem_unlock();
  return rc;
}

aclError aipc__mem_copy(const char *call, void *dst, size_t destMax, const void *src, size_t count,
                        aclrtMemcpyKind kind, int32_t cur_dev, bool async) {
  /* Shared lock across the copy: no free or close can unmap under it. */
  aipc__mem_rdlock();
  aclError rc = copy_check(call, dst, destMax, src, count, kind, cur_dev, async);
  if (rc == ACL_SUCCESS) memmove(dst, src, count);
  aipc__mem_unlock();
  return rc;
}

/* The most copies one aclrtMemcpyBatch takes: CANN's driver limit
 * (DEVMM_MEMCPY_BATCH_MAX_COUNT). */
#define BATCH_MAX 4096u

static const char *location_name(aclrtMemLocationType t) {
  switch (t) {
    case ACL_MEM_LOCATION_TYPE_HOST: return "ACL_MEM_LOCATION_TYPE_HOST";
    case ACL_MEM_LOCATION_TYPE_DEVICE: return "ACL_MEM_LOCATION_TYPE_DEVICE";
    case ACL_MEM_LOCATION_TYPE_UNREGISTERED: return "ACL_MEM_LOCATION_TYPE_UNREGISTERED";
    case ACL_MEM_LOCATION_TYPE_MANAGED: return "ACL_MEM_LOCATION_TYPE_MANAGED";
    case ACL_MEM_LOCATION_TYPE_HOST_NUMA: return "ACL_MEM_LOCATION_TYPE_HOST_NUMA";
  }
  return "an unknown location type";
}

/* Lock held. Does attr's location say what o is (host memory of any kind is
 * HOST; a NUMA node of the host counts as HOST, as in CANN's runtime)? */
static aclError batch_location(const char *call, size_t i, const char *role, const void *p, const operand *o,
                               const aclrtMemLocation *loc) {
  aclrtMemLocationType said = loc->type == ACL_MEM_LOCATION_TYPE_HOST_NUMA ? ACL_MEM_LOCATION_TYPE_HOST : loc->type;
  aclrtMemLocationType is = o->device ? ACL_MEM_LOCATION_TYPE_DEVICE : ACL_MEM_LOCATION_TYPE_HOST;
  if (said != is)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: copy %zu: %s %p is %s memory but its attrs say %s (%d)", call, i,
                      role, p, o->device ? "device" : "host", location_name(loc->type), (int)loc->type);
  if (o->device && (int64_t)loc->id != o->dev)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: copy %zu: %s %p is memory of device %d but its attrs say device %u",
                      call, i, role, p, (int)o->dev, loc->id);
  return ACL_SUCCESS;
}

/* Lock held. Copy i against its attrs, its direction against the batch's
 * (*kind, of copy *first; SIZE_MAX: i is the first to be looked at), and
 * CANN's rules for a copy of that kind. */
static aclError batch_check_one(const char *call, size_t i, void *dst, const void *src, size_t size,
                                const aclrtMemcpyBatchAttr *attr, size_t *first, aclrtMemcpyKind *kind,
                                int32_t cur_dev) {
  operand od, os;
  aclError rc;
  if (!dst || !src)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: copy %zu: %s is NULL", call, i, dst ? "src" : "dst");
  if ((rc = classify(call, "dst", dst, size, &od)) != ACL_SUCCESS) return rc;
  if ((rc = classify(call, "src", src, size, &os)) != ACL_SUCCESS) return rc;
  if ((rc = batch_location(call, i, "dst", dst, &od, &attr->dstLoc)) != ACL_SUCCESS) return rc;
  if ((rc = batch_location(call, i, "src", src, &os, &attr->srcLoc)) != ACL_SUCCESS) return rc;
  if (od.device == os.device)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: copy %zu goes from %s to %s memory; a batch copies host to device or device to host only",
                      call, i, os.device ? "device" : "host", od.device ? "device" : "host");
  aclrtMemcpyKind k = od.device ? ACL_MEMCPY_HOST_TO_DEVICE : ACL_MEMCPY_DEVICE_TO_HOST;
  if (*first == SIZE_MAX) *first = i, *kind = k;
  if (k != *kind)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: copy %zu is %s but copy %zu is %s: CANN documents one direction for the whole batch", call,
                      i, aipc__memcpy_kind_name(k), *first, aipc__memcpy_kind_name(*kind));
  return kind_check(call, dst, &od, src, &os, k, cur_dev, false);
}

aclError aipc__emu_memcpy_batch(void **dsts, size_t *destMaxs, void **srcs, size_t *sizes, size_t numBatches,
                                aclrtMemcpyBatchAttr *attrs, size_t *attrsIndexes, size_t numAttrs, size_t *failIndex) {
  const char *call = AIPC_CALL_NAME(memcpy_batch);
  if (failIndex) *failIndex = SIZE_MAX;
  /* The checks in CANN's order: its acl layer's (INVALID_PARAM), then its
   * runtime's (RT_PARAM_INVALID), then each copy's. */
  if (!sizes) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: sizes is NULL", call);
  if (numBatches == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: numBatches is 0", call);
  bool any = false;
  for (size_t i = 0; i < numBatches && !any; i++) any = sizes[i] != 0;
  if (!any) return ACL_SUCCESS; /* nothing to copy: CANN looks at nothing else */
  if (!dsts || !destMaxs || !srcs || !attrs || !attrsIndexes)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s is NULL", call,
                      !dsts ? "dsts" : !destMaxs ? "destMaxs" : !srcs ? "srcs" : !attrs ? "attrs" : "attrsIndexes");
  for (size_t i = 0; i < numBatches; i++)
    if (sizes[i] > destMaxs[i])
      return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: copy %zu: size %zu is larger than destMaxs[%zu] = %zu", call, i,
                        sizes[i], i, destMaxs[i]);
  if (numAttrs == 0) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: numAttrs is 0", call);
  if (numAttrs > numBatches)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: numAttrs %zu is more than numBatches %zu", call, numAttrs,
                      numBatches);
  for (size_t k = 0; k < numAttrs; k++)
    for (size_t j = 0; j < sizeof attrs[k].rsv; j++)
      if (attrs[k].rsv[j])
        return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: attrs[%zu].rsv[%zu] is %u; the reserved bytes must be 0", call,
                          k, j, (unsigned)attrs[k].rsv[j]);
  if (numBatches > BATCH_MAX)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: numBatches %zu is more than CANN's limit of %u copies", call,
                      numBatches, BATCH_MAX);
  if (attrsIndexes[0] != 0)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: attrsIndexes[0] is %zu; it must be 0", call, attrsIndexes[0]);
  for (size_t k = 1; k < numAttrs; k++) {
    if (attrsIndexes[k] <= attrsIndexes[k - 1])
      return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: attrsIndexes[%zu] = %zu does not rise above attrsIndexes[%zu] = %zu",
                        call, k, attrsIndexes[k], k - 1, attrsIndexes[k - 1]);
    if (attrsIndexes[k] >= numBatches)
      return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: attrsIndexes[%zu] = %zu is not below numBatches %zu", call, k,
                        attrsIndexes[k], numBatches);
  }
  int32_t cur_dev = aipc__device_current();
  aclrtMemcpyKind kind = ACL_MEMCPY_HOST_TO_DEVICE;
  size_t first = SIZE_MAX;
  aclError rc = ACL_SUCCESS;
  /* Shared lock across the checks and the copies: every copy is checked
   * before any runs (a refused batch copies nothing), and no free or close
   * can unmap under them. */
  aipc__mem_rdlock();
  size_t k = 0;
  for (size_t i = 0; i < numBatches; i++) {
    if (k + 1 < numAttrs && i >= attrsIndexes[k + 1]) k++;
    if (sizes[i] == 0) continue;
    rc = batch_check_one(call, i, dsts[i], srcs[i], sizes[i], &attrs[k], &first, &kind, cur_dev);
    if (rc != ACL_SUCCESS) {
      if (failIndex) *failIndex = i;
      break;
    }
  }
  if (rc == ACL_SUCCESS)
    for (size_t i = 0; i < numBatches; i++)
      if (sizes[i]) memmove(dsts[i], srcs[i], sizes[i]);
  aipc__mem_unlock();
  return rc;
}

/* Lock held (shared or exclusive). */
/* CANN documents aclrtMemset(Async) for host and device memory alike, told
 * apart by the address. On a stream, and where the runtime runs work on a
 * device, host memory must come from the runtime (aclrtMallocHost): other
 * host memory may be gone by the time the task runs; refused here. */
static aclError memset_check(const char *call, void *devPtr, size_t count) {
  operand o = {false, false, -1, false};
  aclError rc = classify(call, "devPtr", devPtr, count, &o);
  if (rc == ACL_SUCCESS && !o.device && !o.acl_host)
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM,
                    "%s: devPtr %p is host memory the runtime did not allocate; CANN sets device memory or host "
                    "memory from aclrtMallocHost (any other host memory is undefined behaviour there)",
                    call, devPtr);
  return rc;
}

aclError aipc__mem_memset_check(const char *call, void *devPtr, size_t count) {
  aipc__mem_rdlock();
  aclError rc = memset_check(call, devPtr, count);
  aipc__mem_unlock();
  return rc;
}

aclError aipc__mem_memset(const char *call, void *devPtr, int value, size_t count) {
  /* Shared lock across the memset, as for a copy. */
  aipc__mem_rdlock();
  aclError rc = memset_check(call, devPtr, count);
  if (rc == ACL_SUCCESS) memset(devPtr, value, count);
  aipc__mem_unlock();
  return rc;
}

/* aclrtMemset: CANN's synchronous path hands any address to the driver,
 * which sets host memory it did not allocate too (CANN's sample 12 clears a
 * sockaddr on the stack with it). The emulator does the same for memory
 * that is none of its own, through a write that reports a page it cannot
 * write instead of faulting; its own memory (device blocks, freed device
 * memory, reservations, aclrtMallocHost) keeps every check. */
static aclError memset_sync(const char *call, void *devPtr, int value, size_t count) {
  aipc__mem_rdlock();
  operand o = {false, false, -1, false};
  aclError rc = classify(call, "devPtr", devPtr, count, &o);
  if (rc == ACL_SUCCESS) {
    if (o.device || o.acl_host) {
      memset(devPtr, value, count);
    } else if (aipc__os_fill_checked(devPtr, value, count) != 0) {
      int e = errno;
      rc = aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: devPtr range [%p, +%zu) is not writable host memory (%s)", call,
                      devPtr, count, strerror(e));
    }
  }
  aipc__mem_unlock();
  return rc;
}

aclError aipc__mem_run_on_device(const char *call, void *a, size_t na, const void *b, size_t nb,
                                 void (*fn)(void *arg), void *arg) {
  aipc__mem_rdlock();
  aclError rc = memset_check(call, a, na);
  if (rc == ACL_SUCCESS && b) rc = memset_check(call, (void *)b, nb);
  if (rc == ACL_SUCCESS && fn) fn(arg);
  aipc__mem_unlock();
  return rc;
}

aclError aipc__emu_memset(void *devPtr, size_t maxCount, int32_t value, size_t count) {
  const char *call = AIPC_CALL_NAME(memset);
  if (count == 0) return ACL_SUCCESS; /* CANN's acl layer: before any other check */
  if (!devPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: devPtr is NULL", call);
  if (count > maxCount)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: count %zu is larger than maxCount %zu", call, count, maxCount);
  return memset_sync(call, devPtr, (int)(value & 0xff), count);
}

/* ---- teardown and fork -------------------------------------------------- */

static void drop_reserved(aipc__onode *n, void *unused) {
  (void)unused;
  free((reserved *)((char *)n - offsetof(reserved, node)));
}

static void drop_block(aipc__onode *n, void *unmap_host) {
  mblock *mb = mb_of_node(n);
  if ((mb->pub.kind == AIPC_MEM_HOST || mb->pub.kind == AIPC_MEM_SYNC) && unmap_host)
    munmap((void *)mb->pub.base, mb->pub.size);
  if (mb->pub.fd >= 0) close(mb->pub.fd);
  free(mb);
}

void aipc__mem_finalize(void) {
  aipc__mem_wrlock();
  /* Device blocks go with their arena's mapping (and their memfds closed);
   * imports belong to the IPC layer, which has released them by now (any
   * left are only forgotten). */
  aipc__omap_drain(&g_map, drop_block, (void *)1);
  aipc__omap_drain(&g_reserved, drop_reserved, NULL); /* vmm.c released them already */
  for (int d = 0; d < AIPC_MAX_DEVICES; d++) {
    arena_close(&g_arenas[d], true);
    g_used[d] = 0;
  }
  aipc__mem_unlock();
}

void aipc__mem_atfork_prepare(void) { aipc__mem_wrlock(); }

void aipc__mem_atfork_parent(void) { aipc__mem_unlock(); }

void aipc__mem_atfork_child(void) {
  /* Released (this thread took it in prepare), then remade: the release lets
   * ThreadSanitizer see it free; remade since readers that were waiting, in
   * threads the child does not have, may still be counted in it. */
  aipc__mem_unlock();
  g_lock = (pthread_rwlock_t)PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
  /* The parent's blocks stay mapped here but are no longer ours to manage;
   * their memfds are closed, so nothing here can share them on. */
  aipc__omap_drain(&g_map, drop_block, NULL);
  aipc__omap_drain(&g_reserved, drop_reserved, NULL);
  for (int d = 0; d < AIPC_MAX_DEVICES; d++) {
    arena_close(&g_arenas[d], false);
    g_used[d] = 0;
  }
}
