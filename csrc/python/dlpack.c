/*
 * The DLPack protocol of DeviceArray: __dlpack__ and __dlpack_device__.
 *
 * A capsule owns one manager context: the DLManagedTensor[Versioned] itself,
 * its shape and strides, and strong references to the DeviceArray and to its
 * allocation, so the memory outlives the capsule and its consumer even if the
 * array is closed meanwhile. The deleter drops them exactly once: the
 * capsule's destructor calls it if no consumer took the capsule (its name is
 * still "dltensor[_versioned]"), else the consumer does, from any thread.
 */
#include "devicearray.h" /* Python.h first: it sets the feature macros */
#include "dlpack_abi.h"
#include "dtype.h"

#include <string.h>

typedef struct dlpack_ctx {
  union {
    aipc_DLManagedTensor legacy;
    aipc_DLManagedTensorVersioned versioned;
  } m;
  PyObject *array;
  PyObject *alloc;
  int64_t dims[]; /* shape, then strides (in elements); at least one slot each */
} dlpack_ctx;

static void ctx_release(dlpack_ctx *ctx) {
  /* The interpreter may be gone if a consumer frees its tensor at exit from a
   * thread of its own; then the references die with the process. */
  if (Py_IsInitialized()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    Py_CLEAR(ctx->array);
    Py_CLEAR(ctx->alloc);
    PyErr_Restore(type, value, tb);
    PyGILState_Release(gil);
  }
  PyMem_RawFree(ctx);
}

static void deleter_legacy(aipc_DLManagedTensor *m) {
  if (m != NULL) ctx_release((dlpack_ctx *)m->manager_ctx);
}

static void deleter_versioned(aipc_DLManagedTensorVersioned *m) {
  if (m != NULL) ctx_release((dlpack_ctx *)m->manager_ctx);
}

static void capsule_destructor_legacy(PyObject *capsule) {
  if (!PyCapsule_IsValid(capsule, AIPC_DLPACK_CAPSULE_LEGACY)) return; /* consumed */
  aipc_DLManagedTensor *m = PyCapsule_GetPointer(capsule, AIPC_DLPACK_CAPSULE_LEGACY);
  if (m != NULL && m->deleter != NULL) m->deleter(m);
}

static void capsule_destructor_versioned(PyObject *capsule) {
  if (!PyCapsule_IsValid(capsule, AIPC_DLPACK_CAPSULE_VERSIONED)) return; /* consumed */
  aipc_DLManagedTensorVersioned *m = PyCapsule_GetPointer(capsule, AIPC_DLPACK_CAPSULE_VERSIONED);
  if (m != NULL && m->deleter != NULL) m->deleter(m);
}

/* (device_type, device_id) of the array's memory in DLPack terms. On a
 * host-visible provider (the emulator) that is the CPU, whose only device id
 * is 0; otherwise the provider's type with the CANN device id. */
static void dl_device_of(aipc_py_state *st, aipc_py_array *a, int *type, int *id) {
  *type = st->provider->dlpack_device_type;
  *id = *type == AIPC_DL_CPU ? 0 : (int)a->device;
}

PyObject *aipc_py_array_dlpack_device(PyObject *self, PyObject *unused) {
  aipc_py_state *st = aipc_py_state_of(Py_TYPE(self));
  int type, id;
  dl_device_of(st, (aipc_py_array *)self, &type, &id);
  return Py_BuildValue("(ii)", type, id);
}

static int parse_int_pair(PyObject *obj, const char *what, long *a, long *b) {
  if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 2) {
    PyErr_Format(PyExc_TypeError, "%s must be a tuple of two ints, not %.100s", what, Py_TYPE(obj)->tp_name);
    return -1;
  }
  *a = PyLong_AsLong(PyTuple_GET_ITEM(obj, 0));
  if (*a == -1 && PyErr_Occurred()) return -1;
  *b = PyLong_AsLong(PyTuple_GET_ITEM(obj, 1));
  if (*b == -1 && PyErr_Occurred()) return -1;
  return 0;
}

/* ---- __dlpack__: parse the arguments, validate the request, build the capsule -- */

/* The arguments as the consumer passed them (borrowed; None when not passed).
 * Whether stream and dl_device were passed at all matters to the NPU check. */
typedef struct dlpack_args {
  PyObject *stream;
  PyObject *max_version;
  PyObject *dl_device;
  PyObject *copy;
  int stream_passed;
  int dl_device_passed;
} dlpack_args;

/* What validation decided the capsule holds. */
typedef struct dlpack_plan {
  aipc_py_allocation *alloc; /* a reference of the plan's own */
  int versioned;             /* dltensor_versioned rather than dltensor */
  int dev_type, dev_id;
} dlpack_plan;

static int dlpack_parse(PyObject *args, PyObject *kwargs, dlpack_args *out) {
  static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
  PyObject *stream = NULL, *max_version = NULL, *dl_device = NULL, *copy = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOO:__dlpack__", kwlist, &stream, &max_version,
                                   &dl_device, &copy)) {
    return -1;
  }
  out->stream_passed = stream != NULL;
  out->dl_device_passed = dl_device != NULL;
  out->stream = stream != NULL ? stream : Py_None;
  out->max_version = max_version != NULL ? max_version : Py_None;
  out->dl_device = dl_device != NULL ? dl_device : Py_None;
  out->copy = copy != NULL ? copy : Py_None;
  return 0;
}

/*
 * Checks the request against the array and the provider and fills plan; -1
 * with an exception if it cannot be met. The values of max_version and
 * dl_device are read here, in this order, so that a request with several
 * faults reports the same one first as ever.
 */
static int dlpack_check(aipc_py_state *st, aipc_py_array *self, aipc_py_allocation *alloc, const dlpack_args *req,
                        dlpack_plan *plan);

static int dlpack_validate(aipc_py_state *st, aipc_py_array *self, const dlpack_args *req, dlpack_plan *plan) {
  aipc_py_allocation *alloc = aipc_py_array_checked(self);
  if (alloc == NULL) return -1;
  /* Reading max_version and dl_device may run Python code (__index__) that
   * closes the array: the plan's own reference keeps the memory from being
   * released meanwhile, and the array must still be open afterwards. */
  Py_INCREF(alloc);
  if (dlpack_check(st, self, alloc, req, plan) < 0 || aipc_py_array_checked(self) != alloc) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "DeviceArray is closed");
    Py_DECREF(alloc);
    return -1;
  }
  return 0;
}

static int dlpack_check(aipc_py_state *st, aipc_py_array *self, aipc_py_allocation *alloc, const dlpack_args *req,
                        dlpack_plan *plan) {
  int dev_type, dev_id;
  dl_device_of(st, self, &dev_type, &dev_id);

  /* numpy.from_dlpack (2.x) calls __dlpack__(dl_device=None, copy=..., max_version=...)
   * without a stream, takes the capsule, and then refuses any device but the
   * CPU with a RuntimeError. NPU memory is refused here instead, with a
   * BufferError that says what to do. Consumers that take NPU memory
   * (torch with torch_npu) leave dl_device out or name the device. */
  if (dev_type == AIPC_DL_EXT_DEV && req->dl_device_passed && req->dl_device == Py_None && !req->stream_passed) {
    PyErr_Format(PyExc_BufferError,
                 "__dlpack__: the array is NPU device memory (DLPack device (%d, %d), kDLExtDev), which the "
                 "CPU cannot address, and the consumer asked for no device in particular (dl_device=None, as "
                 "numpy.from_dlpack does; numpy takes CPU memory only). Use DeviceArray.numpy() for a host "
                 "copy, or torch.from_dlpack with torch_npu for an NPU tensor",
                 dev_type, dev_id);
    return -1;
  }

  /* stream: this memory has no stream semantics the consumer could ask us to
   * order against (copies of the emulator are synchronous); None, or -1
   * ("no synchronization"), is all that can be honoured. */
  PyObject *stream = req->stream;
  if (stream != Py_None) {
    long s = PyLong_Check(stream) ? PyLong_AsLong(stream) : 0;
    if (s == -1 && PyErr_Occurred()) return -1;
    if (!PyLong_Check(stream) || s != -1) {
      PyErr_Format(PyExc_BufferError,
                   "__dlpack__: stream must be None (or -1) for DLPack device type %d, got %R", dev_type,
                   stream);
      return -1;
    }
  }
  int versioned = 0;
  if (req->max_version != Py_None) {
    long major, minor;
    if (parse_int_pair(req->max_version, "max_version", &major, &minor) < 0) return -1;
    versioned = major >= 1;
  }
  if (req->dl_device != Py_None) {
    long type, id;
    if (parse_int_pair(req->dl_device, "dl_device", &type, &id) < 0) return -1;
    if (type != dev_type && dev_type == AIPC_DL_EXT_DEV && (type == AIPC_DL_CPU || type == AIPC_DL_CUDA_HOST)) {
      PyErr_Format(PyExc_BufferError,
                   "__dlpack__: the array is NPU device memory (DLPack device (%d, %d), kDLExtDev), which the "
                   "CPU cannot address; a host consumer such as numpy cannot share it. Use "
                   "DeviceArray.numpy() for a host copy, or torch_npu (torch.from_dlpack) for an NPU tensor",
                   dev_type, dev_id);
      return -1;
    }
    if (type != dev_type || id != dev_id) {
      PyErr_Format(PyExc_BufferError,
                   "__dlpack__: the array is on DLPack device (%d, %d) and cannot be exported to "
                   "(%ld, %ld) without a copy",
                   dev_type, dev_id, type, id);
      return -1;
    }
  }
  PyObject *copy = req->copy;
  if (copy != Py_None) {
    if (!PyBool_Check(copy)) {
      PyErr_Format(PyExc_TypeError, "__dlpack__: copy must be None, True or False, not %.100s",
                   Py_TYPE(copy)->tp_name);
      return -1;
    }
    if (copy == Py_True) {
      PyErr_SetString(PyExc_BufferError,
                      "__dlpack__: copy=True is not supported: the capsule always shares the device "
                      "memory (use DeviceArray.numpy() for a host copy)");
      return -1;
    }
  }

  Py_ssize_t itemsize = PyDataType_ELSIZE(self->dtype);
  for (int i = 0; i < self->ndim; i++) {
    if (self->strides[i] < 0 && self->shape[i] > 1) {
      /* Legal in DLPack, but torch.from_dlpack aborts the whole process on
       * them (c10::Error escapes), so no capsule offers them. */
      PyErr_SetString(PyExc_BufferError,
                      "__dlpack__: views with negative strides are not exported (torch cannot take "
                      "them); use numpy() for a copy, or export the forward view");
      return -1;
    }
    if (self->strides[i] % itemsize != 0) {
      PyErr_SetString(PyExc_BufferError,
                      "__dlpack__: a stride is not a multiple of the item size; DLPack counts strides in "
                      "elements");
      return -1;
    }
  }

  plan->alloc = alloc;
  plan->versioned = versioned;
  plan->dev_type = dev_type;
  plan->dev_id = dev_id;
  return 0;
}

/* The capsule for a validated request: it holds the array and its allocation
 * until its deleter runs. */
static PyObject *dlpack_build(aipc_py_array *self, const dlpack_plan *plan) {
  Py_ssize_t itemsize = PyDataType_ELSIZE(self->dtype);
  int ndim = self->ndim;
  int slots = ndim > 0 ? ndim : 1;
  dlpack_ctx *ctx = PyMem_RawCalloc(1, sizeof(dlpack_ctx) + 2 * (size_t)slots * sizeof(int64_t));
  if (ctx == NULL) return PyErr_NoMemory();
  int64_t *shape = ctx->dims, *strides = ctx->dims + slots;
  for (int i = 0; i < ndim; i++) {
    shape[i] = (int64_t)self->shape[i];
    /* A dimension of extent 1 never uses its stride; a negative one there
     * is written as its absolute value, so no capsule carries one. */
    Py_ssize_t step = self->strides[i] < 0 ? -self->strides[i] : self->strides[i];
    strides[i] = (int64_t)(step / itemsize);
  }
  aipc_DLTensor *t = plan->versioned ? &ctx->m.versioned.dl_tensor : &ctx->m.legacy.dl_tensor;
  t->data = (char *)plan->alloc->base + self->offset;
  t->device.device_type = (aipc_DLDeviceType)plan->dev_type;
  t->device.device_id = plan->dev_id;
  t->ndim = ndim;
  t->dtype = aipc_py_dtype_dlpack(self->dtype);
  t->shape = shape;
  t->strides = strides;
  t->byte_offset = 0;
  ctx->array = Py_NewRef((PyObject *)self);
  ctx->alloc = Py_NewRef((PyObject *)plan->alloc);

  PyObject *capsule;
  if (plan->versioned) {
    ctx->m.versioned.version.major = AIPC_DLPACK_MAJOR_VERSION;
    ctx->m.versioned.version.minor = AIPC_DLPACK_MINOR_VERSION;
    ctx->m.versioned.manager_ctx = ctx;
    ctx->m.versioned.deleter = deleter_versioned;
    ctx->m.versioned.flags = 0; /* writable, not a copy */
    capsule = PyCapsule_New(&ctx->m.versioned, AIPC_DLPACK_CAPSULE_VERSIONED, capsule_destructor_versioned);
    if (capsule == NULL) deleter_versioned(&ctx->m.versioned);
  } else {
    ctx->m.legacy.manager_ctx = ctx;
    ctx->m.legacy.deleter = deleter_legacy;
    capsule = PyCapsule_New(&ctx->m.legacy, AIPC_DLPACK_CAPSULE_LEGACY, capsule_destructor_legacy);
    if (capsule == NULL) deleter_legacy(&ctx->m.legacy);
  }
  return capsule;
}

PyObject *aipc_py_array_dlpack(PyObject *self_obj, PyObject *args, PyObject *kwargs) {
  aipc_py_array *self = (aipc_py_array *)self_obj;
  dlpack_args req;
  dlpack_plan plan;
  if (dlpack_parse(args, kwargs, &req) < 0) return NULL;
  if (dlpack_validate(aipc_py_state_of(Py_TYPE(self_obj)), self, &req, &plan) < 0) return NULL;
  PyObject *capsule = dlpack_build(self, &plan);
  Py_DECREF(plan.alloc);
  return capsule;
}
