/*
 * Runtime calls from the extension: with the GIL released, on the device the
 * caller asked for (made current for the calling thread only for the call);
 * and the device= argument every such function takes.
 */
#include "module.h"
#include <time.h>

/* ---- the current device around a call -------------------------------------- */

typedef struct device_scope {
  int32_t saved;  /* the thread's device before, or -1 if it had none */
  int32_t device; /* the device current during the call */
  int changed;
} device_scope;

/* Makes device current for this thread (device < 0: keep the current one). */
static aclError device_enter(const aipc_provider *p, aipc_py_failure *f, int32_t device, device_scope *scope) {
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
  aclError rc = aipc_py_note(p, f, AIPC_CALL_NAME(set_device), p->set_device(device));
  if (rc == ACL_SUCCESS) scope->changed = 1;
  return rc;
}

/* Restores what enter changed. */
static void device_leave(const aipc_provider *p, device_scope *scope) {
  if (scope->changed && scope->saved >= 0) {
    if (p->set_device(scope->saved) != ACL_SUCCESS) (void)p->get_recent_err_msg();
  }
  scope->changed = 0;
}

/* ---- runtime calls with the GIL released ------------------------------------ */

aclError aipc_py_call_released(const aipc_provider *p, aipc_py_failure *f, int32_t device,
                               aipc_py_released_fn body, void *arg) {
  Py_BEGIN_ALLOW_THREADS
  if (device == AIPC_PY_NO_DEVICE) {
    body(p, f, AIPC_PY_NO_DEVICE, arg);
  } else {
    device_scope scope;
    if (device_enter(p, f, device, &scope) == ACL_SUCCESS) {
      body(p, f, scope.device, arg);
      device_leave(p, &scope);
    }
  }
  Py_END_ALLOW_THREADS
  return f->code;
}

int aipc_py_call_counted(aipc_py_state *st, int32_t device, Py_ssize_t *busy[AIPC_PY_BUSY_MAX],
                         aipc_py_released_fn body, void *arg) {
  aipc_py_failure f = AIPC_PY_FAILURE_INIT;
  for (int i = 0; i < AIPC_PY_BUSY_MAX; i++)
    if (busy[i] != NULL) ++*busy[i];
  aclError rc = aipc_py_call_released(st->provider, &f, device, body, arg);
  for (int i = 0; i < AIPC_PY_BUSY_MAX; i++)
    if (busy[i] != NULL) --*busy[i];
  if (rc != ACL_SUCCESS) {
    aipc_py_raise(st, &f);
    return -1;
  }
  return 0;
}

int aipc_py_call(aipc_py_state *st, int32_t device, aipc_py_released_fn body, void *arg) {
  Py_ssize_t *none[AIPC_PY_BUSY_MAX] = {NULL};
  return aipc_py_call_counted(st, device, none, body, arg);
}

void aipc_py_wait_idle(Py_ssize_t *busy, int (*keep_waiting)(void *), void *arg) {
  long ns = 20000;
  while (*busy > 0 && (keep_waiting == NULL || keep_waiting(arg))) {
    Py_BEGIN_ALLOW_THREADS
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
    Py_END_ALLOW_THREADS
    if (ns < 1000000) ns *= 2;
  }
}

int32_t aipc_py_current_device(const aipc_provider *p) {
  int32_t cur = 0;
  if (p->get_device(&cur) != ACL_SUCCESS) {
    (void)p->get_recent_err_msg();
    cur = 0;
  }
  return cur < 0 ? 0 : cur;
}

/* ---- device= arguments ----------------------------------------------------- */

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
