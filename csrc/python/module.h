/*
 * ascend_ipc._C: what every part of the extension shares.
 *
 * The module state holds every type and the exception; objects reach it
 * through their type (PyType_GetModuleState), never through globals, so the
 * module works in subinterpreters and can be imported more than once.
 *
 * The runtime is reached only through the provider table chosen once at module
 * exec (provider_select.c); nothing here calls the emulator directly (vmm.c's
 * place check uses the IPC layer's emu/ipc/identity.h, which reads /proc and
 * is no runtime call).
 */
#ifndef ASCEND_IPC_PYTHON_MODULE_H_
#define ASCEND_IPC_PYTHON_MODULE_H_

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/provider.h"

/* The dummy name lets only module.c pull in numpy's API table definition. */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL aipc_py_numpy_api
#ifndef AIPC_PY_DEFINE_NUMPY_API
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#define AIPC_PY_PAGE ((size_t)4096)
#define AIPC_PY_KEY_LEN ACL_IPC_MEM_KEY_LEN /* 64 characters + NUL */
#define AIPC_PY_MAX_NDIM 64

struct aipc_py_allocation;

/* Live allocations of this process, sorted by base address (duplicates
 * allowed: an import of this process's own key may get the exporter's own
 * address, as the emulator gives). Entries are borrowed: an
 * allocation removes itself when it releases its memory or is deallocated. */
typedef struct aipc_py_registry {
  struct aipc_py_allocation **items;
  size_t count;
  size_t capacity;
} aipc_py_registry;

typedef struct aipc_py_state {
  PyTypeObject *allocation_type;
  PyTypeObject *array_type;
  PyTypeObject *handle_type;
  PyTypeObject *stream_type;
  PyTypeObject *event_type;
  PyObject *acl_error;
  /* What the extension calls back into the package with, handed over by
   * ascend_ipc/__init__.py through _register_callbacks() (the extension
   * never imports the package); NULL until then:
   *   hold(obj, one_receiver) -> (address, token) or None: put and drop
   *     keeps an exporter's handle (or a creator's IPC Event) alive for a
   *     pickled copy;
   *   release(address, token): a copy was opened or dropped;
   *   open_torch(handle, *args, **kwargs): IpcHandle.open_torch(). */
  PyObject *hold;
  PyObject *release;
  PyObject *open_torch;
  const aipc_provider *provider;
  aipc_py_registry registry;
} aipc_py_state;

extern PyModuleDef aipc_py_module_def;

static inline aipc_py_state *aipc_py_state_of(PyTypeObject *tp) {
  /* Our types are final (no Py_TPFLAGS_BASETYPE), so tp is always one of the
   * module's own heap types and carries the module. */
  return (aipc_py_state *)PyType_GetModuleState(tp);
}

static inline aipc_py_state *aipc_py_state_of_module(PyObject *module) {
  return (aipc_py_state *)PyModule_GetState(module);
}

/* The callback registered as name (one of the state's callbacks above), a
 * borrowed reference; NULL with RuntimeError set when none is. */
PyObject *aipc_py_callback(PyObject *fn, const char *name);

/* Put and drop, for every kind the extension pickles (IpcHandle, Event):
 * the hold a copy carries is None or an (address, token) pair; anything else
 * in a pickle is refused with TypeError naming who (0 or -1). */
int aipc_py_check_hold(PyObject *hold, const char *who);
/* Gives the sender the hold in *slot back, once (*slot is cleared; NULL or
 * None: nothing to give); never raises, keeps any pending exception. */
void aipc_py_release_hold(aipc_py_state *st, PyObject **slot);

/* ---- failures of runtime calls (errors.c) -------------------------------
 *
 * A runtime call may run with the GIL released, and its message lives in the
 * calling thread's slot of the runtime. So the failure is captured into a
 * plain C struct right after the call, in the same thread, and turned into an
 * AclError once the GIL is held again. */

#define AIPC_PY_MSG_MAX 512

typedef struct aipc_py_failure {
  aclError code;    /* ACL_SUCCESS until the first failure */
  const char *call; /* the CANN name of the call that failed */
  char message[AIPC_PY_MSG_MAX];
} aipc_py_failure;

#define AIPC_PY_FAILURE_INIT {ACL_SUCCESS, NULL, {0}}

/* Records the first failure; returns rc. Safe without the GIL. */
aclError aipc_py_note(const aipc_provider *p, aipc_py_failure *f, const char *call, aclError rc);

/* Raises AclError for f (which must hold a failure); returns NULL. GIL held. */
PyObject *aipc_py_raise(aipc_py_state *st, const aipc_py_failure *f);

/* Creates the AclError class; 0 or -1. */
int aipc_py_errors_init(PyObject *module, aipc_py_state *st);

/* A ResourceWarning for something released during deallocation or by a
 * DLPack deleter that could not be (the memory is leaked, never freed under
 * a user). Never raises; keeps any exception already set. */
void aipc_py_warn_leak(aipc_py_state *st, const char *what, const aipc_py_failure *f);

/* ---- provider selection (provider_select.c) ---------------------------- */

/* The provider that ASCEND_IPC_PROVIDER asks for; NULL with ImportError set. */
const aipc_provider *aipc_py_select_provider(void);

/* Why the last selection chose what it chose (for provider_info()); never NULL. */
const char *aipc_py_selection_note(void);

/* ---- runtime calls with the GIL released (device.c) ---------------------
 *
 * A call that may block (a copy, an allocation, a request to another
 * process) runs with the GIL released, on the calling thread's device, which
 * is per-thread state of the runtime as in CANN. Its body sees only C data
 * the caller prepared beforehand: it touches no Python object and calls no
 * Python API. The caller keeps alive whatever that data points into. */

/* For `device` below: the call needs no device; the current one is left as it is. */
#define AIPC_PY_NO_DEVICE INT32_MIN

/* The part that runs without the GIL. device: the device current for the
 * call, or AIPC_PY_NO_DEVICE. Failures go into f through aipc_py_note(). */
typedef void (*aipc_py_released_fn)(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg);

/* Releases the GIL, makes device current for this thread (-1: the thread's
 * current device, 0 if it has none), runs body(arg) unless that failed,
 * restores the thread's device and takes the GIL back. Returns f->code:
 * ACL_SUCCESS, or the first failure recorded in f. Raises nothing. */
aclError aipc_py_call_released(const aipc_provider *p, aipc_py_failure *f, int32_t device,
                               aipc_py_released_fn body, void *arg);

/* The same, raising the failure: 0, or -1 with AclError set. */
int aipc_py_call(aipc_py_state *st, int32_t device, aipc_py_released_fn body, void *arg);

/*
 * aipc_py_call counting the call in each non-NULL busy[i] (of AIPC_PY_BUSY_MAX)
 * while the GIL is released: the counters of the objects whose resources it
 * uses, whose close() waits for them to drop (aipc_py_wait_idle). The counts
 * drop before any Python code can run in this thread again, so a close never
 * waits for its own thread. Counters change only with the GIL held.
 */
#define AIPC_PY_BUSY_MAX 3
int aipc_py_call_counted(aipc_py_state *st, int32_t device, Py_ssize_t *busy[AIPC_PY_BUSY_MAX],
                         aipc_py_released_fn body, void *arg);
/* Sleeps with the GIL released until *busy is 0, or until keep_waiting (if
 * not NULL) returns 0 for arg. */
void aipc_py_wait_idle(Py_ssize_t *busy, int (*keep_waiting)(void *), void *arg);

/* The calling thread's current device (0 when it has none). No GIL needed. */
int32_t aipc_py_current_device(const aipc_provider *p);

/* A wait that Ctrl-C can interrupt and close() can end runs in slices of at
 * most this long, each counted (aipc_py_call_counted), with signals checked
 * in between: Stream.synchronize, Event.synchronize. */
#define AIPC_PY_WAIT_SLICE_MS 100

/* ---- argument helpers (device.c) ---------------------------------------- */

/* device=None -> -1 (current); an int -> it; else TypeError. */
int aipc_py_parse_device(PyObject *obj, int32_t *device);

/* This process: objects record it to recognise when they crossed a fork. */
static inline long aipc_py_pid(void) { return (long)getpid(); }

#endif
