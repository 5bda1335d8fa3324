/*
 * The functions of ascend_ipc._C (the module's method table): the device,
 * making and wrapping DeviceArrays, export(), and internal look-ups that
 * ascend_ipc.torch and the tests use. The types live in files of their own.
 */
#include "functions.h"

#include <string.h>

#include "allocation.h"
#include "devicearray.h"
#include "dtype.h"
#include "ipchandle.h"
#include "stream.h"
#include "emu/ipc/supernode.h"

/* ---- device functions ------------------------------------------------------ */

static aipc_py_state *state(PyObject *module) { return aipc_py_state_of_module(module); }

static PyObject *fn_provider(PyObject *module, PyObject *unused) {
  return PyUnicode_FromString(state(module)->provider->name);
}

static int dict_set_steal(PyObject *d, const char *key, PyObject *value) {
  if (value == NULL) return -1;
  int rc = PyDict_SetItemString(d, key, value);
  Py_DECREF(value);
  return rc;
}

static PyObject *str_or_none(const char *s) {
  if (s == NULL) Py_RETURN_NONE;
  return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

static PyObject *fn_provider_info(PyObject *module, PyObject *unused) {
  const aipc_provider *p = state(module)->provider;
  const aipc_provider_report *report = p->report != NULL ? p->report() : NULL;
  PyObject *d = PyDict_New(), *missing = NULL;
  if (d == NULL) return NULL;
  if (dict_set_steal(d, "name", PyUnicode_FromString(p->name)) < 0 ||
      dict_set_steal(d, "library", str_or_none(p->library_path)) < 0 ||
      dict_set_steal(d, "version", str_or_none(report != NULL ? report->version : NULL)) < 0 ||
      dict_set_steal(d, "version_source", str_or_none(report != NULL ? report->version_source : NULL)) < 0 ||
      dict_set_steal(d, "dlpack_device_type", PyLong_FromLong(p->dlpack_device_type)) < 0 ||
      dict_set_steal(d, "host_visible", PyBool_FromLong(p->host_visible)) < 0 ||
      dict_set_steal(d, "selection", str_or_none(aipc_py_selection_note())) < 0) {
    goto fail;
  }
  missing = PyDict_New();
  if (missing == NULL) goto fail;
  for (size_t i = 0; report != NULL && i < report->n_missing; i++) {
    if (dict_set_steal(missing, report->missing[i], PyUnicode_FromString(report->missing_since[i])) < 0) goto fail;
  }
  if (dict_set_steal(d, "unsupported", missing) < 0) {
    missing = NULL;
    goto fail;
  }
  return d;
fail:
  Py_XDECREF(missing);
  Py_DECREF(d);
  return NULL;
}

static PyObject *fn_device_count(PyObject *module, PyObject *unused) {
  aipc_py_state *st = state(module);
  aipc_py_failure f = AIPC_PY_FAILURE_INIT;
  uint32_t n = 0;
  if (aipc_py_note(st->provider, &f, AIPC_CALL_NAME(get_device_count), st->provider->get_device_count(&n)) != ACL_SUCCESS) {
    return aipc_py_raise(st, &f);
  }
  return PyLong_FromUnsignedLong(n);
}

static PyObject *fn_set_device(PyObject *module, PyObject *arg) {
  aipc_py_state *st = state(module);
  aipc_py_failure f = AIPC_PY_FAILURE_INIT;
  if (!PyLong_Check(arg) || PyBool_Check(arg)) {
    PyErr_Format(PyExc_TypeError, "set_device() needs an int, not %.100s", Py_TYPE(arg)->tp_name);
    return NULL;
  }
  long v = PyLong_AsLong(arg);
  if (v == -1 && PyErr_Occurred()) return NULL;
  if (v < INT32_MIN || v > INT32_MAX) {
    PyErr_SetString(PyExc_OverflowError, "device id does not fit in int32");
    return NULL;
  }
  /* Out-of-range ids are the runtime's to refuse (ACL_ERROR_RT_INVALID_DEVICEID). */
  if (aipc_py_note(st->provider, &f, AIPC_CALL_NAME(set_device), st->provider->set_device((int32_t)v)) != ACL_SUCCESS) {
    return aipc_py_raise(st, &f);
  }
  Py_RETURN_NONE;
}

static PyObject *fn_current_device(PyObject *module, PyObject *unused) {
  aipc_py_state *st = state(module);
  aipc_py_failure f = AIPC_PY_FAILURE_INIT;
  int32_t d = 0;
  if (aipc_py_note(st->provider, &f, AIPC_CALL_NAME(get_device), st->provider->get_device(&d)) != ACL_SUCCESS) {
    return aipc_py_raise(st, &f);
  }
  return PyLong_FromLong(d);
}

static PyObject *fn_bare_tgid(PyObject *module, PyObject *unused) {
  aipc_py_state *st = state(module);
  aipc_py_failure f = AIPC_PY_FAILURE_INIT;
  int32_t pid = 0;
  if (aipc_py_note(st->provider, &f, AIPC_CALL_NAME(device_get_bare_tgid), st->provider->device_get_bare_tgid(&pid)) !=
      ACL_SUCCESS) {
    return aipc_py_raise(st, &f);
  }
  return PyLong_FromLong(pid);
}

/* The emulator's super-node view of this process (python -m ascend_ipc doctor). */
static PyObject *fn_supernode_info(PyObject *module, PyObject *unused) {
  uint32_t sdid;
  uint64_t id, netns;
  char dir[128], why[512], idtext[24] = "";
  Py_BEGIN_ALLOW_THREADS
  aipc__supernode_info(&sdid, dir, sizeof dir, &id, &netns, why, sizeof why);
  Py_END_ALLOW_THREADS
  if (id) snprintf(idtext, sizeof idtext, "%016llx", (unsigned long long)id);
  return Py_BuildValue("{s:k,s:s,s:s,s:K,s:s}", "sdid", (unsigned long)sdid, "supernode_dir", dir, "supernode_id",
                       idtext, "netns", (unsigned long long)netns, "problem", why);
}

typedef struct mem_info_call {
  size_t free_bytes, total;
} mem_info_call;

static void get_mem_info(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  mem_info_call *c = arg;
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(get_mem_info), p->get_mem_info(ACL_HBM_MEM, &c->free_bytes, &c->total));
}

static PyObject *fn_mem_info(PyObject *module, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"device", NULL};
  aipc_py_state *st = state(module);
  const aipc_provider *p = st->provider;
  PyObject *device_obj = Py_None;
  int32_t device;
  mem_info_call c = {0, 0};

  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:mem_info", kwlist, &device_obj)) return NULL;
  if (aipc_py_parse_device(device_obj, &device) < 0) return NULL;
  if (p->get_mem_info == NULL) {
    PyErr_Format(PyExc_NotImplementedError, "the %s provider cannot report memory", p->name);
    return NULL;
  }
  if (aipc_py_call(st, device, get_mem_info, &c) < 0) return NULL;
  return Py_BuildValue("(nn)", (Py_ssize_t)c.free_bytes, (Py_ssize_t)c.total);
}

/* ---- DeviceArrays ---------------------------------------------------------- */

static size_t page_round(Py_ssize_t nbytes) {
  size_t n = nbytes > 0 ? (size_t)nbytes : 1;
  return (n + AIPC_PY_PAGE - 1) & ~(AIPC_PY_PAGE - 1);
}

typedef struct allocate_call {
  size_t size;       /* page-rounded */
  Py_ssize_t nbytes; /* bytes to copy from host */
  const void *host;  /* or NULL */
  int zero;
  void *ptr;         /* out: the memory, or NULL */
  int32_t device;    /* out: the device it is on */
} allocate_call;

static void malloc_and_fill(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  allocate_call *c = arg;
  c->device = device;
  if (aipc_py_note(p, f, AIPC_CALL_NAME(malloc), p->malloc(&c->ptr, c->size, ACL_MEM_MALLOC_HUGE_FIRST)) != ACL_SUCCESS) {
    return;
  }
  aclError rc = ACL_SUCCESS;
  if (c->host != NULL && c->nbytes > 0) {
    rc = aipc_py_note(p, f, AIPC_CALL_NAME(memcpy), p->memcpy(c->ptr, c->size, c->host, (size_t)c->nbytes, ACL_MEMCPY_HOST_TO_DEVICE));
  } else if (c->zero) {
    rc = aipc_py_note(p, f, AIPC_CALL_NAME(memset), p->memset(c->ptr, c->size, 0, c->size));
  }
  if (rc != ACL_SUCCESS) {
    (void)aipc_py_note(p, f, AIPC_CALL_NAME(free), p->free(c->ptr));
    c->ptr = NULL;
  }
}

static void free_memory(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *ptr) {
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(free), p->free(ptr));
}

/*
 * Allocates device memory for nbytes on device (-1: current), optionally
 * fills it from host (nbytes bytes) or with zeros, and wraps it. A new
 * reference to the allocation, or NULL with an exception.
 */
static aipc_py_allocation *allocate(aipc_py_state *st, int32_t device, Py_ssize_t nbytes,
                                    const void *host, int zero) {
  allocate_call c = {page_round(nbytes), nbytes, host, zero, NULL, -1};
  if (aipc_py_call(st, device, malloc_and_fill, &c) < 0) return NULL;
  aipc_py_allocation *a = aipc_py_allocation_create(st, AIPC_PY_OWNED, c.ptr, c.size, c.device, NULL);
  if (a == NULL) {
    aipc_py_failure f = AIPC_PY_FAILURE_INIT; /* the exception set is the one to report */
    (void)aipc_py_call_released(st->provider, &f, AIPC_PY_NO_DEVICE, free_memory, c.ptr);
  }
  return a;
}

/* empty() and zeros() */
static PyObject *make_array(PyObject *module, PyObject *args, PyObject *kwargs, const char *fmt,
                            int zero) {
  static char *kwlist[] = {"shape", "dtype", "device", NULL};
  aipc_py_state *st = aipc_py_state_of_module(module);
  PyObject *shape_obj, *dtype_obj = NULL, *device_obj = Py_None, *result = NULL;
  PyArray_Descr *dtype = NULL;
  aipc_py_allocation *alloc = NULL;
  Py_ssize_t shape[AIPC_PY_MAX_NDIM], strides[AIPC_PY_MAX_NDIM], count;
  int ndim;
  int32_t device;

  if (!PyArg_ParseTupleAndKeywords(args, kwargs, fmt, kwlist, &shape_obj, &dtype_obj, &device_obj)) {
    return NULL;
  }
  if (aipc_py_parse_shape(shape_obj, "shape", &ndim, shape) < 0) goto done;
  if (dtype_obj == NULL) {
    dtype = PyArray_DescrFromType(NPY_FLOAT);
  } else {
    dtype = aipc_py_dtype_converter(dtype_obj);
  }
  if (dtype == NULL) goto done;
  if (aipc_py_parse_device(device_obj, &device) < 0) goto done;
  if (aipc_py_c_strides(ndim, shape, PyDataType_ELSIZE(dtype), strides, &count) < 0) goto done;
  alloc = allocate(st, device, count * PyDataType_ELSIZE(dtype), NULL, zero);
  if (alloc == NULL) goto done;
  result = aipc_py_array_new(st, alloc, NULL, dtype, ndim, shape, strides, 0);
done:
  Py_XDECREF(alloc);
  Py_XDECREF(dtype);
  return result;
}

static PyObject *fn_empty(PyObject *module, PyObject *args, PyObject *kwargs) {
  return make_array(module, args, kwargs, "O|OO:empty", 0);
}

static PyObject *fn_zeros(PyObject *module, PyObject *args, PyObject *kwargs) {
  return make_array(module, args, kwargs, "O|OO:zeros", 1);
}

static PyObject *fn_from_numpy(PyObject *module, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"array", "device", NULL};
  aipc_py_state *st = aipc_py_state_of_module(module);
  PyObject *obj, *device_obj = Py_None, *result = NULL;
  PyArrayObject *src = NULL;
  aipc_py_allocation *alloc = NULL;
  Py_ssize_t strides[AIPC_PY_MAX_NDIM], count;
  int32_t device;

  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O:from_numpy", kwlist, &obj, &device_obj)) return NULL;
  if (!PyArray_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "from_numpy() needs a numpy.ndarray, not %.100s", Py_TYPE(obj)->tp_name);
    return NULL;
  }
  PyArray_Descr *descr = PyArray_DESCR((PyArrayObject *)obj);
  if (!aipc_py_dtype_supported(descr)) {
    /* Reuse the converter's message. */
    PyArray_Descr *d = aipc_py_dtype_converter((PyObject *)descr);
    Py_XDECREF(d);
    return NULL;
  }
  if (aipc_py_parse_device(device_obj, &device) < 0) return NULL;
  if (PyArray_NDIM((PyArrayObject *)obj) > AIPC_PY_MAX_NDIM) {
    PyErr_Format(PyExc_ValueError, "at most %d dimensions are supported", AIPC_PY_MAX_NDIM);
    return NULL;
  }
  /* A C-contiguous, aligned copy in native byte order (no copy if it is one). */
  PyArray_Descr *native = PyArray_DescrNewByteorder(descr, NPY_NATIVE);
  if (native == NULL) return NULL;
  src = (PyArrayObject *)PyArray_FromArray((PyArrayObject *)obj, native,
                                           NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
  if (src == NULL) return NULL;
  int ndim = PyArray_NDIM(src);
  const Py_ssize_t *shape = (const Py_ssize_t *)PyArray_DIMS(src);
  if (aipc_py_c_strides(ndim, shape, PyArray_ITEMSIZE(src), strides, &count) < 0) goto done;
  alloc = allocate(st, device, PyArray_NBYTES(src), PyArray_DATA(src), 0);
  if (alloc == NULL) goto done;
  result = aipc_py_array_new(st, alloc, NULL, PyArray_DESCR(src), ndim, shape, strides, 0);
done:
  Py_XDECREF(alloc);
  Py_XDECREF(src);
  return result;
}

/* _view_at(address, shape, strides, dtype): the DeviceArray of this process's
 * device memory viewing those bytes, or None. ascend_ipc.torch uses it to find
 * the memory behind a tensor. */
static PyObject *fn_view_at(PyObject *module, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"address", "shape", "strides", "dtype", NULL};
  aipc_py_state *st = aipc_py_state_of_module(module);
  PyObject *addr_obj, *shape_obj, *strides_obj, *dtype_obj, *result = NULL;
  PyArray_Descr *dtype = NULL;
  Py_ssize_t shape[AIPC_PY_MAX_NDIM], strides[AIPC_PY_MAX_NDIM], lo, hi;
  int ndim;

  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO:_view_at", kwlist, &addr_obj, &shape_obj,
                                   &strides_obj, &dtype_obj)) {
    return NULL;
  }
  if (!PyLong_Check(addr_obj)) {
    PyErr_Format(PyExc_TypeError, "address must be an int, not %.100s", Py_TYPE(addr_obj)->tp_name);
    return NULL;
  }
  uintptr_t addr = (uintptr_t)PyLong_AsUnsignedLongLong(addr_obj);
  if (PyErr_Occurred()) return NULL;
  if (aipc_py_parse_shape(shape_obj, "shape", &ndim, shape) < 0) return NULL;
  if (aipc_py_parse_strides(strides_obj, ndim, strides) < 0) return NULL;
  dtype = aipc_py_dtype_converter(dtype_obj);
  if (dtype == NULL) return NULL;
  if (aipc_py_extent(ndim, shape, strides, PyDataType_ELSIZE(dtype), &lo, &hi) < 0) goto done;
  if ((lo < 0 && (uintptr_t)(-lo) > addr) || (hi > 0 && (uintptr_t)hi > UINTPTR_MAX - addr)) {
    PyErr_SetString(PyExc_ValueError, "the view wraps around the address space");
    goto done;
  }
  aipc_py_allocation *alloc = aipc_py_registry_find(&st->registry, addr + lo, addr + hi);
  if (alloc == NULL) {
    result = Py_NewRef(Py_None);
    goto done;
  }
  result = aipc_py_array_new(st, alloc, NULL, dtype, ndim, shape, strides,
                             (Py_ssize_t)(addr - (uintptr_t)alloc->base));
done:
  Py_XDECREF(dtype);
  return result;
}

/* wrap(address, size, device=None, owner=None): a uint8 DeviceArray over
 * device memory this process got from elsewhere. The memory is never freed
 * here; owner, if given, is kept alive as long as anything uses it. */
static PyObject *fn_wrap(PyObject *module, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"address", "size", "device", "owner", NULL};
  aipc_py_state *st = aipc_py_state_of_module(module);
  const aipc_provider *p = st->provider;
  PyObject *addr_obj, *device_obj = Py_None, *owner = Py_None, *result = NULL;
  Py_ssize_t size;
  int32_t device;

  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "On|OO:wrap", kwlist, &addr_obj, &size, &device_obj, &owner))
    return NULL;
  if (!PyLong_Check(addr_obj) || PyBool_Check(addr_obj)) {
    PyErr_Format(PyExc_TypeError, "address must be an int, not %.100s", Py_TYPE(addr_obj)->tp_name);
    return NULL;
  }
  unsigned long long addr_ull = PyLong_AsUnsignedLongLong(addr_obj);
  if (PyErr_Occurred()) return NULL;
  uintptr_t addr = (uintptr_t)addr_ull;
  if (addr == 0) {
    PyErr_SetString(PyExc_ValueError, "wrap(): address is NULL");
    return NULL;
  }
  if (size <= 0) {
    PyErr_Format(PyExc_ValueError, "wrap(): size must be positive, not %zd", size);
    return NULL;
  }
  if (addr % AIPC_PY_PAGE != 0 || (size_t)size % AIPC_PY_PAGE != 0) {
    PyErr_Format(PyExc_ValueError,
                 "wrap(): address (%p) and size (%zd) must be multiples of the page size %zd: CANN "
                 "exports only page-aligned ranges",
                 (void *)addr, size, (Py_ssize_t)AIPC_PY_PAGE);
    return NULL;
  }
  if ((uintptr_t)size > UINTPTR_MAX - addr) {
    PyErr_SetString(PyExc_ValueError, "wrap(): the range wraps around the address space");
    return NULL;
  }
  if (aipc_py_parse_device(device_obj, &device) < 0) return NULL;
  if (device < 0) {
    int32_t cur = 0;
    if (p->get_device(&cur) != ACL_SUCCESS) {
      (void)p->get_recent_err_msg(); /* no device set yet: device 0, as CANN defaults */
      cur = 0;
    }
    device = cur;
  }
  aipc_py_allocation *own = aipc_py_registry_overlap(&st->registry, addr, addr + (uintptr_t)size);
  if (own != NULL) {
    PyErr_Format(PyExc_ValueError,
                 "wrap(): [%p, +%zd bytes) overlaps device memory that ascend_ipc %s here (%p, %zd bytes): "
                 "use that DeviceArray instead",
                 (void *)addr, size, own->kind == AIPC_PY_IMPORTED ? "imported" : "allocated", own->base,
                 (Py_ssize_t)own->size);
    return NULL;
  }
  /* Memory with an owner gets an allocation of its own, which holds it. */
  aipc_py_allocation *alloc =
      owner == Py_None ? aipc_py_registry_find_borrowed(&st->registry, addr, (size_t)size, device) : NULL;
  if (alloc != NULL) {
    Py_INCREF(alloc);
  } else {
    alloc = aipc_py_allocation_create(st, AIPC_PY_BORROWED, (void *)addr, (size_t)size, device, NULL);
    if (alloc == NULL) return NULL;
    if (owner != Py_None) alloc->owner = Py_NewRef(owner);
  }
  PyArray_Descr *u8 = PyArray_DescrFromType(NPY_UBYTE);
  if (u8 != NULL) {
    Py_ssize_t stride = 1;
    result = aipc_py_array_new(st, alloc, NULL, u8, 1, &size, &stride, 0);
    Py_DECREF(u8);
  }
  Py_DECREF(alloc);
  return result;
}

/* _subview(array, offset, shape, strides, dtype): another view of the same
 * allocation (offset in bytes from its base). ascend_ipc.torch uses it. */
static PyObject *fn_subview(PyObject *module, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"array", "offset", "shape", "strides", "dtype", NULL};
  aipc_py_state *st = aipc_py_state_of_module(module);
  PyObject *array_obj, *shape_obj, *strides_obj, *dtype_obj, *result = NULL;
  Py_ssize_t offset, shape[AIPC_PY_MAX_NDIM], strides[AIPC_PY_MAX_NDIM];
  int ndim;

  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OnOOO:_subview", kwlist, &array_obj, &offset, &shape_obj,
                                   &strides_obj, &dtype_obj)) {
    return NULL;
  }
  if (Py_TYPE(array_obj) != st->array_type) {
    PyErr_Format(PyExc_TypeError, "_subview() needs a DeviceArray, not %.100s", Py_TYPE(array_obj)->tp_name);
    return NULL;
  }
  /* Everything that may run Python code (__index__, a dtype's lookups) first:
   * such code may close the array, so its allocation is taken only after. */
  if (aipc_py_parse_shape(shape_obj, "shape", &ndim, shape) < 0) return NULL;
  if (aipc_py_parse_strides(strides_obj, ndim, strides) < 0) return NULL;
  PyArray_Descr *dtype = aipc_py_dtype_converter(dtype_obj);
  if (dtype == NULL) return NULL;
  aipc_py_allocation *alloc = aipc_py_array_checked((aipc_py_array *)array_obj);
  result = alloc == NULL ? NULL : aipc_py_array_new(st, alloc, array_obj, dtype, ndim, shape, strides, offset);
  Py_DECREF(dtype);
  return result;
}

/* _live_allocations(): [(base, size, device, kind), ...] of this process. */
static PyObject *fn_live_allocations(PyObject *module, PyObject *unused) {
  aipc_py_state *st = aipc_py_state_of_module(module);
  PyObject *list = PyList_New(0);
  if (list == NULL) return NULL;
  for (size_t i = 0; i < st->registry.count; i++) {
    aipc_py_allocation *a = st->registry.items[i];
    if (a->released || aipc_py_allocation_foreign(a)) continue;
    PyObject *t = Py_BuildValue("(KnIs)", (unsigned long long)(uintptr_t)a->base, (Py_ssize_t)a->size,
                                (unsigned)a->device, aipc_py_alloc_kind_name(a->kind));
    if (t == NULL || PyList_Append(list, t) < 0) {
      Py_XDECREF(t);
      Py_DECREF(list);
      return NULL;
    }
    Py_DECREF(t);
  }
  return list;
}

/* ---- export ------------------------------------------------------------- */

static int parse_link(PyObject *obj, int *link) {
  static const struct {
    const char *name;
    int value;
  } links[] = {
      {"sio", ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_SIO},
      {"hccs", ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_HCCS},
      {"ub_one_port", ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_UB_ONE_PORT_PATH},
      {"ub_multi_port", ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_UB_MULTI_PORT_PATH},
  };
  *link = AIPC_PY_LINK_NONE;
  if (obj == Py_None) return 0;
  if (!PyUnicode_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "link must be None or a str, not %.100s", Py_TYPE(obj)->tp_name);
    return -1;
  }
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
    if (PyUnicode_CompareWithASCIIString(obj, links[i].name) == 0) {
      *link = links[i].value;
      return 0;
    }
  }
  PyErr_Format(PyExc_ValueError, "link must be None, 'sio', 'hccs', 'ub_one_port' or 'ub_multi_port', not %R",
               obj);
  return -1;
}

typedef struct export_call {
  void *base;
  size_t size;
  uint64_t flags;
  int32_t *pids; /* the whitelist to set, npids entries (none: leave it) */
  Py_ssize_t npids;
  int link;
  char *key; /* out: char[AIPC_PY_KEY_LEN] */
} export_call;

/* Exports [base, +size) and sets the whitelist and link; on a failure after
 * the key was made, ends that export again. */
static void export_memory(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  export_call *c = arg;
  if (aipc_py_note(p, f, AIPC_CALL_NAME(ipc_get_export_key), p->ipc_get_export_key(c->base, c->size, c->key, AIPC_PY_KEY_LEN, c->flags)) != ACL_SUCCESS) {
    return;
  }
  aclError rc = ACL_SUCCESS;
  if (c->npids > 0) {
    rc = aipc_py_note(p, f, AIPC_CALL_NAME(ipc_set_import_pid), p->ipc_set_import_pid(c->key, c->pids, (size_t)c->npids));
  }
  if (rc == ACL_SUCCESS && c->link != AIPC_PY_LINK_NONE) {
    rc = aipc_py_note(p, f, AIPC_CALL_NAME(ipc_set_attr), p->ipc_set_attr(c->key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, (uint64_t)c->link));
  }
  if (rc != ACL_SUCCESS) (void)aipc_py_note(p, f, AIPC_CALL_NAME(ipc_close), p->ipc_close(c->key));
}

static PyObject *fn_export(PyObject *module, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"array", "pids", "link", "stream", "torch_dtype", "keepalive", NULL};
  aipc_py_state *st = aipc_py_state_of_module(module);
  PyObject *array_obj, *pids_obj = Py_None, *link_obj = Py_None, *torch_dtype = Py_None, *result = NULL;
  PyObject *keepalive = Py_None, *stream_obj = Py_None, *event = NULL;
  int32_t *pids = NULL;
  Py_ssize_t npids = 0;
  int link;
  char key[AIPC_PY_KEY_LEN];
  aipc_py_allocation *alloc = NULL;

  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OOO$OO:export", kwlist, &array_obj, &pids_obj, &link_obj,
                                   &stream_obj, &torch_dtype, &keepalive)) {
    return NULL;
  }
  aclrtStream unused_stream;
  if (aipc_py_stream_arg(st, stream_obj, &unused_stream) < 0) return NULL;
  if (Py_TYPE(array_obj) != st->array_type) {
    PyErr_Format(PyExc_TypeError, "export() needs a DeviceArray, not %.100s", Py_TYPE(array_obj)->tp_name);
    return NULL;
  }
  aipc_py_array *a = (aipc_py_array *)array_obj;
  if (aipc_py_array_checked(a) == NULL) return NULL;
  if (parse_link(link_obj, &link) < 0) return NULL;
  if (aipc_py_check_torch_dtype(torch_dtype) < 0) return NULL;
  if (pids_obj != Py_None) {
    pids = aipc_py_parse_pids(pids_obj, &npids);
    if (pids == NULL) return NULL;
  }
  uint64_t flags = pids_obj == Py_None ? ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION
                                       : ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT;
  alloc = (aipc_py_allocation *)Py_NewRef((PyObject *)a->alloc); /* alive across the GIL release */

  /* Without a whitelist one export per allocation serves every view. */
  aipc_py_export_rec *rec =
      flags == ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION ? aipc_py_allocation_find_export(alloc, flags, link)
                                                                  : NULL;
  if (rec != NULL) {
    memcpy(key, rec->key, sizeof key);
  } else {
    export_call c = {alloc->base, alloc->size, flags, pids, npids, link, key};
    memset(key, 0, sizeof key);
    if (aipc_py_call(st, AIPC_PY_NO_DEVICE, export_memory, &c) < 0) goto done;
    if (aipc_py_allocation_add_export(alloc, key, flags, link) < 0) {
      aipc_py_failure f = AIPC_PY_FAILURE_INIT; /* the MemoryError set is the one to report */
      (void)aipc_py_call_released(st->provider, &f, AIPC_PY_NO_DEVICE, aipc_py_close_key, key);
      goto done;
    }
  }
  result = aipc_py_handle_build(st, key, alloc, a->dtype, torch_dtype == Py_None ? NULL : torch_dtype, a->ndim,
                                a->shape, a->strides, a->offset, (Py_ssize_t)alloc->size, alloc->device,
                                aipc_py_pid());
  if (result != NULL && keepalive != Py_None) ((aipc_py_handle *)result)->keepalive = Py_NewRef(keepalive);
  if (result != NULL && stream_obj != Py_None) {
    /* Stream order: the allocation's IPC event, recorded again behind the
     * work queued so far. One per allocation and alive as long as it, so a
     * handle can be opened whenever the memory can; an opener waits for the
     * latest record, which is never earlier than its own export's. */
    if (alloc->sync_event == NULL) alloc->sync_event = aipc_py_event_create(st, 1, 0, alloc->device);
    event = Py_XNewRef(alloc->sync_event);
    if (event == NULL || aipc_py_event_record(st, (aipc_py_event *)event, stream_obj) < 0) {
      Py_CLEAR(result); /* its dealloc ends the export if nothing else holds it */
      goto done;
    }
    aipc_py_handle *h = (aipc_py_handle *)result;
    h->has_event = 1;
    h->event = ((aipc_py_event *)event)->ipc_handle;
    h->event_obj = Py_NewRef(event);
  }
done:
  Py_XDECREF(event);
  Py_XDECREF(alloc);
  PyMem_Free(pids);
  return result;
}

/* ---- callbacks ---------------------------------------------------------------- */

/* _register_callbacks(*, hold, release, open_torch): see aipc_py_state. */
static PyObject *fn_register_callbacks(PyObject *module, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"hold", "release", "open_torch", NULL};
  aipc_py_state *st = aipc_py_state_of_module(module);
  PyObject *fns[3] = {NULL, NULL, NULL};

  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOO:_register_callbacks", kwlist, &fns[0], &fns[1], &fns[2]))
    return NULL;
  for (int i = 0; i < 3; i++) {
    if (fns[i] == NULL || !PyCallable_Check(fns[i])) {
      PyErr_Format(PyExc_TypeError, "_register_callbacks() needs a callable %s", kwlist[i]);
      return NULL;
    }
  }
  Py_XSETREF(st->hold, Py_NewRef(fns[0]));
  Py_XSETREF(st->release, Py_NewRef(fns[1]));
  Py_XSETREF(st->open_torch, Py_NewRef(fns[2]));
  Py_RETURN_NONE;
}

/* _refuse(code, call, message): raises AclError as a failed runtime call
 * would, for the package's own checks of what a handle claims. */
static PyObject *fn_refuse(PyObject *module, PyObject *args) {
  int code;
  const char *call, *message;
  if (!PyArg_ParseTuple(args, "iss:_refuse", &code, &call, &message)) return NULL;
  if (code == ACL_SUCCESS) {
    PyErr_SetString(PyExc_ValueError, "_refuse() needs an error code, not 0");
    return NULL;
  }
  aipc_py_failure f = AIPC_PY_FAILURE_INIT;
  f.code = code;
  f.call = call;
  snprintf(f.message, sizeof f.message, "%s", message);
  return aipc_py_raise(aipc_py_state_of_module(module), &f);
}

/* ---- the method table ------------------------------------------------------ */

/* Each docstring starts with a text signature ("name($module, ...)\n--\n\n"),
 * which inspect.signature() and help() read. */
PyMethodDef aipc_py_module_functions[] = {
    {"provider", fn_provider, METH_NOARGS,
     "provider($module, /)\n--\n\nName of the runtime in use: 'emulated' or 'cann'."},
    {"provider_info", fn_provider_info, METH_NOARGS,
     "provider_info($module, /)\n--\n\n"
     "The runtime in use, as a dict: name, library (path of libascendcl, None for the\n"
     "emulator), version (as the library reports it), version_source, dlpack_device_type\n"
     "(1 kDLCPU or 12 kDLExtDev), host_visible, unsupported ({call: CANN version that\n"
     "has it} for calls the loaded library lacks) and selection (why this provider)."},
    {"device_count", fn_device_count, METH_NOARGS,
     "device_count($module, /)\n--\n\nThe number of devices, an int (aclrtGetDeviceCount)."},
    {"set_device", fn_set_device, METH_O,
     "set_device($module, device, /)\n--\n\nMakes device the calling thread's current device (aclrtSetDevice)."},
    {"current_device", fn_current_device, METH_NOARGS,
     "current_device($module, /)\n--\n\nThe calling thread's current device, an int (aclrtGetDevice)."},
    {"bare_tgid", fn_bare_tgid, METH_NOARGS,
     "bare_tgid($module, /)\n--\n\n"
     "This process's id as exporters must whitelist it, an int (aclrtDeviceGetBareTgid)."},
    {"supernode_info", fn_supernode_info, METH_NOARGS,
     "supernode_info($module, /)\n--\n\n"
     "The emulated super-node as this process sees it, a dict: sdid (its server), supernode_dir\n"
     "(the rendezvous directory), supernode_id (hex; '' when the directory cannot be used),\n"
     "netns (its network namespace's inode) and problem (why the directory cannot be used, or '')."},
    {"mem_info", (PyCFunction)(void (*)(void))fn_mem_info, METH_VARARGS | METH_KEYWORDS,
     "mem_info($module, /, device=None)\n--\n\n"
     "(free, total) bytes of device memory (aclrtGetMemInfo); None: the current device."},
    {"empty", (PyCFunction)(void (*)(void))fn_empty, METH_VARARGS | METH_KEYWORDS,
     "empty($module, /, shape, dtype='float32', device=None)\n--\n\n"
     "A new DeviceArray: allocates device memory (aclrtMalloc, page-rounded, at least\n"
     "one page). device=None: the current device. The contents are unspecified."},
    {"zeros", (PyCFunction)(void (*)(void))fn_zeros, METH_VARARGS | METH_KEYWORDS,
     "zeros($module, /, shape, dtype='float32', device=None)\n--\n\n"
     "A new DeviceArray like empty(), filled with zero bytes (aclrtMemset)."},
    {"from_numpy", (PyCFunction)(void (*)(void))fn_from_numpy, METH_VARARGS | METH_KEYWORDS,
     "from_numpy($module, /, array, device=None)\n--\n\n"
     "A DeviceArray holding a C-contiguous device copy of a numpy array (host-to-device\n"
     "aclrtMemcpy)."},
    {"export", (PyCFunction)(void (*)(void))fn_export, METH_VARARGS | METH_KEYWORDS,
     "export($module, /, array, pids=None, link=None, stream=None, *, torch_dtype=None, keepalive=None)\n--\n\n"
     "Exports the allocation behind array for IPC (aclrtIpcMemGetExportKey) and\n"
     "returns an IpcHandle.\n"
     "pids=None: any process of this user may import (DISABLE_PID_VALIDATION);\n"
     "a sequence: only those processes (aclrtIpcMemSetImportPid; [] = nobody yet).\n"
     "link: None, 'sio', 'hccs', 'ub_one_port', 'ub_multi_port' (ACCESS_LINK).\n"
     "stream: a Stream whose queued work writes the memory: the handle carries an\n"
     "IPC event recorded there, and open() waits for it before it imports.\n"
     "keepalive: an object the returned handle keeps alive until it is closed or\n"
     "collected (e.g. the owner of wrap()ped memory)."},
    {"_reduce_for_one", aipc_py_handle_reduce_for_one, METH_O,
     "_reduce_for_one($module, obj, /)\n--\n\n"
     "IpcHandle and Event pickling for a channel with one receiver per copy\n"
     "(multiprocessing's ForkingPickler: queues and pipes): the sender's hold ends when\n"
     "that copy is opened (an event's: unpickled)."},
    {"_rebuild_event", aipc_py_event_rebuild, METH_VARARGS,
     "_rebuild_event($module, handle, hold, /)\n--\n\n"
     "Unpickling of an IPC event that carries its creator's hold ((address, token), or\n"
     "None): Event.from_handle(handle), then the hold is given back."},
    {"_rebuild_handle", aipc_py_handle_rebuild, METH_VARARGS,
     "_rebuild_handle($module, args, hold, /)\n--\n\n"
     "Unpickling of an IpcHandle: IpcHandle(*args), carrying the sender's hold on the\n"
     "memory ((address, token), or None), which its first open() gives back."},
    {"wrap", (PyCFunction)(void (*)(void))fn_wrap, METH_VARARGS | METH_KEYWORDS,
     "wrap($module, /, address, size, device=None, owner=None)\n--\n\n"
     "A uint8 DeviceArray over device memory this process got elsewhere (another\n"
     "library's aclrtMalloc, torch_npu's allocator), so it can be exported. address\n"
     "and size must be page-aligned and lie in one allocation of the runtime; the\n"
     "memory is never freed by ascend_ipc and must outlive the array, its views and\n"
     "its handles (see export(keepalive=...)), or owner, which the array and\n"
     "its views then keep alive. Wrapping the same range twice without an owner\n"
     "shares one record (and one pids=None export)."},
    {"_subview", (PyCFunction)(void (*)(void))fn_subview, METH_VARARGS | METH_KEYWORDS,
     "_subview($module, /, array, offset, shape, strides, dtype)\n--\n\n"
     "Another DeviceArray view of array's allocation, offset bytes from its base (internal)."},
    {"_view_at", (PyCFunction)(void (*)(void))fn_view_at, METH_VARARGS | METH_KEYWORDS,
     "_view_at($module, /, address, shape, strides, dtype)\n--\n\n"
     "The DeviceArray over the live device memory of this process that holds that\n"
     "view, or None (internal)."},
    {"_register_callbacks", (PyCFunction)(void (*)(void))fn_register_callbacks, METH_VARARGS | METH_KEYWORDS,
     "_register_callbacks($module, /, *, hold, release, open_torch)\n--\n\n"
     "What the extension calls back into the package with (ascend_ipc/__init__.py hands\n"
     "them over once; the extension never imports the package): put and drop's\n"
     "hold(obj, one_receiver) (an IpcHandle or an Event) and release(address, token), and\n"
     "open_torch(handle, *args, **kwargs) behind IpcHandle.open_torch()."},
    {"_refuse", fn_refuse, METH_VARARGS,
     "_refuse($module, code, call, message, /)\n--\n\n"
     "Raises AclError(code) from call with message, as a failed runtime call would\n"
     "(internal: the package's checks of what a handle claims)."},
    {"_live_allocations", fn_live_allocations, METH_NOARGS,
     "_live_allocations($module, /)\n--\n\n"
     "The live allocations of this process: a list of (base, size, device, kind)\n"
     "(internal, for tests)."},
    {0},
};
