/* IpcHandle: an IPC key and the view it describes. */
#include "ipchandle.h"

#include <string.h>

#include "devicearray.h"
#include "dtype.h"
#include "stream.h"

#define SELF ((aipc_py_handle *)op)

/* ---- construction ------------------------------------------------------- */

static int check_key(PyObject *obj, char out[AIPC_PY_KEY_LEN]) {
  if (!PyUnicode_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "key must be a str, not %.100s", Py_TYPE(obj)->tp_name);
    return -1;
  }
  Py_ssize_t n;
  const char *s = PyUnicode_AsUTF8AndSize(obj, &n);
  if (s == NULL) return -1;
  if (n < 1 || n > AIPC_PY_KEY_LEN - 1) {
    PyErr_Format(PyExc_ValueError, "key must have 1 to %d characters, not %zd", AIPC_PY_KEY_LEN - 1, n);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x21 || c > 0x7e) {
      PyErr_SetString(PyExc_ValueError, "key must be printable ASCII without spaces");
      return -1;
    }
  }
  memset(out, 0, AIPC_PY_KEY_LEN);
  memcpy(out, s, (size_t)n);
  return 0;
}

PyObject *aipc_py_handle_build(aipc_py_state *st, const char *key, aipc_py_allocation *alloc,
                               PyArray_Descr *dtype, PyObject *torch_dtype, int ndim,
                               const Py_ssize_t *shape, const Py_ssize_t *strides, Py_ssize_t offset,
                               Py_ssize_t size, int32_t device, long pid) {
  Py_ssize_t itemsize = PyDataType_ELSIZE(dtype), lo, hi, count = 1;
  for (int i = 0; i < ndim; i++) {
    if (__builtin_mul_overflow(count, shape[i], &count)) {
      PyErr_SetString(PyExc_ValueError, "shape is too big");
      return NULL;
    }
  }
  if (__builtin_mul_overflow(count, itemsize, &count)) {
    PyErr_SetString(PyExc_ValueError, "shape is too big");
    return NULL;
  }
  if (aipc_py_extent(ndim, shape, strides, itemsize, &lo, &hi) < 0) return NULL;
  int inside = count > 0 ? (offset >= -lo && offset <= size - hi) : (offset >= 0 && offset <= size);
  if (size <= 0 || !inside) {
    PyErr_Format(PyExc_ValueError,
                 "the view (offset %zd, bytes [%zd, %zd) around it) does not fit in the exported %zd bytes",
                 offset, lo, hi, size);
    return NULL;
  }

  aipc_py_handle *h = (aipc_py_handle *)st->handle_type->tp_alloc(st->handle_type, 0);
  if (h == NULL) return NULL;
  if (ndim > 0) {
    h->shape = PyMem_Malloc(2 * (size_t)ndim * sizeof(Py_ssize_t));
    if (h->shape == NULL) {
      Py_DECREF(h);
      return PyErr_NoMemory();
    }
    h->strides = h->shape + ndim;
    memcpy(h->shape, shape, (size_t)ndim * sizeof(Py_ssize_t));
    memcpy(h->strides, strides, (size_t)ndim * sizeof(Py_ssize_t));
  }
  memcpy(h->key, key, AIPC_PY_KEY_LEN);
  h->key[AIPC_PY_KEY_LEN - 1] = '\0';
  h->ndim = ndim;
  Py_XINCREF(alloc);
  h->alloc = alloc;
  Py_INCREF(dtype);
  h->dtype = dtype;
  Py_XINCREF(torch_dtype);
  h->torch_dtype = torch_dtype;
  h->offset = offset;
  h->nbytes = count;
  h->size = size;
  h->device = device;
  h->pid = pid;
  return (PyObject *)h;
}

int aipc_py_check_torch_dtype(PyObject *obj) {
  if (obj != NULL && obj != Py_None && !PyUnicode_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "torch_dtype must be None or a str such as 'bfloat16', not %.100s",
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  return 0;
}

/* IpcHandle(key, size, dtype='uint8', shape=None, strides=None, offset=0,
 *           device=0, pid=0, torch_dtype=None, event=None) */
static PyObject *handle_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"key", "size", "dtype", "shape", "strides", "offset", "device", "pid", "torch_dtype",
                           "event", NULL};
  aipc_py_state *st = aipc_py_state_of(type);
  PyObject *key_obj, *dtype_obj = NULL, *shape_obj = Py_None, *strides_obj = Py_None;
  PyObject *torch_dtype = Py_None, *event_obj = Py_None, *result = NULL;
  aclrtIpcEventHandle event;
  Py_ssize_t size, offset = 0;
  int device = 0;
  long pid = 0;
  char key[AIPC_PY_KEY_LEN];
  Py_ssize_t shape[AIPC_PY_MAX_NDIM], strides[AIPC_PY_MAX_NDIM], count;
  int ndim;

  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "On|OOOnilOO:IpcHandle", kwlist, &key_obj, &size,
                                   &dtype_obj, &shape_obj, &strides_obj, &offset, &device, &pid,
                                   &torch_dtype, &event_obj)) {
    return NULL;
  }
  if (event_obj != Py_None) {
    char *buf;
    Py_ssize_t blen;
    if (!PyBytes_Check(event_obj) || PyBytes_AsStringAndSize(event_obj, &buf, &blen) < 0 ||
        blen != (Py_ssize_t)sizeof event.reserved) {
      PyErr_Format(PyExc_ValueError, "event must be None or the %d bytes of an IPC event handle",
                   (int)sizeof event.reserved);
      return NULL;
    }
    memcpy(event.reserved, buf, sizeof event.reserved);
  }
  if (check_key(key_obj, key) < 0) return NULL;
  if (size <= 0) {
    PyErr_Format(PyExc_ValueError, "size must be positive, not %zd", size);
    return NULL;
  }
  if (offset < 0) {
    PyErr_Format(PyExc_ValueError, "offset must not be negative, not %zd", offset);
    return NULL;
  }
  if (device < 0) {
    PyErr_Format(PyExc_ValueError, "device must not be negative, not %d", device);
    return NULL;
  }
  if (aipc_py_check_torch_dtype(torch_dtype) < 0) return NULL;
  PyArray_Descr *dtype = dtype_obj == NULL ? PyArray_DescrFromType(NPY_UBYTE) : aipc_py_dtype_converter(dtype_obj);
  if (dtype == NULL) return NULL;
  Py_ssize_t itemsize = PyDataType_ELSIZE(dtype);
  if (shape_obj == Py_None) {
    if (strides_obj != Py_None) {
      PyErr_SetString(PyExc_ValueError, "strides needs shape");
      goto done;
    }
    ndim = 1;
    shape[0] = offset <= size ? (size - offset) / itemsize : 0;
  } else if (aipc_py_parse_shape(shape_obj, "shape", &ndim, shape) < 0) {
    goto done;
  }
  if (strides_obj == Py_None) {
    if (aipc_py_c_strides(ndim, shape, itemsize, strides, &count) < 0) goto done;
  } else if (aipc_py_parse_strides(strides_obj, ndim, strides) < 0) {
    goto done;
  }
  result = aipc_py_handle_build(st, key, NULL, dtype, torch_dtype == Py_None ? NULL : torch_dtype, ndim, shape,
                                strides, offset, size, (int32_t)device, pid);
  if (result != NULL && event_obj != Py_None) {
    ((aipc_py_handle *)result)->has_event = 1;
    ((aipc_py_handle *)result)->event = event;
  }
done:
  Py_DECREF(dtype);
  return result;
}

/* ---- shared with export() (functions.c) ------------------------------------ */

int32_t *aipc_py_parse_pids(PyObject *obj, Py_ssize_t *n) {
  if (PyUnicode_Check(obj) || PyBytes_Check(obj) || PyLong_Check(obj) || PyDict_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "pids must be None or a sequence of process ids, not %.100s",
                 Py_TYPE(obj)->tp_name);
    return NULL;
  }
  PyObject *seq = PySequence_Fast(obj, "pids must be a sequence of process ids");
  if (seq == NULL) return NULL;
  *n = PySequence_Fast_GET_SIZE(seq);
  int32_t *pids = PyMem_Malloc(((size_t)*n + 1) * sizeof(int32_t));
  if (pids == NULL) {
    Py_DECREF(seq);
    return (int32_t *)PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < *n; i++) {
    PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
    if (!PyLong_Check(item) || PyBool_Check(item)) {
      PyErr_Format(PyExc_TypeError, "a pid must be an int, not %.100s", Py_TYPE(item)->tp_name);
      goto fail;
    }
    long v = PyLong_AsLong(item);
    if (v == -1 && PyErr_Occurred()) goto fail;
    if (v < INT32_MIN || v > INT32_MAX) {
      PyErr_Format(PyExc_OverflowError, "pid %ld does not fit in int32", v);
      goto fail;
    }
    pids[i] = (int32_t)v;
  }
  Py_DECREF(seq);
  return pids;
fail:
  Py_DECREF(seq);
  PyMem_Free(pids);
  return NULL;
}

void aipc_py_close_key(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *key) {
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(ipc_close), p->ipc_close(key));
}

/* ---- put and drop (ascend_ipc/_handoff.py, through the registered callbacks) ---- */

/* Gives the sender its hold back (once); never raises, keeps any pending exception. */
static void release_hold(aipc_py_handle *h) { aipc_py_release_hold(aipc_py_state_of(Py_TYPE(h)), &h->hold); }

/* ---- methods -------------------------------------------------------------- */

/* This object is the exporter's handle, in the exporting process. */
static int is_exporter(aipc_py_handle *h) {
  return h->alloc != NULL && !aipc_py_allocation_foreign(h->alloc) && h->pid == aipc_py_pid();
}

static int is_closed(aipc_py_handle *h) {
  if (h->closed) return 1;
  /* Another handle of the same export may have ended it. */
  return is_exporter(h) && aipc_py_allocation_export_by_key(h->alloc, h->key) == NULL;
}

static int check_open(aipc_py_handle *h) {
  if (is_closed(h)) {
    PyErr_SetString(PyExc_ValueError, "IpcHandle is closed");
    return -1;
  }
  return 0;
}

typedef struct import_call {
  char key[AIPC_PY_KEY_LEN];
  int32_t mem_device;     /* the exporter's device */
  void *ptr;              /* out: the mapping */
  aipc_py_import *import; /* out: its place in the key's order */
  size_t granted;         /* out: bytes mapped from ptr on (the grant), 0 if the runtime cannot tell */
} import_call;

static void import_by_key(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  import_call *c = arg;
  /* Memory of another device is reached through peer access. */
  uint64_t flags =
      device == c->mem_device ? ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT : ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS;
  if (aipc_py_import_open(p, f, c->key, flags, &c->ptr, &c->import) != ACL_SUCCESS) return;
  /* The handle is data anyone can edit: what the runtime mapped is the
   * grant. A runtime without the query (older CANN) leaves it unknown. */
  void *base = NULL;
  size_t size = 0;
  if (p->mem_get_address_range(c->ptr, &base, &size) != ACL_SUCCESS) {
    (void)p->get_recent_err_msg();
  } else if ((uintptr_t)c->ptr >= (uintptr_t)base && (uintptr_t)c->ptr - (uintptr_t)base < size) {
    c->granted = size - ((uintptr_t)c->ptr - (uintptr_t)base);
  }
}

/* "4 MiB", "12 KiB" or "4097 bytes", for messages. */
static void format_bytes(char *out, size_t len, Py_ssize_t n) {
  if (n > 0 && n % (1 << 20) == 0) {
    snprintf(out, len, "%zd MiB", n >> 20);
  } else if (n > 0 && n % 1024 == 0) {
    snprintf(out, len, "%zd KiB", n >> 10);
  } else {
    snprintf(out, len, "%zd bytes", n);
  }
}

/* Gives back an import no object took (its close waits for older ones as any other). */
static void drop_import(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  aipc_py_failure later = AIPC_PY_FAILURE_INIT;
  (void)aipc_py_import_close(p, f, arg, 0, &later);
}

static PyObject *handle_open(PyObject *op, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"device", NULL};
  aipc_py_state *st = aipc_py_state_of(Py_TYPE(op));
  PyObject *device_obj = Py_None, *result = NULL;
  int32_t device;
  import_call c;

  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:open", kwlist, &device_obj)) return NULL;
  if (check_open(SELF) < 0) return NULL;
  if (aipc_py_parse_device(device_obj, &device) < 0) return NULL;
  /* A stream-ordered hand-off: the exporter's queued writes first. Its own
   * handle has the Event itself; any other opens the IPC event. */
  if (SELF->has_event) {
    aclrtIpcEventHandle ev = SELF->event;
    if (SELF->event_obj != NULL && ((aipc_py_event *)SELF->event_obj)->pid == aipc_py_pid()) {
      PyObject *r = PyObject_CallMethod(SELF->event_obj, "synchronize", NULL);
      if (r == NULL) return NULL;
      Py_DECREF(r);
    } else if (aipc_py_event_wait_handle(st, &ev, device) < 0) {
      return NULL;
    }
  }
  /* The wait above let the GIL go: a close() in another thread may have landed. */
  if (SELF->has_event && check_open(SELF) < 0) return NULL;
  memcpy(c.key, SELF->key, sizeof c.key);
  c.mem_device = SELF->device;
  c.ptr = NULL;
  c.import = NULL;
  c.granted = 0;
  Py_ssize_t *busy[AIPC_PY_BUSY_MAX] = {&SELF->busy, NULL, NULL};
  if (aipc_py_call_counted(st, device, busy, import_by_key, &c) < 0) return NULL;

  /* Wrap exactly the grant; a handle that claims more (its size, so its view)
   * is refused and its import closed again, never read past the mapping. */
  size_t wrap = c.granted != 0 ? c.granted : (size_t)SELF->size;
  if ((size_t)SELF->size > wrap) {
    aipc_py_failure f = AIPC_PY_FAILURE_INIT, drop = AIPC_PY_FAILURE_INIT;
    char claims[32], granted[32], view[32];
    format_bytes(claims, sizeof claims, SELF->size);
    format_bytes(granted, sizeof granted, (Py_ssize_t)wrap);
    format_bytes(view, sizeof view, SELF->nbytes);
    f.code = ACL_ERROR_INVALID_PARAM;
    f.call = AIPC_CALL_NAME(ipc_import_by_key);
    snprintf(f.message, sizeof f.message,
             "IpcHandle.open: the handle claims %s (a view of %s at offset %zd) but the exporter granted %s "
             "(refused; the import is closed again)",
             claims, view, SELF->offset, granted);
    (void)aipc_py_call_released(st->provider, &drop, AIPC_PY_NO_DEVICE, drop_import, c.import);
    return aipc_py_raise(st, &f);
  }
  aipc_py_allocation *alloc = aipc_py_allocation_create(st, AIPC_PY_IMPORTED, c.ptr, wrap, c.mem_device, c.import);
  if (alloc == NULL) {
    aipc_py_failure f = AIPC_PY_FAILURE_INIT; /* the exception set is the one to report */
    (void)aipc_py_call_released(st->provider, &f, AIPC_PY_NO_DEVICE, drop_import, c.import);
    return NULL;
  }
  /* An import of this process's own export: the exported memory must outlive
   * it (aclrtFree and the export's end wait for it). */
  aipc_py_allocation *exporter = aipc_py_registry_exporter(&st->registry, c.key, (uintptr_t)c.ptr);
  if (exporter != NULL && exporter != alloc) alloc->exporter = Py_NewRef((PyObject *)exporter);
  result = aipc_py_array_new(st, alloc, NULL, SELF->dtype, SELF->ndim, SELF->shape, SELF->strides, SELF->offset);
  Py_DECREF(alloc); /* on failure this closes the import */
  if (result != NULL) release_hold(SELF); /* imported: the memory lives on through this import */
  return result;
}

static PyObject *handle_open_torch(PyObject *op, PyObject *args, PyObject *kwargs) {
  PyObject *fn = aipc_py_callback(aipc_py_state_of(Py_TYPE(op))->open_torch, "open_torch");
  if (fn == NULL) return NULL;
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  PyObject *full = PyTuple_New(n + 1), *result = NULL;
  if (full == NULL) return NULL;
  PyTuple_SET_ITEM(full, 0, Py_NewRef(op));
  for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(full, i + 1, Py_NewRef(PyTuple_GET_ITEM(args, i)));
  result = PyObject_Call(fn, full, kwargs);
  Py_DECREF(full);
  return result;
}

/* Ends an export; while this process still holds imports of the key (its
 * own), the last of them ends it. */
static void close_export(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *key) {
  int deferred;
  (void)aipc_py_export_close(p, f, key, &deferred);
}

static PyObject *handle_close(PyObject *op, PyObject *unused) {
  aipc_py_state *st = aipc_py_state_of(Py_TYPE(op));
  if (SELF->closed) Py_RETURN_NONE;
  /* Closed before the GIL is let go: a close in another thread returns at
   * once, and new open()s and allow()s raise ValueError. */
  SELF->closed = 1;
  Py_INCREF(op);
  aipc_py_wait_idle(&SELF->busy, NULL, NULL); /* open()s and allow()s already at the runtime */
  if (is_exporter(SELF) && aipc_py_allocation_export_by_key(SELF->alloc, SELF->key) != NULL) {
    char key[AIPC_PY_KEY_LEN];
    memcpy(key, SELF->key, sizeof key);
    aipc_py_allocation *alloc = (aipc_py_allocation *)Py_NewRef((PyObject *)SELF->alloc);
    if (aipc_py_call(st, AIPC_PY_NO_DEVICE, close_export, key) < 0) {
      Py_DECREF(alloc);
      SELF->closed = 0;
      Py_DECREF(op);
      return NULL; /* still exported: fix the order and retry */
    }
    aipc_py_allocation_remove_export(alloc, key);
    Py_DECREF(alloc);
  }
  Py_DECREF(op);
  release_hold(SELF); /* a copy closed unopened: the sender need not wait for it */
  Py_CLEAR(SELF->alloc); /* may give the memory back if nothing else uses it */
  Py_CLEAR(SELF->keepalive);
  Py_CLEAR(SELF->event_obj);
  Py_RETURN_NONE;
}

typedef struct allow_call {
  char key[AIPC_PY_KEY_LEN];
  int32_t *pids;
  Py_ssize_t npids;
  int inter_server; /* sdid given: aclrtIpcMemImportPidInterServer */
  uint32_t sdid;
} allow_call;

static void allow_pids(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  allow_call *c = arg;
  if (!c->inter_server) {
    (void)aipc_py_note(p, f, AIPC_CALL_NAME(ipc_set_import_pid), p->ipc_set_import_pid(c->key, c->pids, (size_t)c->npids));
  } else {
    aclrtServerPid entry = {c->sdid, c->pids, (size_t)c->npids};
    (void)aipc_py_note(p, f, AIPC_CALL_NAME(ipc_import_pid_inter_server), p->ipc_import_pid_inter_server(c->key, &entry, 1));
  }
}

static PyObject *handle_allow(PyObject *op, PyObject *args, PyObject *kwargs) {
  aipc_py_state *st = aipc_py_state_of(Py_TYPE(op));
  PyObject *sdid_obj = Py_None;
  Py_ssize_t npids = 0;
  int32_t *pids = NULL;

  if (kwargs != NULL) {
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(kwargs, &pos, &k, &v)) {
      if (PyUnicode_Check(k) && PyUnicode_CompareWithASCIIString(k, "sdid") == 0) {
        sdid_obj = v;
      } else {
        PyErr_Format(PyExc_TypeError, "allow() got an unexpected keyword argument %R", k);
        return NULL;
      }
    }
  }
  if (PyTuple_GET_SIZE(args) == 0) {
    PyErr_SetString(PyExc_TypeError, "allow() needs at least one pid");
    return NULL;
  }
  unsigned long sdid = 0;
  if (sdid_obj != Py_None) {
    if (!PyLong_Check(sdid_obj)) {
      PyErr_Format(PyExc_TypeError, "sdid must be None or an int, not %.100s", Py_TYPE(sdid_obj)->tp_name);
      return NULL;
    }
    sdid = PyLong_AsUnsignedLong(sdid_obj);
    if (sdid == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    if (sdid > UINT32_MAX) {
      PyErr_SetString(PyExc_OverflowError, "sdid does not fit in uint32");
      return NULL;
    }
  }
  if (check_open(SELF) < 0) return NULL;
  pids = aipc_py_parse_pids(args, &npids);
  if (pids == NULL) return NULL;
  allow_call c = {.pids = pids, .npids = npids, .inter_server = sdid_obj != Py_None, .sdid = (uint32_t)sdid};
  memcpy(c.key, SELF->key, sizeof c.key);
  Py_ssize_t *busy[AIPC_PY_BUSY_MAX] = {&SELF->busy, NULL, NULL};
  int rc = aipc_py_call_counted(st, AIPC_PY_NO_DEVICE, busy, allow_pids, &c);
  PyMem_Free(pids);
  if (rc < 0) return NULL;
  Py_RETURN_NONE;
}

/* Pickling. Each copy pickled by the exporter holds the memory in this
 * process (put and drop): one_receiver (multiprocessing's ForkingPickler:
 * queues, pipes) until that copy is opened, else (plain pickle, which
 * collectives send to many processes) until the hold's deadline. A copy of a
 * copy passes its hold on. */
static PyObject *reduce_impl(PyObject *op, int one_receiver) {
  if (check_open(SELF) < 0) return NULL;
  PyObject *hold;
  if (is_exporter(SELF)) {
    PyObject *fn = aipc_py_callback(aipc_py_state_of(Py_TYPE(op))->hold, "hold");
    hold = fn != NULL ? PyObject_CallFunctionObjArgs(fn, op, one_receiver ? Py_True : Py_False, NULL) : NULL;
    if (hold == NULL) return NULL;
    /* One receiver's import is on its way: the runtime may get ready for it. */
    const aipc_provider *p = aipc_py_state_of(Py_TYPE(op))->provider;
    if (one_receiver && p->ipc_expect_request != NULL) p->ipc_expect_request();
  } else {
    hold = Py_NewRef(SELF->hold ? SELF->hold : Py_None);
  }
  PyObject *shape = aipc_py_tuple(SELF->ndim, SELF->shape);
  PyObject *strides = aipc_py_tuple(SELF->ndim, SELF->strides);
  PyObject *dtype_str = PyObject_GetAttrString((PyObject *)SELF->dtype, "str");
  PyObject *result = NULL;
  if (shape != NULL && strides != NULL && dtype_str != NULL) {
    /* Plain values only: unpickling builds a handle and imports nothing. */
    PyObject *event = SELF->has_event ? PyBytes_FromStringAndSize(SELF->event.reserved, sizeof SELF->event.reserved)
                                      : Py_NewRef(Py_None);
    PyObject *rebuild = PyObject_GetAttrString(PyType_GetModule(Py_TYPE(op)), "_rebuild_handle");
    if (event != NULL && rebuild != NULL)
      result = Py_BuildValue("(O((snOOOnilOO)O))", rebuild, SELF->key, SELF->size, dtype_str, shape, strides,
                             SELF->offset, (int)SELF->device, SELF->pid,
                             SELF->torch_dtype ? SELF->torch_dtype : Py_None, event, hold);
    Py_XDECREF(event);
    Py_XDECREF(rebuild);
  }
  Py_XDECREF(shape);
  Py_XDECREF(strides);
  Py_XDECREF(dtype_str);
  Py_DECREF(hold);
  return result;
}

static PyObject *handle_reduce(PyObject *op, PyObject *unused) { return reduce_impl(op, 0); }

PyObject *aipc_py_handle_reduce_for_one(PyObject *module, PyObject *obj) {
  aipc_py_state *st = aipc_py_state_of_module(module);
  if (Py_TYPE(obj) == st->handle_type) return reduce_impl(obj, 1);
  if (Py_TYPE(obj) == st->event_type) return aipc_py_event_reduce(obj, 1);
  PyErr_Format(PyExc_TypeError, "_reduce_for_one() needs an IpcHandle or an Event, not %.100s", Py_TYPE(obj)->tp_name);
  return NULL;
}

PyObject *aipc_py_handle_rebuild(PyObject *module, PyObject *args) {
  aipc_py_state *st = aipc_py_state_of_module(module);
  PyObject *ctor_args, *hold;
  if (!PyArg_ParseTuple(args, "O!O:_rebuild_handle", &PyTuple_Type, &ctor_args, &hold)) return NULL;
  if (aipc_py_check_hold(hold, "_rebuild_handle") < 0) return NULL;
  PyObject *h = handle_new(st->handle_type, ctor_args, NULL);
  if (h != NULL && hold != Py_None) ((aipc_py_handle *)h)->hold = Py_NewRef(hold);
  return h;
}

static PyObject *handle_enter(PyObject *op, PyObject *unused) { return Py_NewRef(op); }
static PyObject *handle_exit(PyObject *op, PyObject *args) { return handle_close(op, NULL); }

static int same_view(aipc_py_handle *a, aipc_py_handle *b) {
  if (a->offset != b->offset || a->ndim != b->ndim || !PyArray_EquivTypes(a->dtype, b->dtype)) return 0;
  for (int i = 0; i < a->ndim; i++) {
    if (a->shape[i] != b->shape[i] || a->strides[i] != b->strides[i]) return 0;
  }
  return 1;
}

static PyObject *handle_richcompare(PyObject *op, PyObject *other, int cmp) {
  if (Py_TYPE(other) != Py_TYPE(op) || (cmp != Py_EQ && cmp != Py_NE)) Py_RETURN_NOTIMPLEMENTED;
  aipc_py_handle *o = (aipc_py_handle *)other;
  int eq = strcmp(SELF->key, o->key) == 0 && same_view(SELF, o);
  return PyBool_FromLong(cmp == Py_EQ ? eq : !eq);
}

static Py_hash_t handle_hash(PyObject *op) {
  PyObject *k = PyUnicode_FromString(SELF->key);
  if (k == NULL) return -1;
  Py_hash_t h = PyObject_Hash(k);
  Py_DECREF(k);
  return h;
}

static PyObject *handle_repr(PyObject *op) {
  PyObject *shape = aipc_py_tuple(SELF->ndim, SELF->shape);
  if (shape == NULL) return NULL;
  /* The key is a secret: show only its first characters. */
  char shown[13];
  snprintf(shown, sizeof shown, "%.12s", SELF->key);
  const char *role = is_closed(SELF) ? ", closed" : is_exporter(SELF) ? ", exporter" : "";
  PyObject *r = PyUnicode_FromFormat("IpcHandle(key='%s...', shape=%R, dtype=%S, device=%d, offset=%zd, pid=%ld%s)",
                                     shown, shape, (PyObject *)SELF->dtype, (int)SELF->device, SELF->offset,
                                     SELF->pid, role);
  Py_DECREF(shape);
  return r;
}

/* ---- attributes ----------------------------------------------------------- */

static PyObject *get_key(PyObject *op, void *c) { return PyUnicode_FromString(SELF->key); }
static PyObject *get_shape(PyObject *op, void *c) { return aipc_py_tuple(SELF->ndim, SELF->shape); }
static PyObject *get_strides(PyObject *op, void *c) { return aipc_py_tuple(SELF->ndim, SELF->strides); }
static PyObject *get_dtype(PyObject *op, void *c) { return Py_NewRef((PyObject *)SELF->dtype); }
static PyObject *get_torch_dtype(PyObject *op, void *c) {
  return Py_NewRef(SELF->torch_dtype ? SELF->torch_dtype : Py_None);
}
static PyObject *get_ndim(PyObject *op, void *c) { return PyLong_FromLong(SELF->ndim); }
static PyObject *get_offset(PyObject *op, void *c) { return PyLong_FromSsize_t(SELF->offset); }
static PyObject *get_nbytes(PyObject *op, void *c) { return PyLong_FromSsize_t(SELF->nbytes); }
static PyObject *get_size(PyObject *op, void *c) { return PyLong_FromSsize_t(SELF->size); }
static PyObject *get_device(PyObject *op, void *c) { return PyLong_FromLong(SELF->device); }
static PyObject *get_pid(PyObject *op, void *c) { return PyLong_FromLong(SELF->pid); }
static PyObject *get_closed(PyObject *op, void *c) { return PyBool_FromLong(is_closed(SELF)); }
static PyObject *get_event(PyObject *op, void *c) {
  if (!SELF->has_event) Py_RETURN_NONE;
  return PyBytes_FromStringAndSize(SELF->event.reserved, sizeof SELF->event.reserved);
}
static PyObject *get_is_exporter(PyObject *op, void *c) { return PyBool_FromLong(is_exporter(SELF)); }
static PyObject *get_pid_validation(PyObject *op, void *c) {
  if (!is_exporter(SELF)) Py_RETURN_NONE;
  aipc_py_export_rec *rec = aipc_py_allocation_export_by_key(SELF->alloc, SELF->key);
  if (rec == NULL) Py_RETURN_NONE;
  return PyBool_FromLong(rec->flags == ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT);
}

static PyGetSetDef handle_getset[] = {
    {"key", get_key, NULL, "The IPC key (a secret: whoever holds it may import, within the whitelist).", NULL},
    {"shape", get_shape, NULL, "Shape of the shared view.", NULL},
    {"strides", get_strides, NULL, "Byte strides of the shared view.", NULL},
    {"dtype", get_dtype, NULL, "numpy dtype of the shared view.", NULL},
    {"torch_dtype", get_torch_dtype, NULL, "torch dtype name recorded by ascend_ipc.torch.share(), or None.",
     NULL},
    {"ndim", get_ndim, NULL, "Number of dimensions.", NULL},
    {"offset", get_offset, NULL, "Byte offset of element 0 from the start of the export.", NULL},
    {"nbytes", get_nbytes, NULL, "Bytes of the view's elements.", NULL},
    {"size", get_size, NULL, "Bytes the export covers (the whole page-rounded allocation).", NULL},
    {"device", get_device, NULL, "The exporter's device.", NULL},
    {"pid", get_pid, NULL, "Process id of the exporter (0 if unknown).", NULL},
    {"closed", get_closed, NULL, "True after close() (or after another handle ended the same export).", NULL},
    {"event", get_event, NULL,
     "export(stream=...): the IPC event handle (64 bytes) that open() waits for before it imports; else None.",
     NULL},
    {"is_exporter", get_is_exporter, NULL,
     "True for the handle export() returned, in the exporting process: its close() ends the export.", NULL},
    {"pid_validation", get_pid_validation, NULL,
     "Exporter side: True if the whitelist is enforced, False if any process of this user may import; "
     "None elsewhere.",
     NULL},
    {0},
};

/* Each docstring starts with a text signature ("name($self, ...)\n--\n\n"). */
static PyMethodDef handle_methods[] = {
    {"open", (PyCFunction)(void (*)(void))handle_open, METH_VARARGS | METH_KEYWORDS,
     "open($self, /, device=None)\n--\n\n"
     "Imports the memory (aclrtIpcMemImportByKey) and returns the view as a\n"
     "DeviceArray over the same bytes. A handle of export(stream=...) first waits\n"
     "(GIL released, Ctrl-C interrupts) until the exporter's work queued before the\n"
     "export has run, so the bytes are the ones that work wrote. Every open() is an import of its own: two\n"
     "opens give two arrays (two addresses) over the same bytes. Close them in any\n"
     "order: an import's mapping is released (aclrtIpcMemClose) once it and every\n"
     "older import of the same key in this process are closed."},
    {"open_torch", (PyCFunction)(void (*)(void))handle_open_torch, METH_VARARGS | METH_KEYWORDS,
     "open_torch($self, /, device=None)\n--\n\n"
     "Like open(), as a zero-copy torch.Tensor (needs torch)."},
    {"close", handle_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "The exporter's handle: ends the export (aclrtIpcMemClose; if this process\n"
     "has imports of its own key open, when the last of them closes). Any other\n"
     "handle: only marks it closed. Imports already open stay valid."},
    {"allow", (PyCFunction)(void (*)(void))handle_allow, METH_VARARGS | METH_KEYWORDS,
     "allow($self, /, *pids, sdid=None)\n--\n\n"
     "Adds processes to the export's whitelist (aclrtIpcMemSetImportPid;\n"
     "with sdid, aclrtIpcMemImportPidInterServer). Only the exporter may."},
    {"__reduce__", handle_reduce, METH_NOARGS,
     "__reduce__($self, /)\n--\n\nPlain values to rebuild the handle from; unpickling imports nothing."},
    {"__enter__", handle_enter, METH_NOARGS, "__enter__($self, /)\n--\n\nThe handle itself."},
    {"__exit__", handle_exit, METH_VARARGS, "__exit__($self, /, *exc_info)\n--\n\nCloses the handle."},
    {0},
};

static int handle_traverse(PyObject *op, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(op));
  Py_VISIT(SELF->alloc);
  Py_VISIT(SELF->keepalive);
  Py_VISIT(SELF->event_obj);
  Py_VISIT(SELF->hold);
  Py_VISIT(SELF->dtype);
  Py_VISIT(SELF->torch_dtype);
  return 0;
}

static int handle_clear(PyObject *op) {
  Py_CLEAR(SELF->alloc); /* first: ends the export (if last) before the keepalive object can go */
  Py_CLEAR(SELF->keepalive);
  Py_CLEAR(SELF->event_obj);
  Py_CLEAR(SELF->hold);
  Py_CLEAR(SELF->torch_dtype);
  return 0;
}

static void handle_dealloc(PyObject *op) {
  PyTypeObject *tp = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  release_hold(SELF); /* a copy collected unopened */
  (void)handle_clear(op);
  Py_CLEAR(SELF->dtype);
  PyMem_Free(SELF->shape);
  tp->tp_free(op);
  Py_DECREF(tp);
}

/* Starts with the constructor's text signature, for inspect.signature(IpcHandle). */
static const char handle_doc[] =
    "IpcHandle(key, size, dtype='uint8', shape=None, strides=None, offset=0, device=0, pid=0, "
    "torch_dtype=None, event=None)\n--\n\n"
    "An IPC key and the view of the exported memory it describes. export() returns\n"
    "one; pickling sends one (only plain values: unpickling never imports). open()\n"
    "imports the memory in any process. Constructing one from a key lets Python open\n"
    "memory that a C program exported: size is the exported byte count, and the view\n"
    "defaults to all of it as uint8.";

static PyType_Slot handle_slots[] = {
    {Py_tp_doc, (void *)handle_doc},
    {Py_tp_new, handle_new},
    {Py_tp_dealloc, handle_dealloc},
    {Py_tp_traverse, handle_traverse},
    {Py_tp_clear, handle_clear},
    {Py_tp_repr, handle_repr},
    {Py_tp_richcompare, handle_richcompare},
    {Py_tp_hash, handle_hash},
    {Py_tp_methods, handle_methods},
    {Py_tp_getset, handle_getset},
    {0, NULL},
};

static PyType_Spec handle_spec = {
    .name = "ascend_ipc._C.IpcHandle",
    .basicsize = sizeof(aipc_py_handle),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = handle_slots,
};

int aipc_py_handle_init_type(PyObject *module, aipc_py_state *st) {
  st->handle_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &handle_spec, NULL);
  if (st->handle_type == NULL) return -1;
  return PyModule_AddType(module, st->handle_type);
}
