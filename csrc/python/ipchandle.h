/*
 * IpcHandle: a picklable IPC key plus the view it describes.
 *
 * export() makes an exporter-side handle: it holds a reference to the
 * allocation (so the memory and its export stay alive while the handle
 * does) and its close() ends the export (aclrtIpcMemClose in the exporter).
 * Every other handle (unpickled, constructed from a key, or inherited into a
 * forked child) only knows the key and the view: open() imports the memory
 * in any process, and close() only marks the handle closed.
 *
 * An export always covers the whole allocation (page-aligned, as CANN
 * requires); the handle carries the view's byte offset from the allocation
 * base, its shape, byte strides and dtype.
 */
#ifndef ASCEND_IPC_PYTHON_IPCHANDLE_H_
#define ASCEND_IPC_PYTHON_IPCHANDLE_H_

#include "allocation.h"
#include "module.h"

typedef struct aipc_py_handle {
  PyObject_HEAD
  char key[AIPC_PY_KEY_LEN];
  aipc_py_allocation *alloc; /* exporter side only, else NULL */
  PyObject *keepalive;       /* exporter side: export(keepalive=...), kept until close(); or NULL */
  PyArray_Descr *dtype;
  PyObject *torch_dtype; /* str (e.g. "bfloat16") or NULL */
  int ndim;
  Py_ssize_t *shape;   /* ndim entries */
  Py_ssize_t *strides; /* bytes */
  Py_ssize_t offset;   /* bytes from the allocation base to element 0 */
  Py_ssize_t nbytes;
  Py_ssize_t size;     /* bytes the export covers */
  int32_t device;      /* the exporter's device */
  long pid;            /* the exporter's process id (0 if unknown) */
  int closed;
  Py_ssize_t busy;     /* open()s and allow()s at the runtime with the GIL released; close() waits for them */
  int has_event;       /* export(stream=...): open() waits for this IPC event first */
  aclrtIpcEventHandle event;
  PyObject *event_obj; /* exporter side: the Event itself, alive while the handle is */
  PyObject *hold;      /* an unpickled copy: (address, token) of the sender's hold on the memory,
                          released by the first open() (or by close or collection unopened) */
} aipc_py_handle;

int aipc_py_handle_init_type(PyObject *module, aipc_py_state *st);

/* _rebuild_handle(args, hold): unpickling (see reduce_impl). */
PyObject *aipc_py_handle_rebuild(PyObject *module, PyObject *args);
/* _reduce_for_one(obj): pickling of an IpcHandle or an Event for one receiver
 * (multiprocessing's ForkingPickler). */
PyObject *aipc_py_handle_reduce_for_one(PyObject *module, PyObject *obj);

/*
 * A handle with every field set; takes new references to dtype, torch_dtype
 * and alloc (each of the last two may be NULL; alloc only for the exporter's
 * handle). NULL with ValueError if the view does not fit in size bytes.
 */
PyObject *aipc_py_handle_build(aipc_py_state *st, const char *key, aipc_py_allocation *alloc,
                               PyArray_Descr *dtype, PyObject *torch_dtype, int ndim,
                               const Py_ssize_t *shape, const Py_ssize_t *strides, Py_ssize_t offset,
                               Py_ssize_t size, int32_t device, long pid);

/* 0 if obj (may be NULL) is None or a str; else -1 with TypeError. */
int aipc_py_check_torch_dtype(PyObject *obj);

/* A PyMem array of the pids in obj (a sequence of ints), *n its length; NULL
 * with TypeError/OverflowError. The caller frees it with PyMem_Free. */
int32_t *aipc_py_parse_pids(PyObject *obj, Py_ssize_t *n);

/* An aipc_py_released_fn: ends the export of key (a char[AIPC_PY_KEY_LEN])
 * with aclrtIpcMemClose, bypassing the import order of imports.h: only for
 * an export just made, which nobody can have imported yet. */
void aipc_py_close_key(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *key);

#endif
