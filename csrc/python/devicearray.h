/*
 * DeviceArray: an n-dimensional view of device memory (owned or imported).
 *
 * A DeviceArray holds a reference to its _Allocation and describes a strided
 * view of it: dtype, shape, byte strides (numpy convention) and the byte
 * offset of element 0 from the allocation's base. Slicing makes views that
 * share the allocation. close() drops this object's reference; the memory is
 * given back when nothing uses it any more (other views, exporter-side
 * IpcHandles, DLPack consumers).
 */
#ifndef ASCEND_IPC_PYTHON_DEVICEARRAY_H_
#define ASCEND_IPC_PYTHON_DEVICEARRAY_H_

#include "allocation.h"
#include "module.h"

typedef struct aipc_py_array {
  PyObject_HEAD
  aipc_py_allocation *alloc; /* NULL once closed */
  PyObject *base;            /* the DeviceArray this one was sliced from, or NULL */
  PyArray_Descr *dtype;
  int ndim;
  Py_ssize_t *shape;   /* ndim entries (NULL when ndim == 0) */
  Py_ssize_t *strides; /* ndim entries, bytes */
  Py_ssize_t offset;   /* bytes from alloc->base to element 0 */
  Py_ssize_t nbytes;   /* itemsize * number of elements */
  void *data;          /* address of element 0 (kept for repr after close) */
  int32_t device;
  int imported;
  int kind;            /* the allocation's aipc_py_alloc_kind (kept for repr after close) */
} aipc_py_array;

int aipc_py_array_init_type(PyObject *module, aipc_py_state *st);

/*
 * A new DeviceArray over alloc (a new reference is taken). The view must lie
 * inside the allocation (ValueError otherwise). dtype is borrowed.
 */
PyObject *aipc_py_array_new(aipc_py_state *st, aipc_py_allocation *alloc, PyObject *base,
                            PyArray_Descr *dtype, int ndim, const Py_ssize_t *shape,
                            const Py_ssize_t *strides, Py_ssize_t offset);

/* The allocation of an open array usable in this process, or NULL with
 * ValueError ("... is closed", or inherited across fork). Borrowed. */
aipc_py_allocation *aipc_py_array_checked(aipc_py_array *self);

/*
 * Byte range [*lo, *hi) that a view touches, relative to element 0; both 0
 * for an empty view. -1 with ValueError if the numbers overflow.
 */
int aipc_py_extent(int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides, Py_ssize_t itemsize,
                   Py_ssize_t *lo, Py_ssize_t *hi);

/* 1 if the view is C-contiguous (numpy's rule: dimensions of size 1 ignored). */
int aipc_py_c_contiguous(int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                         Py_ssize_t itemsize);

/* Parses a shape: an int or a sequence of ints >= 0. -1 with TypeError/ValueError. */
int aipc_py_parse_shape(PyObject *obj, const char *what, int *ndim, Py_ssize_t *dims);

/* Parses strides in bytes: a sequence of ndim ints. */
int aipc_py_parse_strides(PyObject *obj, int ndim, Py_ssize_t *strides);

/* C-contiguous byte strides; the element count in *count. -1 with ValueError on overflow. */
int aipc_py_c_strides(int ndim, const Py_ssize_t *shape, Py_ssize_t itemsize, Py_ssize_t *strides,
                      Py_ssize_t *count);

/* A tuple of n Py_ssize_t. */
PyObject *aipc_py_tuple(int n, const Py_ssize_t *v);

/* DLPack (dlpack.c). */
PyObject *aipc_py_array_dlpack(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *aipc_py_array_dlpack_device(PyObject *self, PyObject *unused);

#endif
