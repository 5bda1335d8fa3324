/*
 * Virtual memory management: physical allocations, address reservations,
 * the mappings of the first into the second, and their sharing with other
 * processes through 64-bit shareable handles (the IPC layer, ipc.h).
 *
 * A physical allocation is a memfd of its own, sealed against shrinking and
 * growing, its size a multiple of the granularity; nothing reaches it until
 * aclrtMapMem maps it (MAP_SHARED | MAP_FIXED) over part of a reservation,
 * which is a PROT_NONE range of address space. A mapping is a block of kind
 * MAPPED in memory.c's map, so every other call (copies, memsets, streams)
 * sees device memory there; one made with aclrtMemMapNoAccess stays
 * PROT_NONE (a touch faults, a copy is refused) until aclrtMemSetAccess.
 *
 * Sharing passes the memfd: an importer gets a descriptor of its own, its
 * handle on the pages for as long as it keeps it, so the memory outlives the
 * exporter and goes when the last process lets go.
 *
 * Argument checks follow CANN's layers: what CANN's acl layer checks fails
 * with ACL_ERROR_INVALID_PARAM, what its driver checks with
 * ACL_ERROR_RT_PARAM_INVALID, an unknown handle with
 * ACL_ERROR_RT_INVALID_HANDLE.
 *
 * State: g.mu guards everything here. Lock order: g.mu -> the IPC layer's
 * locks -> the memory lock; an import's round trip runs without g.mu.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/hashmap.h"
#include "core/ordmap.h"
#include "emu/ipc/ipc.h"
#include "emu_internal.h"
#include "os/os.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)
#define SMALL_GRANULARITY (2 * MiB) /* CANN's huge page, its minimum granularity on device memory */
/* Where aclrtReserveMemAddress takes a caller's expectPtr (CANN's documented window). */
#define EXPECT_LOW ((uintptr_t)16 << 40)
#define EXPECT_HIGH ((uintptr_t)24 << 40)

typedef struct phys {
  uint64_t id; /* the caller's handle: a number never reused, so a stale handle finds nothing */
  int fd;
  uint64_t size;
  uint64_t granularity;
  int32_t device;
  bool imported;     /* from another process: not exportable, not counted against capacity */
  uint32_t handles;  /* the caller's references: MallocPhysical/Import 1, Retain +1, FreePhysical -1 */
  uint32_t maps;     /* live mappings; the record lives while either count is non-zero */
  uint64_t share;    /* its shareable handle, 0 if none (for a fabric one, non-zero too) */
  uint8_t *fabric;   /* its aclrtMemFabricHandle's bytes, when it was exported so (owned), else NULL */
  uint64_t from;     /* imported: the shareable handle it came from (a key of g.imports while handles > 0) */
} phys;

typedef enum { ORIGIN_NONE, ORIGIN_LOCAL, ORIGIN_IMPORTED } origin;

typedef struct resv {
  aipc__onode node; /* keyed by base */
  uintptr_t base;
  size_t size;
  uint32_t maps;
  int32_t device; /* of what is mapped in it, -1 while nothing is */
  origin from;
} resv;

typedef struct mapping {
  phys *ph;
  resv *rv;
  uintptr_t base;
  size_t size;
  aipc__block *block;
} mapping;

static struct {
  pthread_mutex_t mu;
  aipc__hmap handles; /* {id, 0} -> phys: every record alive */
  uint64_t next_id;
  aipc__hmap maps;    /* {base, 0} -> mapping */
  aipc__omap resvs;
  /* {shareable handle, 0} -> the live imported record: CANN keeps handle and
   * shareable handle one to one within a process, so a second import of a
   * shareable handle whose first import is still held is refused. */
  aipc__hmap imports;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .handles = AIPC__HMAP_INIT,
       .maps = AIPC__HMAP_INIT,
       .resvs = AIPC__OMAP_INIT,
       .imports = AIPC__HMAP_INIT};

static aipc__hkey hk(const void *p) { return (aipc__hkey){(uint64_t)(uintptr_t)p, 0}; }
static aclrtDrvMemHandle handle_of(const phys *ph) { return (aclrtDrvMemHandle)(uintptr_t)ph->id; }
static resv *rv_of(aipc__onode *n) { return (resv *)((char *)n - offsetof(resv, node)); }

/* ---- properties ----------------------------------------------------------- */

static bool attr_1g(aclrtMemAttr a) { return a == ACL_HBM_MEM_HUGE1G || a == ACL_MEM_HUGE1G || a == ACL_MEM_P2P_HUGE1G; }
/* In pages of 2 MiB or 1 GiB on a device: here transparent 2 MiB ones. */
static bool attr_huge(aclrtMemAttr a) {
  return attr_1g(a) || a == ACL_HBM_MEM_HUGE || a == ACL_MEM_HUGE || a == ACL_MEM_P2P_HUGE;
}

/* CANN's checks of a property (its acl layer), and the emulator's limits. */
static aclError check_prop(const char *call, const aclrtPhysicalMemProp *prop) {
  if (prop->handleType != ACL_MEM_HANDLE_TYPE_NONE)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: prop->handleType %d is not ACL_MEM_HANDLE_TYPE_NONE", call,
                      (int)prop->handleType);
  if (prop->allocationType != ACL_MEM_ALLOCATION_TYPE_PINNED)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: prop->allocationType %d is not ACL_MEM_ALLOCATION_TYPE_PINNED",
                      call, (int)prop->allocationType);
  aclrtMemLocationType t = prop->location.type;
  if (t == ACL_MEM_LOCATION_TYPE_UNREGISTERED || t == ACL_MEM_LOCATION_TYPE_MANAGED || (unsigned)t > 4)
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      "%s: prop->location.type %d is not ACL_MEM_LOCATION_TYPE_DEVICE, _HOST or _HOST_NUMA", call, (int)t);
  aclrtMemAttr a = prop->memAttr;
  if (a == ACL_DDR_MEM || a == ACL_HBM_MEM || a == ACL_HBM_MEM_P2P_HUGE || a == ACL_HBM_MEM_P2P_NORMAL ||
      a == ACL_HBM_MEM_P2P_HUGE1G || (unsigned)a > ACL_MEM_P2P_HUGE1G)
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      "%s: prop->memAttr %d is not one physical memory takes (ACL_HBM_MEM_NORMAL, _HUGE, _HUGE1G, "
                      "ACL_MEM_NORMAL, _HUGE, _HUGE1G, ACL_MEM_P2P_NORMAL, _HUGE, _HUGE1G)",
                      call, (int)a);
  bool ddr = a == ACL_DDR_MEM_HUGE || a == ACL_DDR_MEM_NORMAL || a == ACL_DDR_MEM_P2P_HUGE || a == ACL_DDR_MEM_P2P_NORMAL;
  if (t == ACL_MEM_LOCATION_TYPE_DEVICE && ddr)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: prop->memAttr %d is host (DDR) memory, but the location is a device",
                      call, (int)a);
  if (t != ACL_MEM_LOCATION_TYPE_DEVICE)
    return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      "%s: prop->location.type %d: the emulator provides device physical memory only "
                      "(ACL_MEM_LOCATION_TYPE_DEVICE)",
                      call, (int)t);
  uint32_t n = aipc__config_get()->devices;
  if (prop->location.id >= n)
    return aipc__fail(ACL_ERROR_RT_INVALID_DEVICEID,
                      "%s: prop->location.id %u is out of range: %u device%s (ASCEND_IPC_EMU_DEVICES)", call,
                      prop->location.id, n, n == 1 ? "" : "s");
  return ACL_SUCCESS;
}

aclError aipc__emu_mem_get_allocation_granularity(aclrtPhysicalMemProp *prop, aclrtMemGranularityOptions option,
                                                  size_t *granularity) {
  const char *call = AIPC_CALL_NAME(mem_get_allocation_granularity);
  if (!prop) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: prop is NULL", call);
  if (!granularity) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: granularity is NULL", call);
  aclError rc = check_prop(call, prop);
  if (rc != ACL_SUCCESS) return rc;
  if (option != ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM && option != ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: option %d is not ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM or _RECOMMENDED", call, (int)option);
  *granularity = attr_1g(prop->memAttr) ? GiB : SMALL_GRANULARITY;
  return ACL_SUCCESS;
}

/* ---- physical allocations ------------------------------------------------- */

/* The live record behind a caller's handle, or a recorded error. g.mu held. */
static aclError find_handle(const char *call, aclrtDrvMemHandle h, phys **out) {
  phys *ph = aipc__hmap_get(&g.handles, hk(h));
  if (!ph || ph->handles == 0)
    return aipc__fail(ACL_ERROR_RT_INVALID_HANDLE,
                      "%s: handle %p is not a live physical memory handle of this process (freed, or never returned "
                      "by aclrtMallocPhysical, aclrtMemImportFromShareableHandle or aclrtMemRetainAllocationHandle)",
                      call, h);
  *out = ph;
  return ACL_SUCCESS;
}

/* Frees a record nobody holds or maps any more. g.mu held. */
static void phys_maybe_destroy(phys *ph) {
  if (ph->handles > 0 || ph->maps > 0) return;
  aipc__hmap_remove(&g.handles, hk(handle_of(ph)));
  close(ph->fd);
  if (!ph->imported) aipc__mem_uncharge(ph->device, ph->size);
  free(ph->fabric);
  free(ph);
}

/* Ends the share of ph, if any: no new imports, importers keep theirs. g.mu held. */
static void phys_unshare(phys *ph) {
  if (ph->share == 0) return;
  if (ph->fabric)
    aipc__ipc_release_fabric(AIPC_CALL_NAME(free_physical), ph->fabric);
  else
    aipc__ipc_release_physical(AIPC_CALL_NAME(free_physical), ph->share);
  free(ph->fabric);
  ph->fabric = NULL;
  ph->share = 0;
}

/* A new record for fd. g.mu held. Takes fd in every case. */
static aclError phys_add(const char *call, int fd, uint64_t size, uint64_t gran, int32_t device, bool imported,
                         aclrtDrvMemHandle *handle) {
  phys *ph = calloc(1, sizeof *ph);
  if (ph) ph->id = ++g.next_id;
  if (!ph || aipc__hmap_put(&g.handles, hk(handle_of(ph)), ph) != 0) {
    free(ph);
    close(fd);
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory for bookkeeping", call);
  }
  ph->fd = fd;
  ph->size = size;
  ph->granularity = gran;
  ph->device = device;
  ph->imported = imported;
  ph->handles = 1;
  *handle = handle_of(ph);
  return ACL_SUCCESS;
}

aclError aipc__emu_malloc_physical(aclrtDrvMemHandle *handle, size_t size, const aclrtPhysicalMemProp *prop,
                                   uint64_t flags) {
  const char *call = AIPC_CALL_NAME(malloc_physical);
  if (!handle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", call);
  if (!prop) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: prop is NULL", call);
  if (size == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: size is 0", call);
  if (flags != 0)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: flags 0x%llx: must be 0", call, (unsigned long long)flags);
  aclError rc = check_prop(call, prop);
  if (rc != ACL_SUCCESS) return rc;
  uint64_t gran = attr_1g(prop->memAttr) ? GiB : SMALL_GRANULARITY;
  int32_t dev = (int32_t)prop->location.id;
  uint64_t cap = aipc__config_get()->memory;
  if (size > cap)
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION,
                      "%s: %zu bytes is more than device %d has (%" PRIu64 " bytes; ASCEND_IPC_EMU_MEMORY)", call, size,
                      (int)dev, cap);
  uint64_t len = ((uint64_t)size + gran - 1) / gran * gran; /* CANN rounds up to its page */
  if (!aipc__mem_charge(dev, len))
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION,
                      "%s: out of memory on device %d: %" PRIu64 " bytes requested (rounded to the %" PRIu64
                      "-byte granularity), %" PRIu64 " of %" PRIu64
                      " bytes in use (ASCEND_IPC_EMU_MEMORY sets the capacity)",
                      call, (int)dev, len, gran, aipc__mem_used(dev), cap);
  char name[40];
  snprintf(name, sizeof name, "ascend_ipc_phys_dev%d", (int)dev);
  int fd = aipc__os_memfd_sealed(name, len);
  if (fd < 0 && errno == EMFILE && aipc__os_raise_fd_limit()) fd = aipc__os_memfd_sealed(name, len);
  if (fd < 0) {
    int e = errno;
    char limit[320];
    aipc__mem_uncharge(dev, len);
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: cannot create the memory of a physical allocation: %s", call,
                      aipc__os_memfd_error_text(e, limit, sizeof limit));
  }
  /* As aclrtMalloc's (memory.c): the pages made now where the host can spare
   * them, as a device commits them; transparent huge pages for huge ones,
   * which a mapping on the granularity's boundary maps whole. */
  if (aipc__config_get()->pages != AIPC_PAGES_AT_TOUCH && aipc__os_memory_to_spare(len))
    (void)aipc__os_memfd_make_pages(fd, len, attr_huge(prop->memAttr)); /* else at first touch */
  pthread_mutex_lock(&g.mu);
  rc = phys_add(call, fd, len, gran, dev, false, handle);
  pthread_mutex_unlock(&g.mu);
  if (rc != ACL_SUCCESS) aipc__mem_uncharge(dev, len);
  return rc;
}

aclError aipc__emu_free_physical(aclrtDrvMemHandle handle) {
  const char *call = AIPC_CALL_NAME(free_physical);
  if (!handle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", call);
  pthread_mutex_lock(&g.mu);
  phys *ph = NULL;
  aclError rc = find_handle(call, handle, &ph);
  if (rc == ACL_SUCCESS && --ph->handles == 0) {
    if (ph->imported) aipc__hmap_remove(&g.imports, hk((void *)(uintptr_t)ph->from)); /* may be imported again */
    phys_unshare(ph);     /* the exporter's last handle: no import after this */
    phys_maybe_destroy(ph); /* else the last unmap frees it */
  }
  pthread_mutex_unlock(&g.mu);
  return rc;
}

/* ---- reservations ----------------------------------------------------------- */

/* The reservation holding [p, p + len), or NULL. g.mu held. */
static resv *resv_holding(uintptr_t p, size_t len) {
  aipc__onode *n = aipc__omap_floor(&g.resvs, p);
  if (!n) return NULL;
  resv *rv = rv_of(n);
  if (p - rv->base >= rv->size || len > rv->size - (p - rv->base)) return NULL;
  return rv;
}

/* size bytes of PROT_NONE address space aligned to align, at hint if not NULL. */
static void *reserve_range(size_t size, size_t align, void *hint) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (hint) {
    void *p = mmap(hint, size, PROT_NONE, flags | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (p != hint) { /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
      munmap(p, size);
      errno = EEXIST;
      return NULL;
    }
    return p;
  }
  if (size > SIZE_MAX - align) {
    errno = ENOMEM;
    return NULL;
  }
  uint8_t *p = mmap(NULL, size + align, PROT_NONE, flags, -1, 0);
  if (p == MAP_FAILED) return NULL;
  uint8_t *aligned = (uint8_t *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
  if (aligned > p) munmap(p, (size_t)(aligned - p));
  size_t tail = (size_t)(p + size + align - (aligned + size));
  if (tail) munmap(aligned + size, tail);
  return aligned;
}

aclError aipc__emu_reserve_mem_address(void **virPtr, size_t size, size_t alignment, void *expectPtr, uint64_t flags) {
  const char *call = AIPC_CALL_NAME(reserve_mem_address);
  if (!virPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: virPtr is NULL", call);
  if (size == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: size is 0", call);
  if (flags > 1)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: flags 0x%llx: must be 0 (1 is accepted for older callers)", call,
                      (unsigned long long)flags);
  if (alignment != 0)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: alignment %zu: must be 0 (reserved)", call, alignment);
  if (size % SMALL_GRANULARITY != 0)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: size %zu is not a multiple of the granularity (%" PRIu64
                      " bytes; aclrtMemGetAllocationGranularity)",
                      call, size, SMALL_GRANULARITY);
  /* Large ranges start on a 1 GiB boundary, so 1 GiB pages can map there. */
  size_t align = size >= GiB ? GiB : SMALL_GRANULARITY;
  uintptr_t want = (uintptr_t)expectPtr;
  if (expectPtr && (want % align != 0 || want < EXPECT_LOW || want >= EXPECT_HIGH || size > EXPECT_HIGH - want))
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: expectPtr %p: a fixed range must start on a %zu-byte boundary and lie in [16 TiB, 24 TiB) "
                      "(0x%" PRIxPTR " - 0x%" PRIxPTR ")",
                      call, expectPtr, align, EXPECT_LOW, EXPECT_HIGH);
  void *p = reserve_range(size, align, expectPtr);
  if (!p) {
    int e = errno;
    if (expectPtr && e == EEXIST)
      return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: expectPtr %p: [%p, +%zu) is already in use", call, expectPtr,
                        expectPtr, size);
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: cannot reserve %zu bytes of address space: %s", call, size,
                      strerror(e));
  }
  resv *rv = calloc(1, sizeof *rv);
  pthread_mutex_lock(&g.mu);
  if (rv) {
    rv->base = (uintptr_t)p;
    rv->size = size;
    rv->device = -1;
    rv->node.key = rv->base;
    bool known = aipc__mem_add_reserved(rv->base, size);
    if (!known || aipc__omap_insert(&g.resvs, &rv->node) != 0) {
      if (known) aipc__mem_remove_reserved(rv->base);
      free(rv);
      rv = NULL;
    }
  }
  pthread_mutex_unlock(&g.mu);
  if (!rv) {
    munmap(p, size);
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory for bookkeeping", call);
  }
  *virPtr = p;
  return ACL_SUCCESS;
}

aclError aipc__emu_release_mem_address(void *virPtr) {
  const char *call = AIPC_CALL_NAME(release_mem_address);
  if (!virPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: virPtr is NULL", call);
  aclError rc = ACL_SUCCESS;
  pthread_mutex_lock(&g.mu);
  aipc__onode *n = aipc__omap_get(&g.resvs, (uintptr_t)virPtr);
  resv *rv = n ? rv_of(n) : NULL;
  if (!rv) {
    resv *in = resv_holding((uintptr_t)virPtr, 1);
    rc = in ? aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                         "%s: %p lies %zu bytes into the reservation at %p; pass the address aclrtReserveMemAddress "
                         "returned",
                         call, virPtr, (size_t)((uintptr_t)virPtr - in->base), (void *)in->base)
            : aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not a reservation of this process (released already?)",
                         call, virPtr);
  } else if (rv->maps > 0) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: the reservation at %p still has %u mapping(s); aclrtUnmapMem them first", call, virPtr,
                    rv->maps);
  } else {
    aipc__omap_remove(&g.resvs, &rv->node);
    aipc__mem_remove_reserved(rv->base);
    munmap((void *)rv->base, rv->size);
    free(rv);
  }
  pthread_mutex_unlock(&g.mu);
  return rc;
}

/* ---- mappings ------------------------------------------------------------------ */

static aclError map_common(const char *call, void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle,
                           uint64_t flags, bool access) {
  if (!virPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: virPtr is NULL", call);
  if (!handle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", call);
  if (size == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: size is 0", call);
  if (flags != 0)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: flags 0x%llx: must be 0", call, (unsigned long long)flags);
  uintptr_t p = (uintptr_t)virPtr;
  pthread_mutex_lock(&g.mu);
  phys *ph = NULL;
  resv *rv = NULL;
  mapping *m = NULL;
  aclError rc = find_handle(call, handle, &ph);
  if (rc != ACL_SUCCESS) goto out;
  if (offset != 0) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: offset %zu: must be 0 (a physical allocation maps whole)", call,
                    offset);
  } else if (size != ph->size) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: size %zu is not the size of the physical allocation (%" PRIu64 " bytes): it maps whole", call,
                    size, ph->size);
  } else if (p % ph->granularity != 0) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: virPtr %p is not aligned to the granularity (%" PRIu64 " bytes)",
                    call, virPtr, ph->granularity);
  } else if (!(rv = resv_holding(p, size))) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: [%p, +%zu) does not lie inside one reservation of this process (aclrtReserveMemAddress)", call,
                    virPtr, size);
  } else if (rv->device >= 0 && rv->device != ph->device) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: the reservation at %p holds memory of device %d; memory of device %d cannot join it", call,
                    (void *)rv->base, (int)rv->device, (int)ph->device);
  } else if (rv->from != ORIGIN_NONE && (rv->from == ORIGIN_IMPORTED) != ph->imported) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: the reservation at %p holds %s memory; CANN maps allocated and imported handles into "
                    "separate reservations",
                    call, (void *)rv->base, rv->from == ORIGIN_IMPORTED ? "imported" : "allocated");
  } else if (!(m = calloc(1, sizeof *m))) {
    rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory for bookkeeping", call);
  }
  if (rc != ACL_SUCCESS) goto out;
  aipc__block *b = NULL;
  int map_errno = aipc__mem_add_mapping(virPtr, size, ph->fd, access, ph->device, m, &b);
  if (map_errno < 0) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: [%p, +%zu) overlaps a mapping already in the reservation", call,
                    virPtr, size);
  } else if (!b) {
    rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: cannot map %zu bytes at %p: %s", call, size, virPtr,
                    strerror(map_errno));
  } else if (aipc__hmap_put(&g.maps, hk(virPtr), m) != 0) {
    aipc__mem_remove_import(b);
    mmap(virPtr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory for bookkeeping", call);
  } else {
    *m = (mapping){.ph = ph, .rv = rv, .base = p, .size = size, .block = b};
    m = NULL;
    ph->maps++;
    rv->maps++;
    rv->device = ph->device;
    rv->from = ph->imported ? ORIGIN_IMPORTED : ORIGIN_LOCAL;
  }
out:
  free(m);
  pthread_mutex_unlock(&g.mu);
  return rc;
}

aclError aipc__emu_map_mem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle, uint64_t flags) {
  return map_common(AIPC_CALL_NAME(map_mem), virPtr, size, offset, handle, flags, true);
}

aclError aipc__emu_mem_map_no_access(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle,
                                     uint64_t flags) {
  return map_common(AIPC_CALL_NAME(mem_map_no_access), virPtr, size, offset, handle, flags, false);
}

/* The mapping that starts at p, or a recorded error. g.mu held. */
static aclError find_mapping(const char *call, const void *p, mapping **out) {
  mapping *m = aipc__hmap_get(&g.maps, hk(p));
  if (m) {
    *out = m;
    return ACL_SUCCESS;
  }
  aipc__block b;
  uintptr_t base = aipc__mem_lookup(p, &b) && b.kind == AIPC_MEM_MAPPED ? b.base : 0;
  if (base)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: %p lies %zu bytes into the mapping at %p; pass the address given to aclrtMapMem", call, p,
                      (size_t)((uintptr_t)p - base), (void *)base);
  return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not the start of a mapping made with aclrtMapMem%s", call,
                    p, resv_holding((uintptr_t)p, 1) ? " (it lies in a reservation, unmapped)" : "");
}

/* Removes m: its range goes back to the reservation. g.mu held. */
static void unmap_one(mapping *m) {
  aipc__mem_remove_mapping(m->block); /* no copy runs on it meanwhile */
  aipc__hmap_remove(&g.maps, hk((void *)m->base));
  if (--m->rv->maps == 0) {
    m->rv->device = -1;
    m->rv->from = ORIGIN_NONE;
  }
  m->ph->maps--;
  phys_maybe_destroy(m->ph);
  free(m);
}

aclError aipc__emu_unmap_mem(void *virPtr) {
  const char *call = AIPC_CALL_NAME(unmap_mem);
  if (!virPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: virPtr is NULL", call);
  pthread_mutex_lock(&g.mu);
  mapping *m = NULL;
  aclError rc = find_mapping(call, virPtr, &m);
  if (rc == ACL_SUCCESS) unmap_one(m);
  pthread_mutex_unlock(&g.mu);
  return rc;
}

aclError aipc__emu_mem_set_access(void *virPtr, size_t size, aclrtMemAccessDesc *desc, size_t count) {
  const char *call = AIPC_CALL_NAME(mem_set_access);
  /* CANN checks these in its runtime layer, hence 107000. */
  if (!virPtr) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: virPtr is NULL", call);
  if (!desc) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: desc is NULL", call);
  if (count == 0) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: count is 0", call);
  uint32_t devices = aipc__config_get()->devices;
  for (size_t i = 0; i < count; i++) {
    const aclrtMemAccessDesc *d = &desc[i];
    if (d->flags != ACL_RT_MEM_ACCESS_FLAGS_READWRITE)
      return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                        "%s: desc[%zu].flags %d: only ACL_RT_MEM_ACCESS_FLAGS_READWRITE is supported", call, i,
                        (int)d->flags);
    if (d->location.type != ACL_MEM_LOCATION_TYPE_DEVICE && d->location.type != ACL_MEM_LOCATION_TYPE_HOST)
      return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                        "%s: desc[%zu].location.type %d is not ACL_MEM_LOCATION_TYPE_DEVICE or _HOST", call, i,
                        (int)d->location.type);
    if (d->location.type == ACL_MEM_LOCATION_TYPE_DEVICE && d->location.id >= devices)
      return aipc__fail(ACL_ERROR_RT_INVALID_DEVICEID, "%s: desc[%zu].location.id %u is out of range: %u device(s)",
                        call, i, d->location.id, devices);
    for (size_t j = 0; j < sizeof d->rsv; j++)
      if (d->rsv[j] != 0) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: desc[%zu].rsv must be all zero", call, i);
  }
  pthread_mutex_lock(&g.mu);
  mapping *m = NULL;
  aclError rc = find_mapping(call, virPtr, &m);
  if (rc == ACL_SUCCESS && size != m->size) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: size %zu is not the size of the mapping at %p (%zu bytes)", call,
                    size, virPtr, m->size);
  } else if (rc == ACL_SUCCESS) {
    int e = aipc__mem_open_mapping(m->block);
    if (e != 0)
      rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: cannot open %p for access: %s", call, virPtr, strerror(e));
  }
  pthread_mutex_unlock(&g.mu);
  return rc;
}

aclError aipc__emu_mem_retain_allocation_handle(void *virPtr, aclrtDrvMemHandle *handle) {
  const char *call = AIPC_CALL_NAME(mem_retain_allocation_handle);
  if (!virPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: virPtr is NULL", call);
  if (!handle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", call);
  pthread_mutex_lock(&g.mu);
  mapping *m = NULL;
  aclError rc = find_mapping(call, virPtr, &m);
  if (rc == ACL_SUCCESS && m->ph->handles == UINT32_MAX)
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: too many references to one handle", call);
  if (rc == ACL_SUCCESS) {
    m->ph->handles++; /* the same handle again, one more aclrtFreePhysical owed */
    *handle = handle_of(m->ph);
  }
  pthread_mutex_unlock(&g.mu);
  return rc;
}

aclError aipc__emu_mem_physical_size(aclrtDrvMemHandle handle, size_t *size) {
  const char *call = "mem_physical_size";
  if (!size) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: size is NULL", call);
  pthread_mutex_lock(&g.mu);
  phys *ph = NULL;
  aclError rc = find_handle(call, handle, &ph);
  if (rc == ACL_SUCCESS) *size = (size_t)ph->size;
  pthread_mutex_unlock(&g.mu);
  return rc;
}

aclError aipc__emu_mem_get_address_range(void *ptr, void **pbase, size_t *psize) {
  const char *call = AIPC_CALL_NAME(mem_get_address_range);
  if (!ptr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: ptr is NULL", call);
  if (!pbase && !psize) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: pbase and psize are both NULL", call);
  aipc__block b;
  bool ok = aipc__mem_lookup(ptr, &b) && (b.kind == AIPC_MEM_MAPPED || (b.kind == AIPC_MEM_DEVICE && !b.user_freed) ||
                                          b.kind == AIPC_MEM_HOST || b.kind == AIPC_MEM_IMPORT);
  uintptr_t base = ok ? b.base : 0;
  size_t size = ok ? b.size : 0;
  if (!ok)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: %p is not in memory of this process's runtime (aclrtMalloc, aclrtMallocHost, an IPC import "
                      "or an aclrtMapMem mapping)",
                      call, ptr);
  if (pbase) *pbase = (void *)base;
  if (psize) *psize = size;
  return ACL_SUCCESS;
}

/* ---- sharing ---------------------------------------------------------------------- */

static aclError share_type_check(const char *call, aclrtMemSharedHandleType t) {
  if (t == ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT || t == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC) return ACL_SUCCESS;
  return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: shareType %d is not ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT or ACL_MEM_SHARE_HANDLE_TYPE_FABRIC",
                    call, (int)t);
}

/* The number a fabric handle is known by in g.imports (one to one within a
 * process, as a DEFAULT handle's): a hash of its bytes, never 0. */
static uint64_t fabric_number(const uint8_t *h) {
  uint64_t v = 0xcbf29ce484222325u;
  for (size_t i = 0; i < AIPC_FABRIC_LEN; i++) v = (v ^ h[i]) * 0x100000001b3u;
  return v ? v : 1;
}

/* fabric: write an aclrtMemFabricHandle to fabric_out instead of *out. */
static aclError export_common(const char *call, aclrtDrvMemHandle handle, uint64_t flags, uint64_t *out,
                              uint8_t *fabric_out) {
  if (flags > ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: flags 0x%llx: ACL_RT_VMM_EXPORT_FLAG_DEFAULT or _DISABLE_PID_VALIDATION", call,
                      (unsigned long long)flags);
  pthread_mutex_lock(&g.mu);
  phys *ph = NULL;
  aclError rc = find_handle(call, handle, &ph);
  if (rc != ACL_SUCCESS) {
    /* recorded */
  } else if (ph->imported) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: handle %p was imported from another process; only memory this process allocated with "
                    "aclrtMallocPhysical can be exported",
                    call, handle);
  } else if (ph->share != 0) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: handle %p is already exported (shareable handle 0x%016llx); a physical allocation has one "
                    "shareable handle",
                    call, handle, (unsigned long long)ph->share);
  } else if (fabric_out) {
    uint8_t *fh = malloc(AIPC_FABRIC_LEN);
    rc = fh ? aipc__ipc_share_fabric(call, ph->fd, ph->size, ph->device,
                                     !(flags & ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION), fh)
            : aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", call);
    if (rc == ACL_SUCCESS) {
      ph->fabric = fh;
      ph->share = fabric_number(fh);
      memcpy(fabric_out, fh, AIPC_FABRIC_LEN);
    } else {
      free(fh);
    }
  } else {
    rc = aipc__ipc_share_physical(call, ph->fd, ph->size, ph->device,
                                  !(flags & ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION), &ph->share);
    if (rc == ACL_SUCCESS) *out = ph->share;
  }
  pthread_mutex_unlock(&g.mu);
  return rc;
}

aclError aipc__emu_mem_export_to_shareable_handle(aclrtDrvMemHandle handle, aclrtMemHandleType handleType,
                                                  uint64_t flags, uint64_t *shareableHandle) {
  const char *call = AIPC_CALL_NAME(mem_export_to_shareable_handle);
  if (!handle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", call);
  if (handleType != ACL_MEM_HANDLE_TYPE_NONE)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: handleType %d is not ACL_MEM_HANDLE_TYPE_NONE", call,
                      (int)handleType);
  if (!shareableHandle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: shareableHandle is NULL", call);
  return export_common(call, handle, flags, shareableHandle, NULL);
}

aclError aipc__emu_mem_export_to_shareable_handle_v2(aclrtDrvMemHandle handle, uint64_t flags,
                                                     aclrtMemSharedHandleType shareType, void *shareableHandle) {
  const char *call = AIPC_CALL_NAME(mem_export_to_shareable_handle_v2);
  if (!handle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", call);
  if (!shareableHandle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: shareableHandle is NULL", call);
  aclError rc = share_type_check(call, shareType);
  if (rc != ACL_SUCCESS) return rc;
  if (shareType == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC) {
    uint8_t fh[AIPC_FABRIC_LEN];
    rc = export_common(call, handle, flags, NULL, fh);
    if (rc == ACL_SUCCESS) memcpy(shareableHandle, fh, sizeof fh); /* the caller's buffer only on success */
    return rc;
  }
  uint64_t h;
  rc = export_common(call, handle, flags, &h, NULL);
  if (rc == ACL_SUCCESS) memcpy(shareableHandle, &h, sizeof h);
  return rc;
}

static aclError set_pid_common(const char *call, uint64_t shareable, int32_t *pid, size_t pidNum) {
  if (!pid) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: pid is NULL", call);
  if (pidNum == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: pidNum is 0", call);
  for (size_t i = 0; i < pidNum; i++)
    if (pid[i] <= 0)
      return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: pid[%zu] = %d is not a process id", call, i, (int)pid[i]);
  return aipc__ipc_share_physical_allow(call, shareable, pid, pidNum);
}

aclError aipc__emu_mem_set_pid_to_shareable_handle(uint64_t shareableHandle, int32_t *pid, size_t pidNum) {
  return set_pid_common(AIPC_CALL_NAME(mem_set_pid_to_shareable_handle), shareableHandle, pid, pidNum);
}

aclError aipc__emu_mem_set_pid_to_shareable_handle_v2(void *shareableHandle, aclrtMemSharedHandleType shareType,
                                                      int32_t *pid, size_t pidNum) {
  const char *call = AIPC_CALL_NAME(mem_set_pid_to_shareable_handle_v2);
  if (!shareableHandle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: shareableHandle is NULL", call);
  if (!pid) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: pid is NULL", call);
  if (pidNum == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: pidNum is 0", call);
  aclError rc = share_type_check(call, shareType);
  if (rc != ACL_SUCCESS) return rc;
  if (shareType == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC) {
    for (size_t i = 0; i < pidNum; i++)
      if (pid[i] <= 0)
        return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: pid[%zu] = %d is not a process id", call, i, (int)pid[i]);
    uint8_t fh[AIPC_FABRIC_LEN];
    memcpy(fh, shareableHandle, sizeof fh);
    return aipc__ipc_fabric_allow(call, fh, pid, pidNum);
  }
  uint64_t h;
  memcpy(&h, shareableHandle, sizeof h);
  return set_pid_common(call, h, pid, pidNum);
}

/* CANN: within one process a shareable handle and its imported handle are
 * one to one (docs of aclrtMemImportFromShareableHandle); the repeated
 * export the same page documents is refused with ACL_ERROR_RT_PARAM_INVALID,
 * and so is this. g.mu held. */
static aclError already_imported(const char *call, uint64_t shareable) {
  phys *ph = aipc__hmap_get(&g.imports, hk((void *)(uintptr_t)shareable));
  if (!ph) return ACL_SUCCESS;
  return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: shareable handle 0x%016llx is already imported in this process (handle %p); a shareable "
                    "handle and its imported handle are one to one within a process: use that handle, or "
                    "aclrtFreePhysical it before importing again",
                    call, (unsigned long long)shareable, handle_of(ph));
}

/* fabric: the aclrtMemFabricHandle's bytes (shareable is then its number), else NULL. */
static aclError import_common(const char *call, uint64_t shareable, const uint8_t *fabric, int32_t device,
                              aclrtDrvMemHandle *handle) {
  int fd = -1;
  uint64_t size = 0;
  int32_t exporter_device;
  /* The round trip runs without g.mu: the exporter may take its time. Its
   * answer comes first (an exporter gone, a process not whitelisted), then
   * the one-to-one rule below. */
  aclError rc = fabric ? aipc__ipc_open_fabric(call, fabric, &fd, &size, &exporter_device)
                       : aipc__ipc_open_physical(call, shareable, &fd, &size, &exporter_device);
  if (rc != ACL_SUCCESS) return rc;
  (void)exporter_device; /* CANN opens peer access to it by itself */
  if (size == 0 || size % SMALL_GRANULARITY != 0) {
    close(fd);
    return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: the exporter granted %" PRIu64 " bytes, not whole granules (refused)",
                      call, size);
  }
  pthread_mutex_lock(&g.mu);
  /* Under g.mu: of two threads importing one handle at once, one wins. */
  rc = already_imported(call, shareable);
  if (rc != ACL_SUCCESS)
    close(fd);
  else
    rc = phys_add(call, fd, size, SMALL_GRANULARITY, device, true, handle);
  if (rc == ACL_SUCCESS) {
    phys *ph = aipc__hmap_get(&g.handles, hk(*handle));
    ph->from = shareable;
    if (aipc__hmap_put(&g.imports, hk((void *)(uintptr_t)shareable), ph) != 0) {
      ph->handles = 0;
      phys_maybe_destroy(ph);
      rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory for bookkeeping", call);
    }
  }
  pthread_mutex_unlock(&g.mu);
  return rc;
}

aclError aipc__emu_mem_import_from_shareable_handle(uint64_t shareableHandle, int32_t deviceId,
                                                    aclrtDrvMemHandle *handle) {
  const char *call = AIPC_CALL_NAME(mem_import_from_shareable_handle);
  if (!handle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", call);
  uint32_t n = aipc__config_get()->devices;
  if (deviceId < 0 || (uint32_t)deviceId >= n)
    return aipc__fail(ACL_ERROR_RT_INVALID_DEVICEID, "%s: deviceId %d is out of range: %u device%s (0..%u)", call,
                      (int)deviceId, n, n == 1 ? "" : "s", n - 1);
  return import_common(call, shareableHandle, NULL, deviceId, handle);
}

aclError aipc__emu_mem_import_from_shareable_handle_v2(void *shareableHandle, aclrtMemSharedHandleType shareType,
                                                       uint64_t flags, aclrtDrvMemHandle *handle) {
  const char *call = AIPC_CALL_NAME(mem_import_from_shareable_handle_v2);
  if (!shareableHandle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: shareableHandle is NULL", call);
  if (!handle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", call);
  if (flags != 0)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: flags 0x%llx: must be 0", call, (unsigned long long)flags);
  aclError rc = share_type_check(call, shareType);
  if (rc != ACL_SUCCESS) return rc;
  if (shareType == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC) {
    uint8_t fh[AIPC_FABRIC_LEN];
    memcpy(fh, shareableHandle, sizeof fh);
    return import_common(call, fabric_number(fh), fh, aipc__device_current(), handle);
  }
  uint64_t h;
  memcpy(&h, shareableHandle, sizeof h);
  return import_common(call, h, NULL, aipc__device_current(), handle);
}

/* ---- finalize, fork ---------------------------------------------------------------- */

static void drop_resv(aipc__onode *n, void *unmap) {
  resv *rv = rv_of(n);
  if (unmap) {
    aipc__mem_remove_reserved(rv->base);
    munmap((void *)rv->base, rv->size);
  }
  free(rv);
}

/* Forgets everything; unmap: also unmaps, ends shares and gives capacity back. g.mu held. */
static void clear_all(bool unmap) {
  aipc__hkey k;
  void *v;
  for (size_t i = 0; aipc__hmap_next(&g.maps, &i, &k, &v);) {
    mapping *m = v;
    if (unmap) aipc__mem_remove_import(m->block);
    free(m);
  }
  aipc__hmap_clear(&g.maps);
  for (size_t i = 0; aipc__hmap_next(&g.handles, &i, &k, &v);) {
    phys *ph = v;
    if (unmap) {
      phys_unshare(ph);
      if (!ph->imported) aipc__mem_uncharge(ph->device, ph->size);
    }
    close(ph->fd);
    free(ph->fabric);
    free(ph);
  }
  aipc__hmap_clear(&g.handles);
  aipc__hmap_clear(&g.imports);
  aipc__omap_drain(&g.resvs, drop_resv, unmap ? (void *)1 : NULL); /* the mappings go with their reservations */
}

void aipc__vmm_finalize(void) {
  pthread_mutex_lock(&g.mu);
  clear_all(true);
  pthread_mutex_unlock(&g.mu);
}

void aipc__vmm_atfork_prepare(void) { pthread_mutex_lock(&g.mu); }
void aipc__vmm_atfork_parent(void) { pthread_mutex_unlock(&g.mu); }

void aipc__vmm_atfork_child(void) {
  g.mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  /* memory.c already forgot the MAPPED blocks; the mappings stay mapped here,
   * untracked, and the descriptors close: the child holds no physical memory. */
  clear_all(false);
}
