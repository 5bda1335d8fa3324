/*
 * ascend_ipc._C: module definition, state, and the device functions.
 * Multi-phase initialisation; every type and the exception live in the state.
 */
#define AIPC_PY_DEFINE_NUMPY_API
#include "module.h"

#include <string.h>

#include "allocation.h"
#include "cann/cann_provider.h"
#include "devicearray.h"
#include "ipchandle.h"

/* ---- the current device around a call -------------------------------------- */

aclError aipc_py_device_enter(const aipc_provider *p, aipc_py_failure *f, int32_t device,
                              aipc_py_device_scope *scope) {
  int32_t cur = -1;
  scope->changed = 0;
  if (p->get_device(&cur) != ACL_SUCCESS) {
    /* A real runtime reports no current device until one is set. */
    (void)p->get_recent_err_msg();
    cur = -1;
  }
  scope->saved = cur;
  if (device < 0) device = cur < 0 ? 0 : cur;
  scope->device = device;
  if (device == cur) return ACL_SUCCESS;
  aclError rc = aipc_py_note(p, f, "aclrtSetDevice", p->set_device(device));
  if (rc == ACL_SUCCESS) scope->changed = 1;
  return rc;
}

void aipc_py_device_leave(const aipc_provider *p, aipc_py_device_scope *scope) {
  if (scope->changed && scope->saved >= 0) {
    if (p->set_device(scope->saved) != ACL_SUCCESS) (void)p->get_recent_err_msg();
  }
  scope->changed = 0;
}

int aipc_py_parse_device(PyObject *obj, int32_t *device) {
  if (obj == Py_None) {
    *device = -1;
    return 0;
  }
  if (!PyLong_Check(obj) || PyBool_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "device must be None or an int, not %.100s", Py_TYPE(obj)->tp_name);
    return -1;
  }
  long v = PyLong_AsLong(obj);
  if (v == -1 && PyErr_Occurred()) return -1;
  if (v < 0 || v > INT32_MAX) {
    PyErr_Format(PyExc_ValueError, "device must be a device id >= 0, not %ld", v);
    return -1;
  }
  *device = (int32_t)v;
  return 0;
}

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
  const aipc_cann_info *ci = strcmp(p->name, "cann") == 0 ? aipc__cann_info() : NULL;
  PyObject *d = PyDict_New(), *missing = NULL;
  if (d == NULL) return NULL;
  if (dict_set_steal(d, "name", PyUnicode_FromString(p->name)) < 0 ||
      dict_set_steal(d, "library", str_or_none(p->library_path)) < 0 ||
      dict_set_steal(d, "version", str_or_none(ci != NULL ? ci->version : NULL)) < 0 ||
      dict_set_steal(d, "version_source", str_or_none(ci != NULL ? ci->version_source : NULL)) < 0 ||
      dict_set_steal(d, "dlpack_device_type", PyLong_FromLong(p->dlpack_device_type)) < 0 ||
      dict_set_steal(d, "host_visible", PyBool_FromLong(p->host_visible)) < 0 ||
      dict_set_steal(d, "selection", str_or_none(aipc_py_selection_note())) < 0) {
    goto fail;
  }
  missing = PyDict_New();
  if (missing == NULL) goto fail;
  for (size_t i = 0; ci != NULL && i < ci->n_missing; i++) {
    if (dict_set_steal(missing, ci->missing[i], PyUnicode_FromString(ci->missing_since[i])) < 0) goto fail;
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
  if (aipc_py_note(st->provider, &f, "aclrtGetDeviceCount", st->provider->get_device_count(&n)) != ACL_SUCCESS) {
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
  if (aipc_py_note(st->provider, &f, "aclrtSetDevice", st->provider->set_device((int32_t)v)) != ACL_SUCCESS) {
    return aipc_py_raise(st, &f);
  }
  Py_RETURN_NONE;
}

static PyObject *fn_current_device(PyObject *module, PyObject *unused) {
  aipc_py_state *st = state(module);
  aipc_py_failure f = AIPC_PY_FAILURE_INIT;
  int32_t d = 0;
  if (aipc_py_note(st->provider, &f, "aclrtGetDevice", st->provider->get_device(&d)) != ACL_SUCCESS) {
    return aipc_py_raise(st, &f);
  }
  return PyLong_FromLong(d);
}

static PyObject *fn_bare_tgid(PyObject *module, PyObject *unused) {
  aipc_py_state *st = state(module);
  aipc_py_failure f = AIPC_PY_FAILURE_INIT;
  int32_t pid = 0;
  if (aipc_py_note(st->provider, &f, "aclrtDeviceGetBareTgid", st->provider->device_get_bare_tgid(&pid)) !=
      ACL_SUCCESS) {
    return aipc_py_raise(st, &f);
  }
  return PyLong_FromLong(pid);
}

static PyObject *fn_mem_info(PyObject *module, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"device", NULL};
  aipc_py_state *st = state(module);
  const aipc_provider *p = st->provider;
  PyObject *device_obj = Py_None;
  int32_t device;
  size_t free_bytes = 0, total = 0;
  aipc_py_failure f = AIPC_PY_FAILURE_INIT;
  aipc_py_device_scope scope;

  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:mem_info", kwlist, &device_obj)) return NULL;
  if (aipc_py_parse_device(device_obj, &device) < 0) return NULL;
  if (p->get_mem_info == NULL) {
    PyErr_Format(PyExc_NotImplementedError, "the %s provider cannot report memory", p->name);
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS
  if (aipc_py_device_enter(p, &f, device, &scope) == ACL_SUCCESS) {
    (void)aipc_py_note(p, &f, "aclrtGetMemInfo", p->get_mem_info(ACL_HBM_MEM, &free_bytes, &total));
    aipc_py_device_leave(p, &scope);
  }
  Py_END_ALLOW_THREADS
  if (f.code != ACL_SUCCESS) return aipc_py_raise(st, &f);
  return Py_BuildValue("(nn)", (Py_ssize_t)free_bytes, (Py_ssize_t)total);
}

/* ---- module --------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    {"provider", fn_provider, METH_NOARGS,
     "provider() -> str\n\nName of the runtime in use: 'emulated' or 'cann'."},
    {"provider_info", fn_provider_info, METH_NOARGS,
     "provider_info() -> dict\n\nThe runtime in use: name, library (path of libascendcl, None for the\n"
     "emulator), version (as the library reports it), version_source, dlpack_device_type\n"
     "(1 kDLCPU or 12 kDLExtDev), host_visible, unsupported ({call: CANN version that\n"
     "has it} for calls the loaded library lacks) and selection (why this provider)."},
    {"device_count", fn_device_count, METH_NOARGS, "device_count() -> int (aclrtGetDeviceCount)"},
    {"set_device", fn_set_device, METH_O,
     "set_device(device)\n\nMakes device the calling thread's current device (aclrtSetDevice)."},
    {"current_device", fn_current_device, METH_NOARGS,
     "current_device() -> int\n\nThe calling thread's current device (aclrtGetDevice)."},
    {"bare_tgid", fn_bare_tgid, METH_NOARGS,
     "bare_tgid() -> int\n\nThis process's id as exporters must whitelist it (aclrtDeviceGetBareTgid)."},
    {"mem_info", (PyCFunction)(void (*)(void))fn_mem_info, METH_VARARGS | METH_KEYWORDS,
     "mem_info(device=None) -> (free, total)\n\nBytes of device memory (aclrtGetMemInfo); None: the current device."},
    {"empty", (PyCFunction)(void (*)(void))aipc_py_empty, METH_VARARGS | METH_KEYWORDS,
     "empty(shape, dtype='float32', device=None) -> DeviceArray\n\n"
     "Allocates device memory (aclrtMalloc, page-rounded, at least one page).\n"
     "device=None: the current device. The contents are unspecified."},
    {"zeros", (PyCFunction)(void (*)(void))aipc_py_zeros, METH_VARARGS | METH_KEYWORDS,
     "zeros(shape, dtype='float32', device=None) -> DeviceArray\n\nLike empty(), filled with zero bytes (aclrtMemset)."},
    {"from_numpy", (PyCFunction)(void (*)(void))aipc_py_from_numpy, METH_VARARGS | METH_KEYWORDS,
     "from_numpy(array, device=None) -> DeviceArray\n\n"
     "A C-contiguous device copy of a numpy array (host-to-device aclrtMemcpy)."},
    {"export", (PyCFunction)(void (*)(void))aipc_py_export, METH_VARARGS | METH_KEYWORDS,
     "export(array, pids=None, link=None, *, torch_dtype=None, keepalive=None) -> IpcHandle\n\n"
     "Exports the allocation behind array for IPC (aclrtIpcMemGetExportKey).\n"
     "pids=None: any process of this user may import (DISABLE_PID_VALIDATION);\n"
     "a sequence: only those processes (aclrtIpcMemSetImportPid; [] = nobody yet).\n"
     "link: None, 'sio', 'hccs', 'ub_one_port', 'ub_multi_port' (ACCESS_LINK).\n"
     "keepalive: an object the returned handle keeps alive until it is closed or\n"
     "collected (e.g. the owner of wrap()ped memory)."},
    {"wrap", (PyCFunction)(void (*)(void))aipc_py_wrap, METH_VARARGS | METH_KEYWORDS,
     "wrap(address, size, device=None) -> DeviceArray\n\n"
     "A uint8 DeviceArray over device memory this process got elsewhere (another\n"
     "library's aclrtMalloc, torch_npu's allocator), so it can be exported. address\n"
     "and size must be page-aligned and lie in one allocation of the runtime; the\n"
     "memory is never freed by ascend_ipc and must outlive the array, its views and\n"
     "its handles (see export(keepalive=...)). Wrapping the same range twice\n"
     "shares one record (and one pids=None export)."},
    {"_subview", (PyCFunction)(void (*)(void))aipc_py_subview, METH_VARARGS | METH_KEYWORDS,
     "_subview(array, offset, shape, strides, dtype) -> DeviceArray\n\n"
     "Another view of array's allocation, offset bytes from its base (internal)."},
    {"_view_at", (PyCFunction)(void (*)(void))aipc_py_view_at, METH_VARARGS | METH_KEYWORDS,
     "_view_at(address, shape, strides, dtype) -> DeviceArray | None\n\n"
     "The live device memory of this process holding that view (internal)."},
    {"_live_allocations", aipc_py_live_allocations, METH_NOARGS,
     "_live_allocations() -> list of (base, size, device, kind) (internal, for tests)."},
    {NULL},
};

static int module_exec(PyObject *module) {
  aipc_py_state *st = aipc_py_state_of_module(module);
  if (_import_array() < 0) return -1;
  st->provider = aipc_py_select_provider();
  if (st->provider == NULL) return -1;
  if (st->provider->init != NULL) {
    aipc_py_failure f = AIPC_PY_FAILURE_INIT;
    if (aipc_py_note(st->provider, &f, "aclInit", st->provider->init(NULL)) != ACL_SUCCESS) {
      PyErr_Format(PyExc_ImportError, "ascend_ipc: aclInit failed: [%d] %s", (int)f.code, f.message);
      return -1;
    }
  }
  if (aipc_py_errors_init(module, st) < 0) return -1;
  if (aipc_py_allocation_init_type(module, st) < 0) return -1;
  if (aipc_py_array_init_type(module, st) < 0) return -1;
  if (aipc_py_handle_init_type(module, st) < 0) return -1;
  if (PyModule_AddIntConstant(module, "PAGE_SIZE", (long)AIPC_PY_PAGE) < 0) return -1;
  if (PyModule_AddIntConstant(module, "KEY_LEN", AIPC_PY_KEY_LEN) < 0) return -1;
  return 0;
}

static int module_traverse(PyObject *module, visitproc visit, void *arg) {
  aipc_py_state *st = aipc_py_state_of_module(module);
  Py_VISIT(st->allocation_type);
  Py_VISIT(st->array_type);
  Py_VISIT(st->handle_type);
  Py_VISIT(st->acl_error);
  return 0;
}

static int module_clear(PyObject *module) {
  aipc_py_state *st = aipc_py_state_of_module(module);
  Py_CLEAR(st->allocation_type);
  Py_CLEAR(st->array_type);
  Py_CLEAR(st->handle_type);
  Py_CLEAR(st->acl_error);
  return 0;
}

static void module_free(void *module) {
  (void)module_clear((PyObject *)module);
  aipc_py_registry_free(&aipc_py_state_of_module((PyObject *)module)->registry);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

PyModuleDef aipc_py_module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ascend_ipc._C",
    .m_doc = "ascend_ipc._C: CANN IPC memory sharing (the runtime reached through its provider table).",
    .m_size = sizeof(aipc_py_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__C(void) { return PyModuleDef_Init(&aipc_py_module_def); }
