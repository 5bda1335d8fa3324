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
} aipc_py_handle;

int aipc_py_handle_init_type(PyObject *module, aipc_py_state *st);

/* export(array, pids=None, link=None, *, torch_dtype=None, keepalive=None) -> IpcHandle */
PyObject *aipc_py_export(PyObject *module, PyObject *args, PyObject *kwargs);

#endif
