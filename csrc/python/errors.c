/* AclError: every failure of the runtime, with its CANN code, name and message. */
#include "module.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"

static const char acl_error_doc[] =
    "A call into the CANN runtime (or the emulator) failed.\n"
    "\n"
    "Attributes:\n"
    "    code (int): the CANN error code, e.g. 207006.\n"
    "    name (str): its symbolic name, e.g. 'ACL_ERROR_RT_NO_PERMISSION'.\n"
    "    message (str): what went wrong, as the runtime reported it\n"
    "        (aclGetRecentErrMsg).\n"
    "    call (str): the CANN function that failed, e.g. 'aclrtIpcMemImportByKey'.\n"
    "\n"
    "str(error) reads '[207006 ACL_ERROR_RT_NO_PERMISSION] <message>'.";

int aipc_py_errors_init(PyObject *module, aipc_py_state *st) {
  st->acl_error = PyErr_NewExceptionWithDoc("ascend_ipc._C.AclError", acl_error_doc,
                                            PyExc_Exception, NULL);
  if (st->acl_error == NULL) return -1;
  return PyModule_AddObjectRef(module, "AclError", st->acl_error);
}

aclError aipc_py_note(const aipc_provider *p, aipc_py_failure *f, const char *call, aclError rc) {
  if (rc == ACL_SUCCESS) return rc;
  /* Always consume the thread's message, so a later failure never shows a
   * stale one; keep only the first failure. */
  const char *msg = p->get_recent_err_msg != NULL ? p->get_recent_err_msg() : NULL;
  if (f->code != ACL_SUCCESS) return rc;
  f->code = rc;
  f->call = call;
  if (msg == NULL || msg[0] == '\0') msg = aipc__error_text(rc);
  snprintf(f->message, sizeof f->message, "%s", msg);
  return rc;
}

static int set_attr_steal(PyObject *obj, const char *name, PyObject *value) {
  if (value == NULL) return -1;
  int rc = PyObject_SetAttrString(obj, name, value);
  Py_DECREF(value);
  return rc;
}

PyObject *aipc_py_raise(aipc_py_state *st, const aipc_py_failure *f) {
  PyObject *message = NULL, *text = NULL, *exc = NULL;
  const char *name = aipc__error_name(f->code);

  message = PyUnicode_DecodeUTF8(f->message, (Py_ssize_t)strlen(f->message), "replace");
  if (message == NULL) goto done;
  text = PyUnicode_FromFormat("[%d %s] %U", (int)f->code, name, message);
  if (text == NULL) goto done;
  exc = PyObject_CallOneArg(st->acl_error, text);
  if (exc == NULL) goto done;
  if (set_attr_steal(exc, "code", PyLong_FromLong((long)f->code)) < 0 ||
      set_attr_steal(exc, "name", PyUnicode_FromString(name)) < 0 ||
      PyObject_SetAttrString(exc, "message", message) < 0 ||
      set_attr_steal(exc, "call", PyUnicode_FromString(f->call != NULL ? f->call : "")) < 0) {
    goto done;
  }
  PyErr_SetObject(st->acl_error, exc);
done:
  Py_XDECREF(exc);
  Py_XDECREF(text);
  Py_XDECREF(message);
  return NULL;
}

void aipc_py_warn_leak(aipc_py_state *st, const char *what, const aipc_py_failure *f) {
  PyObject *type, *value, *tb;
  (void)st;
  PyErr_Fetch(&type, &value, &tb);
  int rc;
  if (f != NULL && f->code != ACL_SUCCESS) {
    rc = PyErr_WarnFormat(PyExc_ResourceWarning, 1,
                          "ascend_ipc: could not release %s, leaking it: %s failed: [%d %s] %s", what,
                          f->call != NULL ? f->call : "?", (int)f->code, aipc__error_name(f->code),
                          f->message);
  } else {
    rc = PyErr_WarnFormat(PyExc_ResourceWarning, 1, "ascend_ipc: leaking %s", what);
  }
  if (rc < 0) PyErr_WriteUnraisable(NULL); /* warnings configured as errors */
  PyErr_Restore(type, value, tb);
}
