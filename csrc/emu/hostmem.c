/*
 * Managed (unified) memory and registered host memory.
 *
 * aclrtMemAllocManaged: CANN's UVM is one address that host and device both
 * reach, migrating pages on touch. The emulated device's memory is host
 * memory already, so a managed allocation is a device block of the current
 * device (memory.c), its size rounded up to CANN's 2 MiB granule, that the
 * host reads and writes directly and aclrtFree releases, as in CANN.
 *
 * aclrtHostRegisterV2 / aclrtHostGetDevicePointer / aclrtHostUnregister:
 * CANN's runtime keeps the registered ranges in ordered maps
 * (src/runtime/core/src/common/register_memory.cc) and asks the driver for a
 * device address; this file keeps the same table. The emulated device
 * reaches host memory at its own address, so the device pointer of a mapped
 * range is the host pointer (CANN: the device pointer is only for device
 * code such as kernel arguments, never for memcpy, so nothing tells them
 * apart). The checks and codes are the runtime's: NULL pointers, a zero
 * size and a non-zero reserved flag are ACL_ERROR_INVALID_PARAM (its acl
 * layer); a bad flag, a pointer that is not a registered base for
 * GetDevicePointer, ACL_ERROR_RT_PARAM_INVALID; overlapping ranges
 * ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED; unregistering what is not a
 * registered base ACL_ERROR_HOST_MEMORY_NOT_REGISTERED.
 *
 * State: the table, behind g.mu (this file's alone; nothing is called
 * while it is held).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "core/ordmap.h"
#include "emu_internal.h"

#define MANAGED_GRANULE ((uint64_t)2 << 20)

typedef struct reg {
  aipc__onode node; /* keyed by base */
  uint64_t size;
  uint32_t flag;
} reg;

static struct {
  pthread_mutex_t mu;
  aipc__omap regs;
} g = {PTHREAD_MUTEX_INITIALIZER, AIPC__OMAP_INIT};

static reg *reg_of(aipc__onode *n) { return (reg *)n; }
_Static_assert(offsetof(reg, node) == 0, "a registration's address is its node's");

aclError aipc__emu_mem_alloc_managed(void **ptr, uint64_t size, uint32_t flag) {
  const char *call = AIPC_CALL_NAME(mem_alloc_managed);
  if (!ptr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: ptr is NULL", call);
  if (flag != ACL_RT_MEM_ATTACH_GLOBAL)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: flag 0x%x: the only flag is ACL_RT_MEM_ATTACH_GLOBAL (0x1)", call,
                      flag);
  if (size == 0) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: size is 0", call);
  if (size > UINT64_MAX - MANAGED_GRANULE || size > SIZE_MAX - MANAGED_GRANULE)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: size %llu is too large", call, (unsigned long long)size);
  uint64_t len = (size + MANAGED_GRANULE - 1) / MANAGED_GRANULE * MANAGED_GRANULE;
  aclError rc = aipc__emu_malloc(ptr, (size_t)len, ACL_MEM_MALLOC_HUGE_FIRST);
  if (rc != ACL_SUCCESS) {
    const char *m = aipc__recent_err_msg();
    return aipc__fail(rc, "%s: %s", call, m ? m : aipc__error_text(rc));
  }
  return ACL_SUCCESS;
}

/* The registration whose range holds [p, p+len), or one that overlaps it. g.mu held. */
static reg *overlapping(uintptr_t p, uint64_t len) {
  aipc__onode *n = aipc__omap_floor(&g.regs, p);
  if (n && n->key + reg_of(n)->size > p) return reg_of(n);
  n = aipc__omap_next(&g.regs, p);
  if (n && n->key < p + len) return reg_of(n);
  return NULL;
}

/* Whether every page of [a, a+len) is mapped in this process: mincore
 * fails with ENOMEM where one is not, so such a range is refused now, not
 * faulted on later. Asked 16 MiB at a time, with a small vector. */
static bool all_mapped(uintptr_t a, uint64_t len) {
  enum { CHUNK_PAGES = 4096 };
  unsigned char vec[CHUNK_PAGES];
  uint64_t pages = (len + AIPC_PAGE_SIZE - 1) / AIPC_PAGE_SIZE;
  for (uint64_t done = 0; done < pages; done += CHUNK_PAGES) {
    uint64_t n = pages - done < CHUNK_PAGES ? pages - done : CHUNK_PAGES;
    if (mincore((void *)(a + done * AIPC_PAGE_SIZE), (size_t)(n * AIPC_PAGE_SIZE), vec) != 0 && errno == ENOMEM)
      return false;
  }
  return true;
}

aclError aipc__emu_host_register_v2(void *ptr, uint64_t size, uint32_t flag) {
  const char *call = AIPC_CALL_NAME(host_register_v2);
  const uint32_t valid = ACL_HOST_REG_MAPPED | ACL_HOST_REG_IOMEMORY | ACL_HOST_REG_READONLY | ACL_HOST_REG_PINNED;
  if (!ptr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: ptr is NULL", call);
  if (size == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: size is 0", call);
  if ((flag & valid) == 0 || (flag & ~valid) != 0)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: flag 0x%x: an OR of ACL_HOST_REG_MAPPED (0x2), ACL_HOST_REG_IOMEMORY (0x4), "
                      "ACL_HOST_REG_READONLY (0x8) and ACL_HOST_REG_PINNED (0x10000000)",
                      call, flag);
  if (flag & ACL_HOST_REG_IOMEMORY)
    return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      "%s: ACL_HOST_REG_IOMEMORY registers a PCIe device's I/O space: the emulator has none (and CANN "
                      "documents the flag as reserved)",
                      call);
  if (flag & ACL_HOST_REG_READONLY)
    return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      "%s: ACL_HOST_REG_READONLY is reserved in CANN (not supported there either)", call);
  uintptr_t a = (uintptr_t)ptr;
  if (!AIPC_IS_PAGE_ALIGNED(a))
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: ptr %p is not 4 KiB aligned (CANN registers whole pages)", call,
                      ptr);
  if (size > UINTPTR_MAX - a)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: [%p, +%llu) wraps around the address space", call, ptr,
                      (unsigned long long)size);
  if (!all_mapped(a, size))
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: [%p, +%llu) is not all mapped memory of this process", call,
                      ptr, (unsigned long long)size);
  aipc__block b;
  if (aipc__mem_lookup(ptr, &b) && b.kind != AIPC_MEM_HOST)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is device memory of the runtime, not host memory", call,
                      ptr);
  if ((flag & ACL_HOST_REG_PINNED) && aipc__mem_lookup(ptr, &b) && b.kind == AIPC_MEM_HOST)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: ACL_HOST_REG_PINNED: %p is from aclrtMallocHost, page-locked already (the flag is for "
                      "pageable memory only)",
                      call, ptr);
  reg *r = calloc(1, sizeof *r);
  if (!r) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  r->node.key = a;
  r->size = size;
  r->flag = flag;
  aclError rc = ACL_SUCCESS;
  pthread_mutex_lock(&g.mu);
  reg *o = overlapping(a, size);
  if (o) {
    rc = aipc__fail(ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                    "%s: [%p, +%llu) overlaps the range registered at %p (+%llu)", call, ptr, (unsigned long long)size,
                    (void *)o->node.key, (unsigned long long)o->size);
  } else {
    (void)aipc__omap_insert(&g.regs, &r->node); /* no overlap: the key is free */
    r = NULL;
  }
  pthread_mutex_unlock(&g.mu);
  free(r);
  return rc;
}

aclError aipc__emu_host_get_device_pointer(void *pHost, void **pDevice, uint32_t flag) {
  const char *call = AIPC_CALL_NAME(host_get_device_pointer);
  if (!pHost) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: pHost is NULL", call);
  if (!pDevice) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: pDevice is NULL", call);
  if (flag != 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: flag %u is reserved: pass 0", call, flag);
  pthread_mutex_lock(&g.mu);
  aipc__onode *n = aipc__omap_get(&g.regs, (uintptr_t)pHost);
  bool mapped = n && (reg_of(n)->flag & ACL_HOST_REG_MAPPED);
  pthread_mutex_unlock(&g.mu);
  if (!mapped)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: %p is not the base of a range registered with ACL_HOST_REG_MAPPED (aclrtHostRegisterV2)",
                      call, pHost);
  *pDevice = pHost; /* the emulated device reaches host memory at its own address */
  return ACL_SUCCESS;
}

aclError aipc__emu_host_unregister(void *ptr) {
  const char *call = AIPC_CALL_NAME(host_unregister);
  if (!ptr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: ptr is NULL", call);
  pthread_mutex_lock(&g.mu);
  aipc__onode *n = aipc__omap_get(&g.regs, (uintptr_t)ptr);
  if (n) aipc__omap_remove(&g.regs, n);
  pthread_mutex_unlock(&g.mu);
  if (!n)
    return aipc__fail(ACL_ERROR_HOST_MEMORY_NOT_REGISTERED,
                      "%s: %p is not the base of a range registered with aclrtHostRegisterV2", call, ptr);
  free(reg_of(n));
  return ACL_SUCCESS;
}

/* ---- aclFinalize and fork --------------------------------------------- */

static void drop(aipc__onode *n, void *unused) {
  (void)unused;
  free(reg_of(n));
}

void aipc__hostmem_finalize(void) {
  pthread_mutex_lock(&g.mu);
  aipc__omap_drain(&g.regs, drop, NULL);
  pthread_mutex_unlock(&g.mu);
}

void aipc__hostmem_atfork_prepare(void) { pthread_mutex_lock(&g.mu); }
void aipc__hostmem_atfork_parent(void) { pthread_mutex_unlock(&g.mu); }

/* The child starts with nothing registered, as with every other resource. */
void aipc__hostmem_atfork_child(void) {
  g.mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  aipc__omap_drain(&g.regs, drop, NULL);
}
