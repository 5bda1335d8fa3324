/*
 * ascend_ipc._C: module definition and state. Multi-phase initialisation;
 * every type and the exception live in the state, the functions in
 * functions.c.
 */
#define AIPC_PY_DEFINE_NUMPY_API
#include "module.h"
#include "vmm.h"

#include "allocation.h"
#include "devicearray.h"
#include "functions.h"
#include "imports.h"
#include "ipchandle.h"
#include "stream.h"

static int module_exec(PyObject *module) {
  aipc_py_state *st = aipc_py_state_of_module(module);
  if (_import_array() < 0) return -1;
  if (aipc_py_imports_init() < 0) {
    PyErr_SetString(PyExc_ImportError, "ascend_ipc: cannot install the fork handlers of the import table");
    return -1;
  }
  st->provider = aipc_py_select_provider();
  if (st->provider == NULL) return -1;
  if (st->provider->init != NULL) {
    aipc_py_failure f = AIPC_PY_FAILURE_INIT;
    if (aipc_py_note(st->provider, &f, AIPC_CALL_NAME(init), st->provider->init(NULL)) != ACL_SUCCESS) {
      PyErr_Format(PyExc_ImportError, "ascend_ipc: aclInit failed: [%d] %s", (int)f.code, f.message);
      return -1;
    }
  }
  if (aipc_py_errors_init(module, st) < 0) return -1;
  if (aipc_py_allocation_init_type(module, st) < 0) return -1;
  if (aipc_py_array_init_type(module, st) < 0) return -1;
  if (aipc_py_handle_init_type(module, st) < 0) return -1;
  if (aipc_py_stream_init_types(module, st) < 0) return -1;
  if (PyModule_AddIntConstant(module, "PAGE_SIZE", (long)AIPC_PY_PAGE) < 0) return -1;
  if (PyModule_AddIntConstant(module, "KEY_LEN", AIPC_PY_KEY_LEN) < 0) return -1;
  if (PyModule_AddFunctions(module, aipc_py_vmm_functions) < 0) return -1;
  return 0;
}

static int module_traverse(PyObject *module, visitproc visit, void *arg) {
  aipc_py_state *st = aipc_py_state_of_module(module);
  Py_VISIT(st->allocation_type);
  Py_VISIT(st->array_type);
  Py_VISIT(st->handle_type);
  Py_VISIT(st->stream_type);
  Py_VISIT(st->event_type);
  Py_VISIT(st->acl_error);
  Py_VISIT(st->hold);
  Py_VISIT(st->release);
  Py_VISIT(st->open_torch);
  return 0;
}

static int module_clear(PyObject *module) {
  aipc_py_state *st = aipc_py_state_of_module(module);
  Py_CLEAR(st->allocation_type);
  Py_CLEAR(st->array_type);
  Py_CLEAR(st->handle_type);
  Py_CLEAR(st->stream_type);
  Py_CLEAR(st->event_type);
  Py_CLEAR(st->acl_error);
  Py_CLEAR(st->hold);
  Py_CLEAR(st->release);
  Py_CLEAR(st->open_torch);
  return 0;
}

PyObject *aipc_py_callback(PyObject *fn, const char *name) {
  if (fn == NULL) {
    PyErr_Format(PyExc_RuntimeError,
                 "ascend_ipc._C: no %s callback is registered (ascend_ipc/__init__.py registers them: "
                 "import ascend_ipc, not its extension alone)",
                 name);
  }
  return fn;
}

int aipc_py_check_hold(PyObject *hold, const char *who) {
  if (hold != Py_None && (!PyTuple_CheckExact(hold) || PyTuple_GET_SIZE(hold) != 2)) {
    PyErr_Format(PyExc_TypeError, "%s: hold must be None or an (address, token) pair", who);
    return -1;
  }
  return 0;
}

void aipc_py_release_hold(aipc_py_state *st, PyObject **slot) {
  PyObject *hold = *slot;
  if (hold == NULL) return;
  *slot = NULL;
  if (hold != Py_None) {
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyObject *release = aipc_py_callback(st->release, "release");
    PyObject *r = release != NULL ? PyObject_Call(release, hold, NULL) : NULL;
    if (r == NULL) PyErr_WriteUnraisable(hold);
    Py_XDECREF(r);
    PyErr_Restore(exc_type, exc_value, exc_tb);
  }
  Py_DECREF(hold);
}

static void module_free(void *module) {
  (void)module_clear((PyObject *)module);
  aipc_py_registry_free(&aipc_py_state_of_module((PyObject *)module)->registry);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#ifdef Py_mod_gil
    /* Free-threaded builds: the extension relies on the GIL (its objects and
     * registry are guarded by it), so it asks for the GIL to be enabled. */
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

PyModuleDef aipc_py_module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ascend_ipc._C",
    .m_doc = "ascend_ipc._C: CANN IPC memory sharing (the runtime reached through its provider table).",
    .m_size = sizeof(aipc_py_state),
    .m_methods = aipc_py_module_functions,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__C(void) { return PyModuleDef_Init(&aipc_py_module_def); }
