/*
 * Internal interface between the parts of the emulated runtime. The layers
 * and the lock order are written once, in runtime.c: each file calls only
 * the layers below it, and takes locks in that order.
 *
 * The memory lock is memory.c's alone: each aipc__mem_* operation below
 * takes it inside and returns with it released, so a caller may hold its own
 * locks but never the memory lock. Nothing calls back from memory.c into the
 * IPC layer or the streams.
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

/* How aclrtMalloc makes a block's pages (ASCEND_IPC_HUGE_PAGES; design-runtime.md, Device memory). */
enum {
  AIPC_PAGES_AT_TOUCH = 0, /* normal pages, each made by the kernel at its first touch */
  AIPC_PAGES_POOL = 1,     /* huge-policy blocks from the hugetlb pool where it has them, else as below */
  AIPC_PAGES_NOW = 2,      /* the default: made at aclrtMalloc, as a device commits memory, where the host
                              can spare them; huge-policy blocks above 1 MiB in transparent 2 MiB pages */
};

typedef struct aipc__config {
  uint32_t devices;    /* ASCEND_IPC_EMU_DEVICES, default 8 */
  uint64_t memory;     /* ASCEND_IPC_EMU_MEMORY bytes per device, default 64 GiB */
  bool strict;         /* ASCEND_IPC_STRICT=1 */
  uint32_t sdid;       /* ASCEND_IPC_SDID; unset (sdid_set false): derived per server (ipc/supernode.h) */
  bool sdid_set;
  char supernode_dir[96]; /* ASCEND_IPC_SUPERNODE_DIR, default /tmp/ascend_ipc-supernode.<uid>; "" if too long */
  int timeout_ms;      /* ASCEND_IPC_TIMEOUT_MS, default 10000: every blocking IPC wait */
  uint32_t poll_us;    /* ASCEND_IPC_POLL_US, default 100: the longest poll before an IPC wait blocks */
  int pages;           /* ASCEND_IPC_HUGE_PAGES: how device memory's pages are made (AIPC_PAGES_*) */
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

/*
 * The memory lock (memory.c's own) guards every block, the map and the
 * accounting; copies and memsets hold it shared across the bytes they move.
 * Every operation here takes it itself ("takes the lock"). A block pointer
 * handed out is a handle for its owner's later calls (an export's pin, an
 * import's or vmm.c mapping's registration): its fields are memory.c's, read
 * only through these calls. Anyone else gets a copy (aipc__mem_lookup).
 */

/* Copies the fields of the block containing p into *out (false, *out
 * untouched: none). A snapshot: the block may change or go right after.
 * O(log n). Takes the lock shared. */
bool aipc__mem_lookup(const void *p, aipc__block *out);

/* Registers a mapping [base, base+size) that another part owns and maps
 * itself: kind IMPORT or SYNC_IMPORT (the IPC layer; device: the
 * exporter's), or MAPPED. Returns its handle, or NULL when it overlaps a
 * known block (checked and inserted under one hold of the lock), base is
 * NULL, size is 0, or memory ran out. Takes the lock exclusive. */
aipc__block *aipc__mem_add_import(void *base, size_t size, int32_t device, aipc__mem_kind kind, void *ipc);
/* Forgets an import or MAPPED block (NULL: nothing); the caller unmaps it
 * afterwards. Once this returns no copy runs on the range and none can
 * start. Takes the lock exclusive. */
void aipc__mem_remove_import(aipc__block *b);

/* A zeroed state page (AIPC_PAGE_SIZE bytes, kind SYNC) for an event or
 * notify of device, shareable like an allocation. Takes the lock exclusive. */
aclError aipc__mem_sync_alloc(const char *call, int32_t device, void **base);
/* Releases it (at the last unpin if exported). Takes the lock exclusive. */
void aipc__mem_sync_free(void *base);
/* Registers vmm.c's reservation [base, base+size), so that copies into its
 * unmapped parts are refused (false: out of memory), or forgets it (vmm.c
 * unmaps it afterwards). Both take the lock exclusive. */
bool aipc__mem_add_reserved(uintptr_t base, size_t size);
void aipc__mem_remove_reserved(uintptr_t base);
/* vmm.c's mappings: maps fd (from offset 0) over [base, base+size) of a
 * reservation, readable and writable or (!access) not at all, and registers
 * it as a MAPPED block of device owned by owner (vmm.c's mapping), *out its
 * handle. The overlap check, the map and the insert are one hold of the
 * lock. Returns 0; -1 when a known block overlaps (nothing mapped); or the
 * errno of a failure (the range is the reservation's again). Takes the lock
 * exclusive. */
int aipc__mem_add_mapping(void *base, size_t size, int fd, bool access, int32_t device, void *owner,
                          aipc__block **out);
/* Forgets a MAPPED block and puts the reservation back over its range, both
 * under one hold of the lock, so no copy runs on it meanwhile. Takes the
 * lock exclusive. */
void aipc__mem_remove_mapping(aipc__block *b);
/* Opens a MAPPED block made without access for reads and writes (nothing
 * to do if open): 0, or the errno of mprotect. Takes the lock exclusive. */
int aipc__mem_open_mapping(aipc__block *b);
/* Counts len bytes of physical memory against device's capacity (false,
 * nothing counted, when they do not fit), or gives them back. Both take the
 * lock exclusive. */
bool aipc__mem_charge(int32_t device, uint64_t len);
void aipc__mem_uncharge(int32_t device, uint64_t len);

/* An export keeps its DEVICE (or SYNC) block alive: aclrtFree of a pinned
 * block only marks it user_freed (or fails under ASCEND_IPC_STRICT=1), and
 * the last unpin then releases it. */
typedef struct aipc__mem_pinned {
  aipc__block *block; /* the export's handle, for aipc__mem_unpin and aipc__mem_pinned_freed */
  int32_t device;     /* the block's */
  uint64_t offset;    /* of devPtr in the block, and in its memfd */
} aipc__mem_pinned;
/* Finds the block holding [devPtr, devPtr+size), checks it is a live block
 * of kind (DEVICE or SYNC) that the range fits in, and pins it: all under
 * one hold of the lock, so no free comes between. A refusal is recorded
 * (aipc__fail) with call's name, nothing pinned. Takes the lock exclusive. */
aclError aipc__mem_export_pin(const char *call, const void *devPtr, size_t size, aipc__mem_kind kind,
                              aipc__mem_pinned *out);
/* Ends one pin; the last one of a freed block releases it. Takes the lock
 * exclusive. */
void aipc__mem_unpin(aipc__block *b);
/* Whether the owner freed pinned block b (then it is gone for new imports);
 * memfd, unless NULL, gets its memfd, open while the pin lasts. Takes the
 * lock shared. */
bool aipc__mem_pinned_freed(const aipc__block *b, int *memfd);

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
 * for aclrtSynchronizeStream. The cancel flag also turns true for
 * aclrtStreamAbort and aclrtStreamStop (then only while that task runs).
 *
 * drop (optional, NULL for most) is called before free for a task the
 * stream will never run (abort, ACL_STOP_ON_FAILURE, destroy by force),
 * with the reason: a task others wait on (an event record) completes them
 * with it instead of leaving them waiting.
 */
typedef struct aipc__task aipc__task;
struct aipc__task {
  aipc__task *next; /* stream.c's */
  aclError (*run)(aipc__task *t, aclError failed, const _Atomic(bool) *cancel);
  void (*free)(aipc__task *t);
  void (*drop)(aipc__task *t, aclError why);
};
#define AIPC_TASK_POLL_MS 50

/* Queues t on stream h (NULL: the default stream). Takes t in every case:
 * on failure it is freed unrun. A stream that records (a model runtime
 * instance being captured or built, model.c) refuses t: its kind cannot be
 * recorded. */
aclError aipc__stream_submit(const char *call, aclrtStream h, aipc__task *t);
/* The same, writing the task's id on its stream (aclrtGetThreadLastTaskId)
 * to *id before the task can run. */
aclError aipc__stream_submit_id(const char *call, aclrtStream h, aipc__task *t, uint32_t *id);

/*
 * Recording (model.c's capture and build). A task kind that can be
 * recorded submits through aipc__stream_submit_recordable with its clone
 * function: on a recording stream t is then kept as a template, never run,
 * and each replay asks clone for a fresh task that does the same work as if
 * the original call were made at that moment (*out NULL: nothing to do
 * then). Kinds submitted through aipc__stream_submit are refused by a
 * recording stream with a message naming the call.
 */
typedef aclError (*aipc__task_clone)(const aipc__task *t, const char *call, aipc__task **out);
aclError aipc__stream_submit_recordable(const char *call, aclrtStream h, aipc__task *t, aipc__task_clone clone);
/* As aipc__stream_submit_recordable, but only for a recording stream: t is
 * a marker of the recorder's own (a label, a switch); any other stream
 * refuses it with ACL_ERROR_RT_STREAM_MODEL. */
aclError aipc__stream_submit_record_only(const char *call, aclrtStream h, aipc__task *t);

/* The recorder a stream hands its tasks to. record is called with the
 * stream's queue lock held (lock order: streams -> model), takes t in every
 * case, and returns its decision (an error recorded with aipc__fail). */
typedef struct aipc__recorder aipc__recorder;
struct aipc__recorder {
  aclError (*record)(aipc__recorder *r, const char *call, aipc__task *t, aipc__task_clone clone);
  /* Called once when a stream is freed with r still set (destroyed while
   * recording): the recorder's owner may then let go of r. Not called in a
   * fork child, nor for a recorder swapped out. */
  void (*release)(aipc__recorder *r);
};
/* Replaces stream h's recorder if it is expect (NULL: none): false, nothing
 * changed, when it is not; an error when h is not a live stream (the
 * default stream, NULL, never records). Once it returns, no call of the old
 * recorder is running. */
aclError aipc__stream_swap_recorder(const char *call, aclrtStream h, aipc__recorder *expect, aipc__recorder *rec,
                                    bool *swapped);
/* Whether stream h records now (a snapshot), for submitters whose submit
 * has effects of its own to leave out when recording. */
bool aipc__stream_recording(aclrtStream h);
/* The device stream h was created on (NULL: the calling thread's current device). */
aclError aipc__stream_device(const char *call, aclrtStream h, int32_t *device);
/* Runs every registered stream state callback (aclrtRegStreamStateCallback)
 * for stream h on the runtime's callback thread, and returns when they have
 * run (at once when called from a callback). Called with no lock held. */
void aipc__stream_state_notify(aclrtStream h, aclrtStreamState state);
/* Stream h's id (NULL: the default stream's), unique among this process's
 * streams since it started. */
aclError aipc__stream_id(const char *call, aclrtStream h, uint32_t *id);
/* The id of the last task the calling thread queued on a stream it created
 * (false: none yet). */
bool aipc__stream_last_task(uint32_t *id);
/* Marks the calling thread as doing the work of the stream of id stream_id
 * (a callback its worker waits for) until aipc__stream_leave(returned
 * value): meanwhile a synchronize or destroy of that stream from this thread
 * fails instead of waiting for itself. A stream's worker is so marked. */
typedef struct aipc__stream_mark {
  bool in;
  uint32_t id;
} aipc__stream_mark;
aipc__stream_mark aipc__stream_enter(uint32_t stream_id);
void aipc__stream_leave(aipc__stream_mark prev);
/* Whether the calling thread is doing some stream's work (see above). */
bool aipc__stream_in_task(void);

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
 * the one pthread_atfork registration in runtime.c, which orders the parts
 * (the streams' prepare just before memory's, their parent just after). Each
 * hook is about its own part only: memory's takes and releases the memory
 * lock. */
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

/* The table's entries that are not CANN calls (see core/provider.h). */
aclError aipc__emu_ipc_get_attr(const char *key, aclrtIpcMemAttrType type, uint64_t *attr);
void aipc__emu_ipc_expect_request(void);
aclError aipc__emu_mem_physical_size(aclrtDrvMemHandle handle, size_t *size);

#endif
