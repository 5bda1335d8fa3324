/*
 * Internal interface between the parts of the emulated runtime.
 *
 *   api (csrc/api) -> provider table (core) -> device.c memory.c stream.c (runtime)
 *                                           -> ipc/ (the IPC layer, uses memory.c)
 *                                           -> os/ (the platform calls, under all of them)
 *
 * Lock order, outermost first: the IPC layer's locks (the exporter's, the
 * importer's) -> memory lock. Nothing calls back from memory.c into the
 * IPC layer.
 */
#ifndef ASCEND_IPC_EMU_EMU_H_
#define ASCEND_IPC_EMU_EMU_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acl/acl.h"
#include "core/error.h"

#define AIPC_PAGE_SIZE ((size_t)4096)
#define AIPC_IS_PAGE_ALIGNED(x) ((((uintptr_t)(x)) & (AIPC_PAGE_SIZE - 1)) == 0)

/* ---- config.c: environment, read once --------------------------------- */

typedef struct aipc__config {
  uint32_t devices;    /* ASCEND_IPC_EMU_DEVICES, default 8 */
  uint64_t memory;     /* ASCEND_IPC_EMU_MEMORY bytes per device, default 64 GiB */
  bool strict;         /* ASCEND_IPC_STRICT=1 */
  uint32_t sdid;       /* ASCEND_IPC_SDID, default 0 */
  int timeout_ms;      /* ASCEND_IPC_TIMEOUT_MS, default 10000: every blocking IPC wait */
  uint32_t poll_us;    /* ASCEND_IPC_POLL_US, default 100: the longest poll before an IPC wait blocks */
} aipc__config;

const aipc__config *aipc__config_get(void);

/* ---- device.c ----------------------------------------------------------- */

/* Calling thread's current device (0 until aclrtSetDevice). */
int32_t aipc__device_current(void);

/* ---- memory.c: every address range the runtime knows in this process ---- */

typedef enum aipc__mem_kind {
  AIPC_MEM_DEVICE = 1, /* aclrtMalloc: a sealed memfd of its own, mapped in a device's range */
  AIPC_MEM_HOST = 2,   /* aclrtMallocHost */
  AIPC_MEM_IMPORT = 3, /* an imported mapping, owned by the IPC layer */
  AIPC_MEM_SYNC = 4,   /* an event's or notify's state page: a sealed memfd of its own, not memory to any call */
  AIPC_MEM_SYNC_IMPORT = 5, /* another process's SYNC page, mapped by the IPC layer */
  AIPC_MEM_MAPPED = 6, /* a physical allocation mapped in a reservation (aclrtMapMem), owned by vmm.c */
} aipc__mem_kind;

typedef struct aipc__block {
  uintptr_t base;
  size_t size;           /* page-rounded usable size */
  aipc__mem_kind kind;
  int32_t device;        /* DEVICE, SYNC: its device; IMPORT, SYNC_IMPORT: the exporter's device */
  int fd;                /* DEVICE, SYNC: its memfd (base is offset 0); -1 for the others */
  uint32_t pins;         /* DEVICE, SYNC: IPC exports not yet finished with it */
  bool user_freed;       /* DEVICE, SYNC: freed by its owner while pinned */
  bool no_access;        /* MAPPED: aclrtMemMapNoAccess, no aclrtMemSetAccess yet: no call may touch it */
  void *ipc;             /* IMPORT, SYNC_IMPORT: the IPC layer's import record; MAPPED: vmm.c's mapping */
  void *impl_;           /* memory.c's bookkeeping */
} aipc__block;

/* The memory lock guards every block and the map. Copies hold it shared. */
void aipc__mem_rdlock(void);
void aipc__mem_wrlock(void);
void aipc__mem_unlock(void);

/* Block containing p, or NULL. O(log n). Lock held. */
aipc__block *aipc__mem_find(const void *p);


/* Registers a mapping [base, base+size) that another part owns: kind IMPORT
 * or SYNC_IMPORT (the IPC layer; device: the exporter's), or MAPPED
 * (vmm.c). Write lock held. Returns NULL when it overlaps a known block or
 * memory ran out. */
aipc__block *aipc__mem_add_import(void *base, size_t size, int32_t device, aipc__mem_kind kind, void *ipc);

/* A zeroed state page (AIPC_PAGE_SIZE bytes, kind SYNC) for an event or
 * notify of device, shareable like an allocation. Lock not held. */
aclError aipc__mem_sync_alloc(const char *call, int32_t device, void **base);
/* Releases it (at the last unpin if exported). Lock not held. */
void aipc__mem_sync_free(void *base);
/* Registers vmm.c's reservation [base, base+size), so that copies into its
 * unmapped parts are refused (false: out of memory), or forgets it. Write lock held. */
bool aipc__mem_add_reserved(uintptr_t base, size_t size);
void aipc__mem_remove_reserved(uintptr_t base);
/* Whether any known block overlaps [base, base+size). Lock held. */
bool aipc__mem_overlaps(uintptr_t base, size_t size);
/* Counts len bytes of physical memory against device's capacity (false,
 * nothing counted, when they do not fit), or gives them back. Lock not held. */
bool aipc__mem_charge(int32_t device, uint64_t len);
void aipc__mem_uncharge(int32_t device, uint64_t len);
/* Forgets an import or MAPPED block (the caller unmaps). Write lock held. */
void aipc__mem_remove_import(aipc__block *b);

/* An export keeps its DEVICE block alive: aclrtFree of a pinned block only
 * marks it user_freed (or fails under ASCEND_IPC_STRICT=1), and the last
 * unpin then releases it. Write lock held. */
void aipc__mem_pin(aipc__block *b);
void aipc__mem_unpin(aipc__block *b);

/* ---- stream.c: work queued on streams ------------------------------------ */

/*
 * A unit of stream work. The submitter allocates it (the record first in
 * a larger struct) and hands it over; stream.c runs it on the stream's
 * worker, in order, and then calls free, or calls free without running it
 * when the stream drops its queue (aclrtDestroyStreamForce).
 *
 * run gets the stream's first unreported error (ACL_SUCCESS if none) and
 * a flag that turns true when the stream is destroyed by force: a task that
 * blocks checks it at least every AIPC_TASK_POLL_MS. It returns
 * ACL_SUCCESS, or an error recorded with aipc__fail, which the stream keeps
 * for aclrtSynchronizeStream.
 */
typedef struct aipc__task aipc__task;
struct aipc__task {
  aipc__task *next; /* stream.c's */
  aclError (*run)(aipc__task *t, aclError failed, const _Atomic(bool) *cancel);
  void (*free)(aipc__task *t);
};
#define AIPC_TASK_POLL_MS 50

/* Queues t on stream h (NULL: the default stream). Takes t in every case:
 * on failure it is freed unrun. */
aclError aipc__stream_submit(const char *call, aclrtStream h, aipc__task *t);
/* The device stream h was created on (NULL: the calling thread's current device). */
aclError aipc__stream_device(const char *call, aclrtStream h, int32_t *device);

/* ---- vmm.c: reservations, physical allocations, their mappings ----------- */

/* aclFinalize (after the streams, before the IPC layer): unmaps, releases
 * and frees everything. Fork (lock order: vmm -> IPC layer -> memory): the
 * child forgets it all, its mappings staying mapped, untracked. */
void aipc__vmm_finalize(void);
void aipc__vmm_atfork_prepare(void);
void aipc__vmm_atfork_parent(void);
void aipc__vmm_atfork_child(void);

/* ---- fork --------------------------------------------------------------- */

/* Each part resets itself in a forked child: the child starts with no
 * blocks, streams, exports, imports or connections of its own. The parent's
 * mappings stay mapped in the child but are no longer tracked. Called from
 * the one pthread_atfork registration in runtime.c, in this order. */
void aipc__ipc_atfork_prepare(void);
void aipc__mem_atfork_prepare(void);
void aipc__mem_atfork_parent(void);
void aipc__ipc_atfork_parent(void);
void aipc__mem_atfork_child(void);
void aipc__stream_atfork_child(void);
void aipc__ipc_atfork_child(void);

/* ---- aclFinalize ---------------------------------------------------------- */

/* The IPC layer's part of aclFinalize: ends every export and import of this
 * process (unpinning and aipc__mem_remove_import as usual), stops its
 * threads, and leaves it as before the first IPC call. Called with no lock
 * held, after every stream has drained and before memory.c frees what is
 * left. */
void aipc__ipc_finalize(void);

/* ---- the emulator's entry points, as listed in the provider table ------ */

#include "core/calls.h"

/* aipc__emu_<field> for every call of core/calls.h. */
#define AIPC_EMU_DECLARE_(ret, symbol, field, params, args, since, need) ret aipc__emu_##field params;
AIPC_CALLS(AIPC_EMU_DECLARE_)
#undef AIPC_EMU_DECLARE_

/* The table's one entry that is not a CANN call (see core/provider.h). */
aclError aipc__emu_ipc_get_attr(const char *key, aclrtIpcMemAttrType type, uint64_t *attr);

#endif
