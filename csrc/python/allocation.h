/*
 * _Allocation: one piece of device memory this process holds, shared by every
 * object that uses it.
 *
 * An allocation is OWNED (aclrtMalloc in this process; it may carry IPC
 * exports), IMPORTED (one aclrtIpcMemImportByKey: a mapping of its own, even
 * for a key this process already imported), or BORROWED (device memory
 * this process got from someone else, e.g. torch_npu's caching allocator,
 * wrapped by ascend_ipc.wrap(): it may carry exports, which are closed when
 * the allocation goes, but it is never freed here). DeviceArrays and
 * their views, exporter-side IpcHandles and DLPack capsules each hold a
 * reference; the memory is given back when the last one goes: exports closed
 * (aclrtIpcMemClose), then aclrtFree, or for an import aclrtIpcMemClose once
 * every older import of its key is closed too (imports.h: a close releases
 * the key's oldest mapping). So garbage collection never frees memory that
 * some object still uses, and the runtime itself keeps exported memory valid
 * for other processes that still hold it.
 *
 * An allocation records the process that created it. In a forked child it is
 * foreign: the child's runtime starts empty, so the child neither uses nor
 * releases its parent's memory.
 */
#ifndef ASCEND_IPC_PYTHON_ALLOCATION_H_
#define ASCEND_IPC_PYTHON_ALLOCATION_H_

#include "imports.h"
#include "module.h"

typedef enum aipc_py_alloc_kind {
  AIPC_PY_OWNED = 1,
  AIPC_PY_IMPORTED = 2,
  AIPC_PY_BORROWED = 3,
} aipc_py_alloc_kind;

/* "owned", "imported" or "borrowed". */
const char *aipc_py_alloc_kind_name(int kind);

/* ACCESS_LINK values; AIPC_PY_LINK_NONE means the attribute was not set. */
#define AIPC_PY_LINK_NONE (-1)

typedef struct aipc_py_export_rec {
  char key[AIPC_PY_KEY_LEN];
  uint64_t flags; /* ACL_RT_IPC_MEM_EXPORT_FLAG_* */
  int link;       /* AIPC_PY_LINK_NONE or ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_* */
} aipc_py_export_rec;

typedef struct aipc_py_allocation {
  PyObject_HEAD
  void *base;         /* page-aligned */
  size_t size;        /* page-rounded, > 0: what exports cover */
  int32_t device;     /* the memory's device (an import: the exporter's) */
  int kind;           /* aipc_py_alloc_kind */
  long pid;           /* the process that allocated or imported it */
  int released;       /* given back to the runtime (or forgotten after fork) */
  int registered;     /* in the module's registry */
  Py_ssize_t busy;    /* runtime calls on the memory now running with the GIL released
                         (aipc_py_allocation_call); changed only with the GIL held */
  aipc_py_import *import;           /* IMPORTED: its place in the key's order */
  PyObject *exporter;               /* IMPORTED from this process's own export: the exported
                                       allocation, kept until the import is closed */
  PyObject *owner;                  /* BORROWED: what keeps the memory valid (wrap(owner=...)), or NULL */
  PyObject *sync_event;             /* OWNED: the Event(ipc=True) of its stream-ordered exports
                                       (export(stream=...) records it again each time), or NULL */
  aipc_py_export_rec *exports;      /* OWNED: live exports of this process */
  size_t nexports;
  size_t exports_cap;
} aipc_py_allocation;

int aipc_py_allocation_init_type(PyObject *module, aipc_py_state *st);

/*
 * Wraps memory the caller just got from the runtime. On success the new
 * object owns it; on failure (NULL, exception set) the caller still does.
 */
aipc_py_allocation *aipc_py_allocation_create(aipc_py_state *st, int kind, void *base, size_t size,
                                              int32_t device, aipc_py_import *import);

static inline int aipc_py_allocation_foreign(const aipc_py_allocation *a) {
  return a->pid != aipc_py_pid();
}

/* 0 if the memory can be used in this process, else -1 with ValueError
 * naming `what` ("DeviceArray", "IpcHandle"). */
int aipc_py_allocation_check(aipc_py_allocation *a, const char *what);

/* Gives the memory back now: closes the exports, then frees; an import is
 * closed once it and every older import of its key are (imports.h). 0 on
 * success; -1 with *f filled (no Python exception) if the runtime refused,
 * in which case nothing was freed and the allocation stays usable (its
 * exports that did close are forgotten). `final` (deallocation: nobody can
 * retry): a refused import close is retried by the key's next close instead.
 * Failures releasing older imports of the key, whose objects are gone, are
 * ResourceWarnings. Releases the GIL. */
int aipc_py_allocation_release(aipc_py_state *st, aipc_py_allocation *a, aipc_py_failure *f, int final);

/* aipc_py_call on a's device, counted in a->busy (and b->busy: the other side
 * of a copy, or NULL) while the GIL is released, so that a close in another
 * thread waits for it (aipc_py_allocation_wait). The caller holds strong
 * references to both. */
int aipc_py_allocation_call(aipc_py_state *st, aipc_py_allocation *a, aipc_py_allocation *b,
                            aipc_py_released_fn body, void *arg);
/* Waits, with the GIL released, until no call counted in a->busy is running
 * while the caller's reference and those calls' are the only ones left (the
 * close of the last user frees the memory next). */
void aipc_py_allocation_wait(aipc_py_allocation *a);

/* Live export of this allocation with these flags and link, or NULL. */
aipc_py_export_rec *aipc_py_allocation_find_export(aipc_py_allocation *a, uint64_t flags, int link);
/* The export with this key, or NULL. */
aipc_py_export_rec *aipc_py_allocation_export_by_key(aipc_py_allocation *a, const char *key);
/* Records a new export; -1 with MemoryError. */
int aipc_py_allocation_add_export(aipc_py_allocation *a, const char *key, uint64_t flags, int link);
/* Forgets an export (after aclrtIpcMemClose succeeded). */
void aipc_py_allocation_remove_export(aipc_py_allocation *a, const char *key);

/* ---- registry: which allocation holds an address ------------------------ */

/* The usable owned or imported allocation of this process that contains
 * [lo, hi), or NULL. Borrowed reference. O(log n). BORROWED allocations are
 * never found here: they are not ascend_ipc memory. */
aipc_py_allocation *aipc_py_registry_find(aipc_py_registry *r, uintptr_t lo, uintptr_t hi);
/* The usable owned or borrowed allocation of this process that exports key
 * and holds addr, or NULL. Borrowed reference. */
aipc_py_allocation *aipc_py_registry_exporter(aipc_py_registry *r, const char *key, uintptr_t addr);
/* An owned or imported allocation overlapping [lo, hi), or NULL. */
aipc_py_allocation *aipc_py_registry_overlap(aipc_py_registry *r, uintptr_t lo, uintptr_t hi);
/* The usable BORROWED allocation with exactly this base, size and device, or NULL. */
aipc_py_allocation *aipc_py_registry_find_borrowed(aipc_py_registry *r, uintptr_t base, size_t size,
                                                   int32_t device);
void aipc_py_registry_free(aipc_py_registry *r);

#endif
