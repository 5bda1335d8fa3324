/* DeviceArray: an n-dimensional view of device memory. */
#include "devicearray.h"
#include "stream.h"

#include <string.h>
#include <sys/mman.h>

_Static_assert(sizeof(npy_intp) == sizeof(Py_ssize_t), "npy_intp and Py_ssize_t differ");

/* ---- shape arithmetic ----------------------------------------------------- */

PyObject *aipc_py_tuple(int n, const Py_ssize_t *v) {
  PyObject *t = PyTuple_New(n);
  if (t == NULL) return NULL;
  for (int i = 0; i < n; i++) {
    PyObject *x = PyLong_FromSsize_t(v[i]);
    if (x == NULL) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

static int too_big(void) {
  PyErr_SetString(PyExc_ValueError, "array is too big: its size in bytes overflows");
  return -1;
}

int aipc_py_extent(int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides, Py_ssize_t itemsize,
                   Py_ssize_t *lo, Py_ssize_t *hi) {
  *lo = *hi = 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == 0) return 0;
  }
  Py_ssize_t l = 0, h = itemsize;
  for (int i = 0; i < ndim; i++) {
    Py_ssize_t span;
    if (__builtin_mul_overflow(shape[i] - 1, strides[i], &span)) return too_big();
    if (span < 0) {
      if (__builtin_add_overflow(l, span, &l)) return too_big();
    } else {
      if (__builtin_add_overflow(h, span, &h)) return too_big();
    }
  }
  *lo = l;
  *hi = h;
  return 0;
}

int aipc_py_c_contiguous(int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                         Py_ssize_t itemsize) {
  Py_ssize_t expect = itemsize;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == 0) return 1;
  }
  for (int i = ndim - 1; i >= 0; i--) {
    if (shape[i] == 1) continue;
    if (strides[i] != expect) return 0;
    expect *= shape[i];
  }
  return 1;
}

int aipc_py_c_strides(int ndim, const Py_ssize_t *shape, Py_ssize_t itemsize, Py_ssize_t *strides,
                      Py_ssize_t *count) {
  Py_ssize_t n = 1, s = itemsize;
  for (int i = 0; i < ndim; i++) {
    if (__builtin_mul_overflow(n, shape[i], &n)) return too_big();
  }
  if (__builtin_mul_overflow(n, itemsize, &s)) return too_big();
  if (s > PY_SSIZE_T_MAX - (Py_ssize_t)AIPC_PY_PAGE) return too_big();
  s = itemsize;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = s;
    /* Cannot overflow: the product of all dimensions times itemsize fits,
     * unless a later dimension is 0, where strides stop mattering. */
    if (shape[i] > 0 && __builtin_mul_overflow(s, shape[i], &s)) s = 0;
  }
  *count = n;
  return 0;
}

static int index_to_ssize(PyObject *item, const char *what, Py_ssize_t *out) {
  if (!PyIndex_Check(item) || PyArray_Check(item)) {
    PyErr_Format(PyExc_TypeError, "%s must be an int or a sequence of ints, not %.100s", what,
                 Py_TYPE(item)->tp_name);
    return -1;
  }
  Py_ssize_t v = PyNumber_AsSsize_t(item, PyExc_OverflowError);
  if (v == -1 && PyErr_Occurred()) return -1;
  *out = v;
  return 0;
}

int aipc_py_parse_shape(PyObject *obj, const char *what, int *ndim, Py_ssize_t *dims) {
  if (PyIndex_Check(obj) && !PyArray_Check(obj)) {
    if (index_to_ssize(obj, what, &dims[0]) < 0) return -1;
    *ndim = 1;
  } else {
    if (PyUnicode_Check(obj) || PyBytes_Check(obj) || !PySequence_Check(obj)) {
      PyErr_Format(PyExc_TypeError, "%s must be an int or a sequence of ints, not %.100s", what,
                   Py_TYPE(obj)->tp_name);
      return -1;
    }
    PyObject *seq = PySequence_Fast(obj, "shape must be a sequence");
    if (seq == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > AIPC_PY_MAX_NDIM) {
      PyErr_Format(PyExc_ValueError, "%s has %zd dimensions; at most %d are supported", what, n,
                   AIPC_PY_MAX_NDIM);
      Py_DECREF(seq);
      return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      if (index_to_ssize(PySequence_Fast_GET_ITEM(seq, i), what, &dims[i]) < 0) {
        Py_DECREF(seq);
        return -1;
      }
    }
    Py_DECREF(seq);
    *ndim = (int)n;
  }
  for (int i = 0; i < *ndim; i++) {
    if (dims[i] < 0) {
      PyErr_Format(PyExc_ValueError, "%s has a negative dimension (%zd)", what, dims[i]);
      return -1;
    }
  }
  return 0;
}

int aipc_py_parse_strides(PyObject *obj, int ndim, Py_ssize_t *strides) {
  if (PyUnicode_Check(obj) || PyBytes_Check(obj) || !PySequence_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "strides must be a sequence of ints, not %.100s", Py_TYPE(obj)->tp_name);
    return -1;
  }
  PyObject *seq = PySequence_Fast(obj, "strides must be a sequence");
  if (seq == NULL) return -1;
  if (PySequence_Fast_GET_SIZE(seq) != ndim) {
    PyErr_Format(PyExc_ValueError, "strides has %zd entries but shape has %d", PySequence_Fast_GET_SIZE(seq),
                 ndim);
    Py_DECREF(seq);
    return -1;
  }
  for (int i = 0; i < ndim; i++) {
    if (index_to_ssize(PySequence_Fast_GET_ITEM(seq, i), "strides", &strides[i]) < 0) {
      Py_DECREF(seq);
      return -1;
    }
  }
  Py_DECREF(seq);
  return 0;
}

/* ---- construction ------------------------------------------------------- */

PyObject *aipc_py_array_new(aipc_py_state *st, aipc_py_allocation *alloc, PyObject *base,
                            PyArray_Descr *dtype, int ndim, const Py_ssize_t *shape,
                            const Py_ssize_t *strides, Py_ssize_t offset) {
  Py_ssize_t itemsize = PyDataType_ELSIZE(dtype);
  Py_ssize_t lo, hi, count = 1, nbytes;
  if (ndim < 0 || ndim > AIPC_PY_MAX_NDIM) {
    PyErr_Format(PyExc_ValueError, "%d dimensions; at most %d are supported", ndim, AIPC_PY_MAX_NDIM);
    return NULL;
  }
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) {
      PyErr_SetString(PyExc_ValueError, "negative dimension");
      return NULL;
    }
    if (__builtin_mul_overflow(count, shape[i], &count)) return too_big(), NULL;
  }
  if (__builtin_mul_overflow(count, itemsize, &nbytes)) return too_big(), NULL;
  if (aipc_py_extent(ndim, shape, strides, itemsize, &lo, &hi) < 0) return NULL;
  Py_ssize_t size = (Py_ssize_t)alloc->size;
  int inside = count > 0 ? (offset >= -lo && offset <= size - hi) : (offset >= 0 && offset <= size);
  if (!inside) {
    PyErr_Format(PyExc_ValueError,
                 "the view (offset %zd, bytes [%zd, %zd) around it) lies outside its device allocation "
                 "of %zd bytes",
                 offset, lo, hi, size);
    return NULL;
  }

  aipc_py_array *self = (aipc_py_array *)st->array_type->tp_alloc(st->array_type, 0);
  if (self == NULL) return NULL;
  if (ndim > 0) {
    self->shape = PyMem_Malloc(2 * (size_t)ndim * sizeof(Py_ssize_t));
    if (self->shape == NULL) {
      Py_DECREF(self);
      return PyErr_NoMemory();
    }
    self->strides = self->shape + ndim;
    memcpy(self->shape, shape, (size_t)ndim * sizeof(Py_ssize_t));
    memcpy(self->strides, strides, (size_t)ndim * sizeof(Py_ssize_t));
  }
  self->ndim = ndim;
  Py_INCREF(alloc);
  self->alloc = alloc;
  Py_XINCREF(base);
  self->base = base;
  Py_INCREF(dtype);
  self->dtype = dtype;
  self->offset = offset;
  self->nbytes = nbytes;
  self->data = (char *)alloc->base + offset;
  self->device = alloc->device;
  self->imported = alloc->kind == AIPC_PY_IMPORTED;
  self->kind = alloc->kind;
  return (PyObject *)self;
}

aipc_py_allocation *aipc_py_array_checked(aipc_py_array *self) {
  if (self->alloc == NULL) {
    PyErr_SetString(PyExc_ValueError, "DeviceArray is closed");
    return NULL;
  }
  if (aipc_py_allocation_check(self->alloc, "DeviceArray") < 0) return NULL;
  return self->alloc;
}

/* ---- methods -------------------------------------------------------------- */

#define SELF ((aipc_py_array *)op)

typedef struct memcpy_call {
  void *dst;
  const void *src;
  size_t count;
  aclrtMemcpyKind kind;
} memcpy_call;

static void copy_bytes(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  memcpy_call *c = arg;
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(memcpy), p->memcpy(c->dst, c->count, c->src, c->count, c->kind));
}

static PyObject *array_numpy(PyObject *op, PyObject *unused) {
  aipc_py_state *st = aipc_py_state_of(Py_TYPE(op));
  aipc_py_allocation *alloc = aipc_py_array_checked(SELF);
  if (alloc == NULL) return NULL;
  PyObject *result = NULL, *staged = NULL;
  char *tmp = NULL;
  Py_ssize_t itemsize = PyDataType_ELSIZE(SELF->dtype), lo, hi;

  /* Ours until the end: allocating (a GC pass, a finalizer) may run code that
   * closes this array. */
  Py_INCREF(alloc);
  Py_INCREF(SELF->dtype);
  result = PyArray_Empty(SELF->ndim, (npy_intp *)SELF->shape, SELF->dtype, 0);
  if (result == NULL) goto fail;
  if (SELF->nbytes == 0) goto done;
  if (aipc_py_extent(SELF->ndim, SELF->shape, SELF->strides, itemsize, &lo, &hi) < 0) goto fail;

  int contiguous = aipc_py_c_contiguous(SELF->ndim, SELF->shape, SELF->strides, itemsize);
  size_t count = contiguous ? (size_t)SELF->nbytes : (size_t)(hi - lo);
  const char *src = (const char *)alloc->base + SELF->offset + (contiguous ? 0 : lo);
  void *dst;
  if (contiguous) {
    dst = PyArray_DATA((PyArrayObject *)result);
  } else {
    /* One copy of the bytes the view spans, then numpy gathers them. */
    tmp = PyMem_RawMalloc(count);
    if (tmp == NULL) {
      PyErr_NoMemory();
      goto fail;
    }
    dst = tmp;
  }

  memcpy_call c = {dst, src, count, ACL_MEMCPY_DEVICE_TO_HOST};
  if (aipc_py_allocation_call(st, alloc, NULL, copy_bytes, &c) < 0) goto fail;

  if (!contiguous) {
    Py_INCREF(SELF->dtype);
    staged = PyArray_NewFromDescr(&PyArray_Type, SELF->dtype, SELF->ndim, (npy_intp *)SELF->shape,
                                  (npy_intp *)SELF->strides, tmp - lo, 0, NULL);
    if (staged == NULL) goto fail;
    if (PyArray_CopyInto((PyArrayObject *)result, (PyArrayObject *)staged) < 0) goto fail;
  }
  goto done;
fail:
  Py_CLEAR(result);
done:
  Py_XDECREF(staged);
  PyMem_RawFree(tmp);
  Py_DECREF(alloc);
  return result;
}

typedef struct memcpy_async_call {
  memcpy_call c;
  aclrtStream stream;
} memcpy_async_call;

static void copy_bytes_async(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  memcpy_async_call *a = arg;
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(memcpy_async),
                     p->memcpy_async(a->c.dst, a->c.count, a->c.src, a->c.count, a->c.kind, a->stream));
}

/* Copies c on stream_obj (None: now, aclrtMemcpy), keeping keep alive until
 * the stream's synchronize(). 0 or -1. */
static int copy_on(aipc_py_state *st, aipc_py_allocation *alloc, aipc_py_allocation *from, memcpy_call *c,
                   PyObject *stream_obj, PyObject *keep) {
  if (stream_obj == Py_None) return aipc_py_allocation_call(st, alloc, from, copy_bytes, c);
  memcpy_async_call a = {*c, NULL};
  if (aipc_py_stream_arg(st, stream_obj, &a.stream) < 0) return -1;
  if (aipc_py_stream_keep(stream_obj, keep) < 0 || aipc_py_stream_keep(stream_obj, (PyObject *)alloc) < 0) return -1;
  Py_ssize_t *busy[AIPC_PY_BUSY_MAX] = {&alloc->busy, from != NULL ? &from->busy : NULL,
                                        aipc_py_stream_busy(stream_obj)};
  return aipc_py_call_counted(st, alloc->device, busy, copy_bytes_async, &a);
}

/* copy_from(src, stream=None): a copy into this (C-contiguous) view, from
 * host data or another DeviceArray; on a stream, asynchronous. */
static PyObject *array_copy_from(PyObject *op, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"src", "stream", NULL};
  PyObject *src_obj, *stream_obj = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O:copy_from", kwlist, &src_obj, &stream_obj)) return NULL;
  aipc_py_state *st = aipc_py_state_of(Py_TYPE(op));
  if (aipc_py_array_checked(SELF) == NULL) return NULL;
  aclrtStream check;
  if (aipc_py_stream_arg(st, stream_obj, &check) < 0) return NULL;
  Py_ssize_t itemsize = PyDataType_ELSIZE(SELF->dtype);
  if (!aipc_py_c_contiguous(SELF->ndim, SELF->shape, SELF->strides, itemsize)) {
    PyErr_SetString(PyExc_ValueError,
                    "copy_from() writes C-contiguous views only (one aclrtMemcpy); copy into the contiguous "
                    "array this view was sliced from");
    return NULL;
  }
  PyObject *ret = NULL;
  aipc_py_allocation *alloc = NULL, *falloc = NULL;
  PyArrayObject *src = NULL, *host = NULL;
  memcpy_call c;
  if (Py_TYPE(src_obj) == st->array_type) { /* device to device: same dtype and shape, both contiguous */
    aipc_py_array *from = (aipc_py_array *)src_obj;
    if (aipc_py_array_checked(from) == NULL) return NULL;
    int same = from->ndim == SELF->ndim && PyArray_EquivTypes(from->dtype, SELF->dtype);
    for (int i = 0; same && i < SELF->ndim; i++) same = from->shape[i] == SELF->shape[i];
    if (!same) {
      PyErr_SetString(PyExc_ValueError, "copy_from() of a DeviceArray needs the same shape and dtype");
      return NULL;
    }
    if (!aipc_py_c_contiguous(from->ndim, from->shape, from->strides, itemsize)) {
      PyErr_SetString(PyExc_ValueError, "copy_from() reads C-contiguous DeviceArrays only");
      return NULL;
    }
    if (SELF->nbytes == 0) Py_RETURN_NONE;
    /* Both held until the end, no code run in between: a close in another
     * thread waits for the copy (aipc_py_allocation_wait). */
    alloc = (aipc_py_allocation *)Py_NewRef(SELF->alloc);
    falloc = (aipc_py_allocation *)Py_NewRef(from->alloc);
    c = (memcpy_call){(char *)alloc->base + SELF->offset, (char *)falloc->base + from->offset,
                      (size_t)SELF->nbytes, ACL_MEMCPY_DEVICE_TO_DEVICE};
    if (stream_obj != Py_None && aipc_py_stream_keep(stream_obj, (PyObject *)falloc) < 0) goto done;
    if (copy_on(st, alloc, falloc, &c, stream_obj, src_obj) < 0) goto done;
    ret = Py_NewRef(Py_None);
    goto done;
  }
  src = (PyArrayObject *)PyArray_FROM_O(src_obj);
  if (src == NULL) goto done;
  if (!PyArray_CanCastTypeTo(PyArray_DESCR(src), SELF->dtype, NPY_SAME_KIND_CASTING)) {
    PyErr_Format(PyExc_TypeError, "copy_from(): cannot cast %S to %S (same_kind casting)",
                 (PyObject *)PyArray_DESCR(src), (PyObject *)SELF->dtype);
    goto done;
  }
  Py_INCREF(SELF->dtype);
  host = (PyArrayObject *)PyArray_Empty(SELF->ndim, (npy_intp *)SELF->shape, SELF->dtype, 0);
  if (host == NULL || PyArray_CopyInto(host, src) < 0) goto done; /* broadcasts; wrong shapes: ValueError */
  /* Converting ran code (src.__array__) and released the GIL (numpy's large
   * copies): another thread may have closed this array meanwhile. */
  alloc = aipc_py_array_checked(SELF);
  if (alloc == NULL) goto done;
  Py_INCREF(alloc);
  if (SELF->nbytes == 0) {
    ret = Py_NewRef(Py_None);
    goto done;
  }
  c = (memcpy_call){(char *)alloc->base + SELF->offset, PyArray_DATA(host), (size_t)SELF->nbytes,
                    ACL_MEMCPY_HOST_TO_DEVICE};
  if (copy_on(st, alloc, NULL, &c, stream_obj, (PyObject *)host) < 0) goto done; /* host lives as long as the work */
  ret = Py_NewRef(Py_None);
done:
  Py_XDECREF(host);
  Py_XDECREF(src);
  Py_XDECREF(falloc);
  Py_XDECREF(alloc);
  return ret;
}

#ifdef MADV_POPULATE_WRITE
#define AIPC_PY_MADV_POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define AIPC_PY_MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

/* Host-to-device copies of many small host ranges into one allocation, with
 * the GIL released once: packing a state dict's tensors (ascend_ipc.torch). */
typedef struct gather_call {
  char *base;       /* the view's first byte */
  Py_ssize_t n;
  const Py_ssize_t *offset, *size;
  const uintptr_t *src;
} gather_call;

/* The most copies of one aclrtMemcpyBatch (CANN's driver limit). */
#define GATHER_BATCH 4096

/* Pieces [from, to) in one aclrtMemcpyBatch, host to device: 1 when copied,
 * 0 when the runtime cannot batch them (a CANN or a chip without the call;
 * a source that is itself device memory, which a batch does not take; a
 * device id the runtime sees otherwise): the caller copies them one by one,
 * the batch having copied none; -1 on an error noted in f. */
static int gather_batch(const aipc_provider *p, aipc_py_failure *f, int32_t device, const gather_call *g,
                        Py_ssize_t from, Py_ssize_t to) {
  if (p->memcpy_batch == NULL) return 0;
  size_t cap = (size_t)(to - from), n = 0;
  void **dsts = malloc(cap * sizeof *dsts), **srcs = malloc(cap * sizeof *srcs);
  size_t *sizes = malloc(cap * sizeof *sizes);
  int ret = 0;
  if (dsts && srcs && sizes) {
    for (Py_ssize_t i = from; i < to; i++) {
      if (g->size[i] == 0) continue;
      dsts[n] = g->base + g->offset[i], srcs[n] = (void *)g->src[i], sizes[n] = (size_t)g->size[i];
      n++;
    }
    aclrtMemcpyBatchAttr attr;
    memset(&attr, 0, sizeof attr);
    attr.dstLoc.type = ACL_MEM_LOCATION_TYPE_DEVICE, attr.dstLoc.id = (uint32_t)(device < 0 ? 0 : device);
    attr.srcLoc.type = ACL_MEM_LOCATION_TYPE_HOST;
    size_t first = 0, fail = SIZE_MAX;
    aclError rc = n ? p->memcpy_batch(dsts, sizes, srcs, sizes, n, &attr, &first, 1, &fail) : ACL_SUCCESS;
    if (rc == ACL_SUCCESS)
      ret = 1;
    else if (rc != ACL_ERROR_FEATURE_UNSUPPORTED && rc != ACL_ERROR_RT_FEATURE_NOT_SUPPORT &&
             !(rc == ACL_ERROR_RT_PARAM_INVALID && fail != SIZE_MAX))
      ret = aipc_py_note(p, f, AIPC_CALL_NAME(memcpy_batch), rc) == ACL_SUCCESS ? 1 : -1;
  }
  free(dsts);
  free(srcs);
  free(sizes);
  return ret;
}

static void gather_bytes(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  gather_call *g = arg;
  /* A CPU tensor of the emulator may itself be device memory (ascend_ipc's
   * own tensors are): there the runtime tells the direction by the address. */
  aclrtMemcpyKind kind = p->host_visible ? ACL_MEMCPY_DEFAULT : ACL_MEMCPY_HOST_TO_DEVICE;
  if (p->host_visible && g->n > 1) {
    /* Memory this process can address: its pages made in one call, not one
     * fault per page under the copies (a hint; a kernel without it faults). */
    Py_ssize_t lo = PY_SSIZE_T_MAX, hi = 0;
    for (Py_ssize_t i = 0; i < g->n; i++) {
      if (g->offset[i] < lo) lo = g->offset[i];
      if (g->offset[i] + g->size[i] > hi) hi = g->offset[i] + g->size[i];
    }
    uintptr_t a = (uintptr_t)(g->base + lo) & ~(uintptr_t)4095, b = ((uintptr_t)(g->base + hi) + 4095) & ~(uintptr_t)4095;
    if (b > a) (void)madvise((void *)a, b - a, AIPC_PY_MADV_POPULATE_WRITE);
  }
  for (Py_ssize_t done = 0; done < g->n;) {
    Py_ssize_t end = g->n - done > GATHER_BATCH ? done + GATHER_BATCH : g->n;
    int batched = g->n > 1 ? gather_batch(p, f, device, g, done, end) : 0;
    if (batched < 0) return;
    for (Py_ssize_t i = done; i < end && !batched; i++) {
      if (g->size[i] == 0) continue;
      aclError rc = p->memcpy(g->base + g->offset[i], (size_t)g->size[i], (const void *)g->src[i], (size_t)g->size[i],
                              kind);
      if (aipc_py_note(p, f, AIPC_CALL_NAME(memcpy), rc) != ACL_SUCCESS) return;
    }
    done = end;
  }
}

/* _gather_from_host(pieces): pieces is a sequence of (offset in this view,
 * host address, bytes). Internal: the addresses must be live host memory of
 * this process (a CPU tensor's data_ptr(), its tensor held by the caller);
 * the ranges in this view are checked. */
static PyObject *array_gather_from_host(PyObject *op, PyObject *pieces) {
  aipc_py_state *st = aipc_py_state_of(Py_TYPE(op));
  if (aipc_py_array_checked(SELF) == NULL) return NULL;
  if (!aipc_py_c_contiguous(SELF->ndim, SELF->shape, SELF->strides, PyDataType_ELSIZE(SELF->dtype))) {
    PyErr_SetString(PyExc_ValueError, "_gather_from_host() writes C-contiguous views only");
    return NULL;
  }
  PyObject *seq = PySequence_Fast(pieces, "_gather_from_host() needs a sequence of (offset, address, bytes)");
  if (seq == NULL) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject *ret = NULL;
  aipc_py_allocation *alloc = NULL;
  Py_ssize_t *offset = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
  Py_ssize_t *size = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
  uintptr_t *src = PyMem_Malloc(sizeof(uintptr_t) * (size_t)(n ? n : 1));
  if (offset == NULL || size == NULL || src == NULL) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
    unsigned long long addr;
    if (!PyTuple_Check(t) || !PyArg_ParseTuple(t, "nKn:_gather_from_host", &offset[i], &addr, &size[i])) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_gather_from_host() pieces are (offset, address, bytes)");
      goto done;
    }
    src[i] = (uintptr_t)addr;
    if (offset[i] < 0 || size[i] < 0 || offset[i] > SELF->nbytes || size[i] > SELF->nbytes - offset[i] ||
        (size[i] > 0 && addr == 0)) {
      PyErr_Format(PyExc_ValueError, "_gather_from_host(): piece %zd (%zd bytes at %zd) is outside the %zd-byte view",
                   i, size[i], offset[i], SELF->nbytes);
      goto done;
    }
  }
  /* Parsing ran no code that could close this array, but look again anyway:
   * the copy must hold the allocation it writes. */
  alloc = aipc_py_array_checked(SELF);
  if (alloc == NULL) goto done;
  Py_INCREF(alloc);
  gather_call g = {(char *)alloc->base + SELF->offset, n, offset, size, src};
  if (n > 0 && aipc_py_allocation_call(st, alloc, NULL, gather_bytes, &g) < 0) goto done;
  ret = Py_NewRef(Py_None);
done:
  Py_XDECREF(alloc);
  PyMem_Free(offset);
  PyMem_Free(size);
  PyMem_Free(src);
  Py_DECREF(seq);
  return ret;
}

/* __array__(dtype=None, copy=None): numpy's conversion protocol. Device memory
 * reaches the host only by a copy, so this is numpy() (plus a cast); copy=False
 * cannot be honoured and says how to share instead. */
static PyObject *array_array(PyObject *op, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"dtype", "copy", NULL};
  PyObject *dtype = Py_None, *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:__array__", kwlist, &dtype, &copy)) return NULL;
  if (copy == Py_False) {
    aipc_py_state *st = aipc_py_state_of(Py_TYPE(op));
    PyErr_SetString(PyExc_ValueError,
                    st->provider->host_visible
                        ? "a DeviceArray converts to a numpy array only by a copy; numpy.from_dlpack(a) shares "
                          "the memory instead"
                        : "a DeviceArray converts to a numpy array only by a copy: on this provider device "
                          "memory is NPU memory, which the CPU cannot address");
    return NULL;
  }
  PyObject *host = array_numpy(op, NULL);
  if (host == NULL || dtype == Py_None) return host;
  PyArray_Descr *d = NULL;
  if (!PyArray_DescrConverter(dtype, &d)) {
    Py_DECREF(host);
    return NULL;
  }
  PyObject *cast = PyArray_CastToType((PyArrayObject *)host, d, 0); /* steals d */
  Py_DECREF(host);
  return cast;
}

/* close(): new calls fail at once; if this array is the memory's last user,
 * waits for the calls other threads still run on it, then frees it. */
static PyObject *array_close(PyObject *op, PyObject *unused) {
  aipc_py_allocation *alloc = SELF->alloc;
  if (alloc == NULL) Py_RETURN_NONE; /* closing twice is harmless */
  SELF->alloc = NULL;                /* other threads see it closed from now on */
  aipc_py_allocation_wait(alloc);    /* with the GIL released */
  if (Py_REFCNT(alloc) == 1 && !alloc->released && !aipc_py_allocation_foreign(alloc)) {
    /* The last user: give the memory back here, so a refusal (ASCEND_IPC_STRICT=1
     * with importers still attached) is an exception, not a warning. */
    aipc_py_state *st = aipc_py_state_of(Py_TYPE(op));
    aipc_py_failure f = AIPC_PY_FAILURE_INIT;
    if (aipc_py_allocation_release(st, alloc, &f, 0) < 0) {
      if (SELF->alloc == NULL) {
        SELF->alloc = alloc; /* still open: the user can fix the order and retry */
      } else {
        Py_DECREF(alloc);
      }
      return aipc_py_raise(st, &f);
    }
  }
  Py_DECREF(alloc);
  Py_RETURN_NONE;
}

static PyObject *array_enter(PyObject *op, PyObject *unused) {
  if (aipc_py_array_checked(SELF) == NULL) return NULL;
  return Py_NewRef(op);
}

static PyObject *array_exit(PyObject *op, PyObject *args) { return array_close(op, NULL); }

static PyObject *array_is_contiguous(PyObject *op, PyObject *unused) {
  return PyBool_FromLong(
      aipc_py_c_contiguous(SELF->ndim, SELF->shape, SELF->strides, PyDataType_ELSIZE(SELF->dtype)));
}

static PyObject *array_reduce(PyObject *op, PyObject *unused) {
  PyErr_SetString(PyExc_TypeError,
                  "a DeviceArray cannot be pickled: export it (h = ascend_ipc.export(a)) and send the "
                  "IpcHandle; the receiver calls h.open()");
  return NULL;
}

/* ---- indexing ----------------------------------------------------------------
 *
 * Basic indexing only (ints, slices, Ellipsis, None): numpy does the index
 * arithmetic on an ndarray that has this view's shape and strides but points at
 * a dummy byte, so device memory is never touched; the result's shape, strides
 * and data pointer give the new view. An Ellipsis is appended so numpy always
 * returns a view, never reads an element. */

static char index_dummy[64] __attribute__((aligned(64)));

static int basic_index_item(PyObject *item, int *ellipses) {
  if (item == Py_Ellipsis) {
    (*ellipses)++;
    return 0;
  }
  if (item == Py_None || PySlice_Check(item)) return 0;
  if (PyBool_Check(item) || PyArray_IsScalar(item, Bool)) {
    PyErr_SetString(PyExc_TypeError,
                    "DeviceArray indices cannot be booleans (a boolean mask would copy; use numpy())");
    return -1;
  }
  if (PyIndex_Check(item) && !PyArray_Check(item)) return 0;
  PyErr_Format(PyExc_TypeError,
               "DeviceArray supports basic indexing only (ints, slices, ..., None), not %.100s",
               Py_TYPE(item)->tp_name);
  return -1;
}

static PyObject *array_subscript(PyObject *op, PyObject *key) {
  aipc_py_state *st = aipc_py_state_of(Py_TYPE(op));
  aipc_py_allocation *alloc = aipc_py_array_checked(SELF);
  if (alloc == NULL) return NULL;
  PyObject *items = NULL, *dummy = NULL, *view = NULL, *result = NULL;
  int ellipses = 0;

  if (PyTuple_Check(key)) {
    Py_ssize_t n = PyTuple_GET_SIZE(key);
    for (Py_ssize_t i = 0; i < n; i++) {
      if (basic_index_item(PyTuple_GET_ITEM(key, i), &ellipses) < 0) return NULL;
    }
    if (ellipses) {
      items = Py_NewRef(key);
    } else {
      items = PyTuple_New(n + 1);
      if (items == NULL) goto done;
      for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(items, i, Py_NewRef(PyTuple_GET_ITEM(key, i)));
      PyTuple_SET_ITEM(items, n, Py_NewRef(Py_Ellipsis));
    }
  } else {
    if (basic_index_item(key, &ellipses) < 0) return NULL;
    items = ellipses ? PyTuple_Pack(1, key) : PyTuple_Pack(2, key, Py_Ellipsis);
  }
  if (items == NULL) goto done;

  Py_INCREF(SELF->dtype);
  dummy = PyArray_NewFromDescr(&PyArray_Type, SELF->dtype, SELF->ndim, (npy_intp *)SELF->shape,
                               (npy_intp *)SELF->strides, index_dummy, 0 /* read-only */, NULL);
  if (dummy == NULL) goto done;
  view = PyObject_GetItem(dummy, items);
  if (view == NULL) goto done;
  if (!PyArray_Check(view)) {
    PyErr_SetString(PyExc_TypeError, "index did not produce a view");
    goto done;
  }
  PyArrayObject *v = (PyArrayObject *)view;
  Py_ssize_t delta = (Py_ssize_t)((char *)PyArray_DATA(v) - index_dummy);
  result = aipc_py_array_new(st, alloc, op, SELF->dtype, PyArray_NDIM(v), (Py_ssize_t *)PyArray_DIMS(v),
                             (Py_ssize_t *)PyArray_STRIDES(v), SELF->offset + delta);
done:
  Py_XDECREF(view);
  Py_XDECREF(dummy);
  Py_XDECREF(items);
  return result;
}

static Py_ssize_t array_length(PyObject *op) {
  if (SELF->ndim == 0) {
    PyErr_SetString(PyExc_TypeError, "len() of a 0-d DeviceArray");
    return -1;
  }
  return SELF->shape[0];
}

/* ---- attributes ----------------------------------------------------------- */

static PyObject *get_shape(PyObject *op, void *c) { return aipc_py_tuple(SELF->ndim, SELF->shape); }
static PyObject *get_strides(PyObject *op, void *c) { return aipc_py_tuple(SELF->ndim, SELF->strides); }
static PyObject *get_dtype(PyObject *op, void *c) { return Py_NewRef((PyObject *)SELF->dtype); }
static PyObject *get_ndim(PyObject *op, void *c) { return PyLong_FromLong(SELF->ndim); }
static PyObject *get_nbytes(PyObject *op, void *c) { return PyLong_FromSsize_t(SELF->nbytes); }
static PyObject *get_itemsize(PyObject *op, void *c) {
  return PyLong_FromSsize_t(PyDataType_ELSIZE(SELF->dtype));
}
static PyObject *get_size(PyObject *op, void *c) {
  Py_ssize_t n = 1;
  for (int i = 0; i < SELF->ndim; i++) n *= SELF->shape[i];
  return PyLong_FromSsize_t(n);
}
static PyObject *get_device(PyObject *op, void *c) { return PyLong_FromLong(SELF->device); }
static PyObject *get_offset(PyObject *op, void *c) { return PyLong_FromSsize_t(SELF->offset); }
static PyObject *get_closed(PyObject *op, void *c) { return PyBool_FromLong(SELF->alloc == NULL); }
static PyObject *get_is_import(PyObject *op, void *c) { return PyBool_FromLong(SELF->imported); }
static PyObject *get_base(PyObject *op, void *c) { return Py_NewRef(SELF->base ? SELF->base : Py_None); }
static PyObject *get_data_ptr(PyObject *op, void *c) {
  if (aipc_py_array_checked(SELF) == NULL) return NULL;
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)SELF->data);
}
static PyObject *get_allocation_size(PyObject *op, void *c) {
  aipc_py_allocation *alloc = aipc_py_array_checked(SELF);
  if (alloc == NULL) return NULL;
  return PyLong_FromSize_t(alloc->size);
}

static PyGetSetDef array_getset[] = {
    {"shape", get_shape, NULL, "Tuple of dimensions.", NULL},
    {"strides", get_strides, NULL, "Tuple of byte steps per dimension (numpy convention).", NULL},
    {"dtype", get_dtype, NULL, "Element type (numpy.dtype).", NULL},
    {"ndim", get_ndim, NULL, "Number of dimensions.", NULL},
    {"nbytes", get_nbytes, NULL, "Bytes of the elements (itemsize * size).", NULL},
    {"itemsize", get_itemsize, NULL, "Bytes per element.", NULL},
    {"size", get_size, NULL, "Number of elements.", NULL},
    {"device", get_device, NULL, "Device the memory is on (for an import: the exporter's).", NULL},
    {"offset", get_offset, NULL, "Byte offset of element 0 from the start of the allocation.", NULL},
    {"closed", get_closed, NULL, "True after close().", NULL},
    {"is_import", get_is_import, NULL, "True if the memory was imported with IpcHandle.open().", NULL},
    {"base", get_base, NULL, "The DeviceArray this view was sliced from, or None.", NULL},
    {"data_ptr", get_data_ptr, NULL, "Device address (CANN pointer) of element 0, as an int.", NULL},
    {"allocation_size", get_allocation_size, NULL,
     "Bytes of the underlying allocation (page-rounded; what an export covers).", NULL},
    {0},
};

/* Each docstring starts with a text signature ("name($self, ...)\n--\n\n"). */
static PyMethodDef array_methods[] = {
    {"numpy", array_numpy, METH_NOARGS,
     "numpy($self, /)\n--\n\nA C-contiguous host copy, a numpy.ndarray (device-to-host aclrtMemcpy)."},
    {"_gather_from_host", array_gather_from_host, METH_O,
     "_gather_from_host($self, pieces, /)\n--\n\n"
     "Internal: host-to-device copies of (offset in this view, host address, bytes) pieces\n"
     "(aclrtMemcpyBatch, 4,096 at a time; one by one where the runtime cannot batch them)."},
    {"copy_from", (PyCFunction)(void (*)(void))array_copy_from, METH_VARARGS | METH_KEYWORDS,
     "copy_from($self, /, src, stream=None)\n--\n\n"
     "Copies into this C-contiguous view: from host data (host-to-device) or from a\n"
     "C-contiguous DeviceArray of the same shape and dtype (device-to-device).\n"
     "Host src: anything numpy.asarray() takes, broadcast to this shape and cast with\n"
     "same_kind casting (staged: later changes to src do not matter). stream=None:\n"
     "done on return (aclrtMemcpy); a Stream: queued there (aclrtMemcpyAsync) and\n"
     "done once the stream reaches it; the arrays stay alive until synchronize().\n"
     "On the cann provider this is how the CPU writes NPU memory."},
    {"close", array_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "Drops this array's claim on its memory; the memory is given back once nothing\n"
     "else (views, handles, DLPack consumers) uses it. Closing twice is harmless."},
    {"is_contiguous", array_is_contiguous, METH_NOARGS,
     "is_contiguous($self, /)\n--\n\nTrue if the view is C-contiguous."},
    {"__array__", (PyCFunction)(void (*)(void))array_array, METH_VARARGS | METH_KEYWORDS,
     "__array__($self, /, dtype=None, copy=None)\n--\n\n"
     "A host copy, a numpy.ndarray, as numpy() (numpy.asarray(a))."},
    {"__enter__", array_enter, METH_NOARGS, "__enter__($self, /)\n--\n\nThe array itself (it must be open)."},
    {"__exit__", array_exit, METH_VARARGS, "__exit__($self, /, *exc_info)\n--\n\nCloses the array."},
    {"__reduce__", array_reduce, METH_NOARGS,
     "__reduce__($self, /)\n--\n\nRaises TypeError: a DeviceArray is sent by exporting it, not by pickling."},
    {"__dlpack__", (PyCFunction)(void (*)(void))aipc_py_array_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "A PyCapsule that shares the memory (DLPack): dltensor_versioned when\n"
     "max_version >= (1, 0), else dltensor."},
    {"__dlpack_device__", aipc_py_array_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\nThe memory's DLPack device: (device_type, device_id)."},
    {0},
};

static PyObject *array_repr(PyObject *op) {
  PyObject *shape = aipc_py_tuple(SELF->ndim, SELF->shape);
  if (shape == NULL) return NULL;
  const char *state = SELF->alloc == NULL                                ? ", closed"
                      : aipc_py_allocation_foreign(SELF->alloc)         ? ", inherited across fork"
                      : "";
  PyObject *r = PyUnicode_FromFormat("DeviceArray(shape=%R, dtype=%S, device=%d, ptr=%p, %s%s)", shape,
                                     (PyObject *)SELF->dtype, (int)SELF->device, SELF->data,
                                     aipc_py_alloc_kind_name(SELF->kind), state);
  Py_DECREF(shape);
  return r;
}

static int array_traverse(PyObject *op, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(op));
  Py_VISIT(SELF->alloc);
  Py_VISIT(SELF->base);
  Py_VISIT(SELF->dtype);
  return 0;
}

static int array_clear(PyObject *op) {
  Py_CLEAR(SELF->base);
  Py_CLEAR(SELF->alloc);
  return 0;
}

static void array_dealloc(PyObject *op) {
  PyTypeObject *tp = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  (void)array_clear(op);
  Py_CLEAR(SELF->dtype);
  PyMem_Free(SELF->shape);
  tp->tp_free(op);
  Py_DECREF(tp);
}

static const char array_doc[] =
    "DeviceArray: an n-dimensional view of device memory, owned or imported.\n"
    "\n"
    "Made by ascend_ipc.empty(), zeros(), from_numpy() and IpcHandle.open(); not\n"
    "instantiable directly. Supports basic slicing (views share the memory),\n"
    "numpy() (a host copy), the DLPack protocol (zero-copy into numpy and torch),\n"
    "close() and the context manager protocol.";

static PyType_Slot array_slots[] = {
    {Py_tp_doc, (void *)array_doc},
    {Py_tp_dealloc, array_dealloc},
    {Py_tp_traverse, array_traverse},
    {Py_tp_clear, array_clear},
    {Py_tp_repr, array_repr},
    {Py_tp_methods, array_methods},
    {Py_tp_getset, array_getset},
    {Py_mp_subscript, array_subscript},
    {Py_mp_length, array_length},
    {0, NULL},
};

static PyType_Spec array_spec = {
    .name = "ascend_ipc._C.DeviceArray",
    .basicsize = sizeof(aipc_py_array),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = array_slots,
};

int aipc_py_array_init_type(PyObject *module, aipc_py_state *st) {
  st->array_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &array_spec, NULL);
  if (st->array_type == NULL) return -1;
  return PyModule_AddType(module, st->array_type);
}
