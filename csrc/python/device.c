/*
 * Runtime calls and the current device: device= arguments, and making a
 * device current for the calling thread around a call.
 */
#include "module.h"

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
