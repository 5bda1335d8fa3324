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
} aipc__mem_kind;

typedef struct aipc__block {
  uintptr_t base;
  size_t size;           /* page-rounded usable size */
  aipc__mem_kind kind;
  int32_t device;        /* DEVICE: its device; IMPORT: the exporter's device */
  int fd;                /* DEVICE: its memfd (base is offset 0); -1 for the others */
  uint32_t pins;         /* DEVICE: IPC exports not yet finished with it */
  bool user_freed;       /* DEVICE: aclrtFree called while pinned */
  void *ipc;             /* IMPORT: the IPC layer's import record */
  void *impl_;           /* memory.c's bookkeeping */
} aipc__block;

/* The memory lock guards every block and the map. Copies hold it shared. */
void aipc__mem_rdlock(void);
void aipc__mem_wrlock(void);
void aipc__mem_unlock(void);

/* Block containing p, or NULL. O(log n). Lock held. */
aipc__block *aipc__mem_find(const void *p);


/* Registers an IPC mapping [base, base+size) of the exporter's device.
 * Write lock held. Returns NULL when memory ran out. */
aipc__block *aipc__mem_add_import(void *base, size_t size, int32_t device, void *ipc);
/* Forgets an import block (the caller unmaps). Write lock held. */
void aipc__mem_remove_import(aipc__block *b);

/* An export keeps its DEVICE block alive: aclrtFree of a pinned block only
 * marks it user_freed (or fails under ASCEND_IPC_STRICT=1), and the last
 * unpin then releases it. Write lock held. */
void aipc__mem_pin(aipc__block *b);
void aipc__mem_unpin(aipc__block *b);

/* ---- stream.c ----------------------------------------------------------- */
/* (private to stream.c and the copy entry points) */

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
