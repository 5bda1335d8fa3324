/*
 * The virtual-memory calls for ascend_ipc._vmm (private functions of _C):
 * each one CANN call through the provider table, integers in and out
 * (handles and addresses as ints), AclError on failure. The Python layer
 * (ascend_ipc/_vmm.py) owns lifetimes; an import, which waits on another
 * process, runs with the GIL released.
 *
 * And the place check of what a shareable handle carries (its exporter's
 * host and namespaces): the IPC layer's own (emu/ipc/identity.h), with its
 * messages; it reads /proc and calls no runtime.
 */
#include "ipchandle.h"
#include "module.h"
#include "vmm.h"

#include "emu/ipc/identity.h"

static aclrtPhysicalMemProp device_prop(int32_t device, int huge1g) {
  aclrtPhysicalMemProp prop;
  memset(&prop, 0, sizeof prop);
  prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
  prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
  prop.memAttr = huge1g ? ACL_HBM_MEM_HUGE1G : ACL_HBM_MEM_HUGE;
  prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = (uint32_t)device;
  return prop;
}

/* The device an int-or-None argument names: None is the current one. */
static int parse_device(const aipc_provider *p, PyObject *obj, int32_t *device) {
  if (aipc_py_parse_device(obj, device) < 0) return -1;
  if (*device < 0) {
    int32_t cur = 0;
    if (p->get_device(&cur) != ACL_SUCCESS) {
      (void)p->get_recent_err_msg(); /* none set yet: device 0, as CANN defaults */
      cur = 0;
    }
    *device = cur;
  }
  return 0;
}

static PyObject *checked(aipc_py_state *st, aipc_py_failure *f, PyObject *ok) {
  if (f->code != ACL_SUCCESS) {
    Py_XDECREF(ok);
    return aipc_py_raise(st, f);
  }
  return ok;
}

#define VMM_BEGIN                                        \
  aipc_py_state *st = aipc_py_state_of_module(module);   \
  const aipc_provider *p = st->provider;                 \
  aipc_py_failure f = AIPC_PY_FAILURE_INIT;

#define NOTE(field, ...) aipc_py_note(p, &f, AIPC_CALL_NAME(field), p->field(__VA_ARGS__))

static PyObject *fn_granularity(PyObject *module, PyObject *args) {
  VMM_BEGIN
  PyObject *dev_obj;
  int huge1g;
  if (!PyArg_ParseTuple(args, "Op:_vmm_granularity", &dev_obj, &huge1g)) return NULL;
  int32_t device;
  if (parse_device(p, dev_obj, &device) < 0) return NULL;
  aclrtPhysicalMemProp prop = device_prop(device, huge1g);
  size_t g = 0;
  NOTE(mem_get_allocation_granularity, &prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &g);
  return checked(st, &f, PyLong_FromSize_t(g));
}

typedef struct malloc_args {
  size_t size;
  aclrtPhysicalMemProp prop;
  aclrtDrvMemHandle handle;
} malloc_args;

static void malloc_body(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  (void)device;
  malloc_args *a = arg;
  aipc_py_note(p, f, AIPC_CALL_NAME(malloc_physical), p->malloc_physical(&a->handle, a->size, &a->prop, 0));
}

static PyObject *fn_malloc(PyObject *module, PyObject *args) {
  VMM_BEGIN
  Py_ssize_t size;
  PyObject *dev_obj;
  int huge1g;
  if (!PyArg_ParseTuple(args, "nOp:_vmm_malloc", &size, &dev_obj, &huge1g)) return NULL;
  if (size <= 0) {
    PyErr_Format(PyExc_ValueError, "size must be positive, not %zd", size);
    return NULL;
  }
  malloc_args a = {.size = (size_t)size};
  int32_t device;
  if (parse_device(p, dev_obj, &device) < 0) return NULL;
  a.prop = device_prop(device, huge1g);
  aipc_py_call_released(p, &f, AIPC_PY_NO_DEVICE, malloc_body, &a);
  return checked(st, &f, PyLong_FromVoidPtr(a.handle));
}

/* Parses an address or handle given as an int. */
static int parse_ptr(PyObject *obj, void **out) {
  if (!PyLong_Check(obj) || PyBool_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "expected an int address or handle, not %.100s", Py_TYPE(obj)->tp_name);
    return -1;
  }
  unsigned long long v = PyLong_AsUnsignedLongLong(obj);
  if (PyErr_Occurred()) return -1;
  *out = (void *)(uintptr_t)v;
  return 0;
}

static PyObject *fn_free(PyObject *module, PyObject *arg) {
  VMM_BEGIN
  void *h;
  if (parse_ptr(arg, &h) < 0) return NULL;
  NOTE(free_physical, h);
  return checked(st, &f, Py_NewRef(Py_None));
}

static PyObject *fn_reserve(PyObject *module, PyObject *args) {
  VMM_BEGIN
  Py_ssize_t size;
  if (!PyArg_ParseTuple(args, "n:_vmm_reserve", &size)) return NULL;
  if (size <= 0) {
    PyErr_Format(PyExc_ValueError, "size must be positive, not %zd", size);
    return NULL;
  }
  void *v = NULL;
  NOTE(reserve_mem_address, &v, (size_t)size, 0, NULL, 0);
  return checked(st, &f, PyLong_FromVoidPtr(v));
}

static PyObject *fn_release(PyObject *module, PyObject *arg) {
  VMM_BEGIN
  void *v;
  if (parse_ptr(arg, &v) < 0) return NULL;
  NOTE(release_mem_address, v);
  return checked(st, &f, Py_NewRef(Py_None));
}

static PyObject *fn_map(PyObject *module, PyObject *args) {
  VMM_BEGIN
  PyObject *addr_obj, *handle_obj;
  Py_ssize_t size;
  int access = 1;
  if (!PyArg_ParseTuple(args, "OnO|p:_vmm_map", &addr_obj, &size, &handle_obj, &access)) return NULL;
  void *v, *h;
  if (parse_ptr(addr_obj, &v) < 0 || parse_ptr(handle_obj, &h) < 0) return NULL;
  if (size <= 0) {
    PyErr_Format(PyExc_ValueError, "size must be positive, not %zd", size);
    return NULL;
  }
  if (access)
    NOTE(map_mem, v, (size_t)size, 0, h, 0);
  else
    NOTE(mem_map_no_access, v, (size_t)size, 0, h, 0);
  return checked(st, &f, Py_NewRef(Py_None));
}

static PyObject *fn_unmap(PyObject *module, PyObject *arg) {
  VMM_BEGIN
  void *v;
  if (parse_ptr(arg, &v) < 0) return NULL;
  NOTE(unmap_mem, v);
  return checked(st, &f, Py_NewRef(Py_None));
}

static PyObject *fn_set_access(PyObject *module, PyObject *args) {
  VMM_BEGIN
  PyObject *addr_obj, *dev_obj;
  Py_ssize_t size;
  if (!PyArg_ParseTuple(args, "OnO:_vmm_set_access", &addr_obj, &size, &dev_obj)) return NULL;
  void *v;
  int32_t device;
  if (parse_ptr(addr_obj, &v) < 0 || parse_device(p, dev_obj, &device) < 0) return NULL;
  aclrtMemAccessDesc d;
  memset(&d, 0, sizeof d);
  d.flags = ACL_RT_MEM_ACCESS_FLAGS_READWRITE;
  d.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = (uint32_t)device;
  NOTE(mem_set_access, v, (size_t)size, &d, 1);
  return checked(st, &f, Py_NewRef(Py_None));
}

static PyObject *fn_retain(PyObject *module, PyObject *arg) {
  VMM_BEGIN
  void *v, *h = NULL;
  if (parse_ptr(arg, &v) < 0) return NULL;
  NOTE(mem_retain_allocation_handle, v, &h);
  return checked(st, &f, PyLong_FromVoidPtr(h));
}

static PyObject *fn_address_range(PyObject *module, PyObject *arg) {
  VMM_BEGIN
  void *v, *base = NULL;
  size_t size = 0;
  if (parse_ptr(arg, &v) < 0) return NULL;
  NOTE(mem_get_address_range, v, &base, &size);
  return checked(st, &f, Py_BuildValue("(Nn)", PyLong_FromVoidPtr(base), (Py_ssize_t)size));
}

static PyObject *fn_export(PyObject *module, PyObject *args) {
  VMM_BEGIN
  PyObject *handle_obj;
  int check_pids;
  if (!PyArg_ParseTuple(args, "Op:_vmm_export", &handle_obj, &check_pids)) return NULL;
  void *h;
  if (parse_ptr(handle_obj, &h) < 0) return NULL;
  uint64_t shareable = 0;
  NOTE(mem_export_to_shareable_handle, h, ACL_MEM_HANDLE_TYPE_NONE,
       check_pids ? ACL_RT_VMM_EXPORT_FLAG_DEFAULT : ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION, &shareable);
  return checked(st, &f, PyLong_FromUnsignedLongLong(shareable));
}

static PyObject *fn_set_pids(PyObject *module, PyObject *args) {
  VMM_BEGIN
  unsigned long long shareable;
  PyObject *pids_obj;
  if (!PyArg_ParseTuple(args, "KO:_vmm_set_pids", &shareable, &pids_obj)) return NULL;
  Py_ssize_t n;
  int32_t *pids = aipc_py_parse_pids(pids_obj, &n);
  if (!pids) return NULL;
  PyObject *result = NULL;
  for (Py_ssize_t i = 0; i < n; i++) {
    if (pids[i] <= 0) {
      PyErr_Format(PyExc_ValueError, "pids[%zd] = %d is not a process id", i, (int)pids[i]);
      goto done;
    }
  }
  if (n > 0) NOTE(mem_set_pid_to_shareable_handle, (uint64_t)shareable, pids, (size_t)n);
  result = checked(st, &f, Py_NewRef(Py_None));
done:
  PyMem_Free(pids);
  return result;
}

typedef struct import_args {
  uint64_t shareable;
  aclrtDrvMemHandle handle;
} import_args;

static void import_body(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  import_args *a = arg;
  aipc_py_note(p, f, AIPC_CALL_NAME(mem_import_from_shareable_handle),
               p->mem_import_from_shareable_handle(a->shareable, device, &a->handle));
}

static PyObject *fn_import(PyObject *module, PyObject *args) {
  VMM_BEGIN
  unsigned long long shareable;
  PyObject *dev_obj;
  if (!PyArg_ParseTuple(args, "KO:_vmm_import", &shareable, &dev_obj)) return NULL;
  int32_t device;
  if (parse_device(p, dev_obj, &device) < 0) return NULL;
  import_args a = {.shareable = shareable};
  /* CANN's import needs the device current (its context): made so for the call. */
  aipc_py_call_released(p, &f, device, import_body, &a);
  return checked(st, &f, PyLong_FromVoidPtr(a.handle));
}

static PyObject *fn_physical_size(PyObject *module, PyObject *arg) {
  VMM_BEGIN
  void *h;
  if (parse_ptr(arg, &h) < 0) return NULL;
  if (p->mem_physical_size == NULL) Py_RETURN_NONE; /* the runtime cannot tell */
  size_t size = 0;
  aipc_py_note(p, &f, "mem_physical_size", p->mem_physical_size(h, &size));
  return checked(st, &f, PyLong_FromSize_t(size));
}

/* ---- places ------------------------------------------------------------- */

static PyObject *fn_place_here(PyObject *module, PyObject *unused) {
  aipc__place_full here = aipc__place_full_here();
  return Py_BuildValue("(KKK)", (unsigned long long)here.host, (unsigned long long)here.net,
                       (unsigned long long)here.pid);
}

static PyObject *fn_place_check(PyObject *module, PyObject *args) {
  aipc_py_state *st = aipc_py_state_of_module(module);
  PyObject *place;
  const char *call, *who, *noun;
  unsigned long long host, net, pid;
  aipc_py_failure f = AIPC_PY_FAILURE_INIT;

  if (!PyArg_ParseTuple(args, "Osss:_place_check", &place, &call, &who, &noun)) return NULL;
  if (place == Py_None) Py_RETURN_NONE; /* unknown: no evidence */
  if (!PyArg_ParseTuple(place, "KKK;place must be None or (host, net, pid)", &host, &net, &pid)) return NULL;
  aipc__place_full theirs = {host, net, pid};
  if (!aipc__place_full_elsewhere(theirs, noun, call, who, f.message, sizeof f.message)) Py_RETURN_NONE;
  f.code = ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
  f.call = call;
  return aipc_py_raise(st, &f);
}

PyMethodDef aipc_py_vmm_functions[] = {
    {"_place_here", fn_place_here, METH_NOARGS,
     "_place_here($module, /)\n--\n\nWhere this process runs: (host boot, network namespace, PID namespace) ids, 0 "
     "where unknown."},
    {"_place_check", fn_place_check, METH_VARARGS,
     "_place_check($module, place, call, who, noun, /)\n--\n\nNone when place (a _place_here() of the process that "
     "issued it, or None: unknown)\nis here as far as known; else AclError 207000 (ACL_ERROR_RT_FEATURE_NOT_SUPPORT) "
     "from call,\nsaying which part differs and what to do, as an import of a key from there says."},
    {"_vmm_granularity", fn_granularity, METH_VARARGS,
     "_vmm_granularity($module, device, huge1g, /)\n--\n\nThe minimum granularity in bytes of device memory (1 GiB pages with huge1g)."},
    {"_vmm_malloc", fn_malloc, METH_VARARGS,
     "_vmm_malloc($module, size, device, huge1g, /)\n--\n\naclrtMallocPhysical: the handle, as an int."},
    {"_vmm_free", fn_free, METH_O,
     "_vmm_free($module, handle, /)\n--\n\naclrtFreePhysical."},
    {"_vmm_reserve", fn_reserve, METH_VARARGS,
     "_vmm_reserve($module, size, /)\n--\n\naclrtReserveMemAddress: the address."},
    {"_vmm_release", fn_release, METH_O,
     "_vmm_release($module, address, /)\n--\n\naclrtReleaseMemAddress."},
    {"_vmm_map", fn_map, METH_VARARGS,
     "_vmm_map($module, address, size, handle, access=True, /)\n--\n\naclrtMapMem, or aclrtMemMapNoAccess when access is false."},
    {"_vmm_unmap", fn_unmap, METH_O,
     "_vmm_unmap($module, address, /)\n--\n\naclrtUnmapMem."},
    {"_vmm_set_access", fn_set_access, METH_VARARGS,
     "_vmm_set_access($module, address, size, device, /)\n--\n\naclrtMemSetAccess: read-write for device."},
    {"_vmm_retain", fn_retain, METH_O,
     "_vmm_retain($module, address, /)\n--\n\naclrtMemRetainAllocationHandle: the handle mapped at address."},
    {"_vmm_address_range", fn_address_range, METH_O,
     "_vmm_address_range($module, address, /)\n--\n\naclrtMemGetAddressRange: (base, size)."},
    {"_vmm_export", fn_export, METH_VARARGS,
     "_vmm_export($module, handle, check_pids, /)\n--\n\naclrtMemExportToShareableHandle: the 64-bit shareable handle."},
    {"_vmm_set_pids", fn_set_pids, METH_VARARGS,
     "_vmm_set_pids($module, shareable, pids, /)\n--\n\naclrtMemSetPidToShareableHandle."},
    {"_vmm_physical_size", fn_physical_size, METH_O,
     "_vmm_physical_size($module, handle, /)\n--\n\nBytes of the physical allocation behind handle, or None where "
     "the runtime cannot tell."},
    {"_vmm_import", fn_import, METH_VARARGS,
     "_vmm_import($module, shareable, device, /)\n--\n\naclrtMemImportFromShareableHandle on device (GIL released): the handle."},
    {NULL, NULL, 0, NULL},
};
