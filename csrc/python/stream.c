/* Stream: aclrtCreateStream for Python (see stream.h). */
#include "stream.h"

#define SELF ((aipc_py_stream *)op)

static int check_usable(aipc_py_stream *s) {
  if (s->handle == NULL) {
    PyErr_SetString(PyExc_ValueError, "Stream is closed");
    return -1;
  }
  if (s->pid != aipc_py_pid()) {
    PyErr_SetString(PyExc_ValueError, "Stream belongs to the parent process (a forked child has no streams of it)");
    return -1;
  }
  return 0;
}

int aipc_py_stream_arg(aipc_py_state *st, PyObject *obj, aclrtStream *handle) {
  if (obj == NULL || obj == Py_None) {
    *handle = NULL;
    return 0;
  }
  if (Py_TYPE(obj) != st->stream_type) {
    PyErr_Format(PyExc_TypeError, "stream must be None or an ascend_ipc.Stream, not %.100s", Py_TYPE(obj)->tp_name);
    return -1;
  }
  if (check_usable((aipc_py_stream *)obj) < 0) return -1;
  *handle = ((aipc_py_stream *)obj)->handle;
  return 0;
}

Py_ssize_t *aipc_py_stream_busy(PyObject *obj) {
  return obj == NULL || obj == Py_None ? NULL : &((aipc_py_stream *)obj)->busy;
}

int aipc_py_stream_keep(PyObject *stream, PyObject *obj) {
  if (stream == NULL || stream == Py_None) return 0;
  return PyList_Append(((aipc_py_stream *)stream)->pending, obj);
}

/* ---- creation and teardown ------------------------------------------------- */

typedef struct stream_call {
  aclrtStream handle;
  int32_t timeout_ms;
  int done;
} stream_call;

static void create_stream(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  stream_call *c = arg;
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(create_stream), p->create_stream(&c->handle));
}

static void destroy_stream(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  stream_call *c = arg;
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(destroy_stream), p->destroy_stream(c->handle));
}

/* One slice of a synchronize: done once the stream is idle. */
static void sync_slice(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  stream_call *c = arg;
  aclError rc = p->synchronize_stream_with_timeout(c->handle, c->timeout_ms);
  if (rc == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT) {
    (void)p->get_recent_err_msg();
    return;
  }
  if (rc == ACL_ERROR_FEATURE_UNSUPPORTED) { /* an older CANN: wait without slices */
    (void)p->get_recent_err_msg();
    rc = p->synchronize_stream(c->handle);
    c->done = 1;
    (void)aipc_py_note(p, f, AIPC_CALL_NAME(synchronize_stream), rc);
    return;
  }
  c->done = 1;
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(synchronize_stream_with_timeout), rc);
}

static PyObject *stream_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"device", NULL};
  aipc_py_state *st = aipc_py_state_of(type);
  PyObject *device_obj = Py_None;
  int32_t device;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:Stream", kwlist, &device_obj)) return NULL;
  if (aipc_py_parse_device(device_obj, &device) < 0) return NULL;
  PyObject *pending = PyList_New(0);
  if (pending == NULL) return NULL;
  stream_call c = {NULL, 0, 0};
  aipc_py_failure f = AIPC_PY_FAILURE_INIT;
  int32_t used = device < 0 ? aipc_py_current_device(st->provider) : device;
  if (aipc_py_call_released(st->provider, &f, used, create_stream, &c) != ACL_SUCCESS) {
    Py_DECREF(pending);
    return aipc_py_raise(st, &f);
  }
  aipc_py_stream *s = (aipc_py_stream *)type->tp_alloc(type, 0);
  if (s == NULL) {
    (void)aipc_py_call_released(st->provider, &f, used, destroy_stream, &c);
    Py_DECREF(pending);
    return NULL;
  }
  s->handle = c.handle;
  s->device = used;
  s->pid = aipc_py_pid();
  s->pending = pending;
  return (PyObject *)s;
}

static PyObject *stream_synchronize(PyObject *op, PyObject *unused) {
  aipc_py_state *st = aipc_py_state_of(Py_TYPE(op));
  if (check_usable(SELF) < 0) return NULL;
  stream_call c = {SELF->handle, AIPC_PY_WAIT_SLICE_MS, 0};
  Py_ssize_t *busy[AIPC_PY_BUSY_MAX] = {&SELF->busy, NULL, NULL};
  Py_INCREF(op);
  int rc = 0;
  /* In counted slices: a close() in another thread waits for the
   * slice running, and the next one sees the stream closed. */
  while (rc == 0 && !c.done) {
    if (aipc_py_call_counted(st, SELF->device, busy, sync_slice, &c) < 0 || (!c.done && PyErr_CheckSignals() < 0)) {
      rc = -1;
    } else if (!c.done && SELF->handle == NULL) {
      PyErr_SetString(PyExc_ValueError, "Stream is closed");
      rc = -1;
    }
  }
  if (rc == 0 && PyList_SetSlice(SELF->pending, 0, PyList_GET_SIZE(SELF->pending), NULL) < 0) rc = -1;
  Py_DECREF(op);
  if (rc < 0) return NULL;
  Py_RETURN_NONE;
}

typedef struct wait_call {
  aclrtStream stream;
  aclrtEvent event;
} wait_call;

static void stream_wait_event(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  wait_call *c = arg;
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(stream_wait_event), p->stream_wait_event(c->stream, c->event));
}

static PyObject *stream_wait(PyObject *op, PyObject *event_obj) {
  aipc_py_state *st = aipc_py_state_of(Py_TYPE(op));
  if (check_usable(SELF) < 0) return NULL;
  if (Py_TYPE(event_obj) != st->event_type) {
    PyErr_Format(PyExc_TypeError, "wait() needs an ascend_ipc.Event, not %.100s", Py_TYPE(event_obj)->tp_name);
    return NULL;
  }
  aipc_py_event *ev = (aipc_py_event *)event_obj;
  if (aipc_py_event_usable(ev) < 0) return NULL;
  wait_call c = {SELF->handle, ev->handle};
  Py_ssize_t *busy[AIPC_PY_BUSY_MAX] = {&SELF->busy, &ev->busy, NULL};
  if (aipc_py_call_counted(st, SELF->device, busy, stream_wait_event, &c) < 0) return NULL;
  if (aipc_py_stream_keep(op, event_obj) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *stream_close(PyObject *op, PyObject *unused) {
  aipc_py_state *st = aipc_py_state_of(Py_TYPE(op));
  aclrtStream handle = SELF->handle;
  if (handle == NULL) Py_RETURN_NONE;
  SELF->handle = NULL; /* new calls fail from now on */
  if (SELF->pid == aipc_py_pid()) {
    aipc_py_wait_idle(&SELF->busy, NULL, NULL); /* calls running in other threads */
    stream_call c = {handle, 0, 0};
    /* Waits for the queued work, then destroys the stream. */
    if (aipc_py_call(st, SELF->device, destroy_stream, &c) < 0) {
      if (SELF->handle == NULL) SELF->handle = handle; /* still open: close() can be retried */
      return NULL;
    }
  }
  if (PyList_SetSlice(SELF->pending, 0, PyList_GET_SIZE(SELF->pending), NULL) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *stream_enter(PyObject *op, PyObject *unused) { return Py_NewRef(op); }
static PyObject *stream_exit(PyObject *op, PyObject *args) { return stream_close(op, NULL); }

static PyObject *stream_repr(PyObject *op) {
  return PyUnicode_FromFormat("Stream(device=%d%s)", (int)SELF->device, SELF->handle ? "" : ", closed");
}

static PyObject *get_device(PyObject *op, void *c) { return PyLong_FromLong(SELF->device); }
static PyObject *get_closed(PyObject *op, void *c) { return PyBool_FromLong(SELF->handle == NULL); }
static PyObject *get_handle(PyObject *op, void *c) { return PyLong_FromVoidPtr(SELF->handle); }

static PyGetSetDef stream_getset[] = {
    {"device", get_device, NULL, "The device the stream was created on.", NULL},
    {"closed", get_closed, NULL, "True after close().", NULL},
    {"handle", get_handle, NULL, "The aclrtStream, as an int (for C code; 0 once closed).", NULL},
    {0},
};

static PyMethodDef stream_methods[] = {
    {"synchronize", stream_synchronize, METH_NOARGS,
     "synchronize($self, /)\n--\n\n"
     "Waits until the work queued on the stream has run (aclrtSynchronizeStream), with\n"
     "the GIL released; raises AclError for the first failure of that work. Ctrl-C\n"
     "interrupts the wait (the work goes on)."},
    {"wait", stream_wait, METH_O,
     "wait($self, event, /)\n--\n\n"
     "Holds back the work queued on the stream after this call until event's latest\n"
     "record has run (aclrtStreamWaitEvent). Returns at once."},
    {"close", stream_close, METH_NOARGS,
     "close($self, /)\n--\n\nWaits for the queued work and destroys the stream (aclrtDestroyStream)."},
    {"__enter__", stream_enter, METH_NOARGS, "__enter__($self, /)\n--\n\nThe stream itself."},
    {"__exit__", stream_exit, METH_VARARGS, "__exit__($self, /, *exc_info)\n--\n\nCloses the stream."},
    {0},
};

static int stream_traverse(PyObject *op, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(op));
  Py_VISIT(SELF->pending);
  return 0;
}

static int stream_clear(PyObject *op) {
  Py_CLEAR(SELF->pending);
  return 0;
}

static void stream_dealloc(PyObject *op) {
  PyTypeObject *tp = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  if (SELF->handle != NULL && SELF->pid == aipc_py_pid()) {
    aipc_py_state *st = aipc_py_state_of(tp);
    stream_call c = {SELF->handle, 0, 0};
    aipc_py_failure f = AIPC_PY_FAILURE_INIT;
    if (aipc_py_call_released(st->provider, &f, SELF->device, destroy_stream, &c) != ACL_SUCCESS)
      aipc_py_warn_leak(st, "a Stream", &f);
  }
  (void)stream_clear(op);
  tp->tp_free(op);
  Py_DECREF(tp);
}

static const char stream_doc[] =
    "Stream(device=None)\n--\n\n"
    "A CANN stream (aclrtCreateStream): work queued on it runs in order, off the\n"
    "calling thread. Use it with DeviceArray.copy_from(src, stream=...),\n"
    "Event.record(stream), wait(event) and export(a, stream=...). The objects queued\n"
    "work uses stay alive until synchronize(). close() (or the end of a with block)\n"
    "waits for the work and destroys the stream.";

static PyType_Slot stream_slots[] = {
    {Py_tp_doc, (void *)stream_doc},
    {Py_tp_new, stream_new},
    {Py_tp_dealloc, stream_dealloc},
    {Py_tp_traverse, stream_traverse},
    {Py_tp_clear, stream_clear},
    {Py_tp_repr, stream_repr},
    {Py_tp_methods, stream_methods},
    {Py_tp_getset, stream_getset},
    {0, NULL},
};

static PyType_Spec stream_spec = {
    .name = "ascend_ipc._C.Stream",
    .basicsize = sizeof(aipc_py_stream),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = stream_slots,
};

int aipc_py_stream_init_types(PyObject *module, aipc_py_state *st) {
  st->stream_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &stream_spec, NULL);
  if (st->stream_type == NULL || PyModule_AddType(module, st->stream_type) < 0) return -1;
  return aipc_py_event_init_type(module, st);
}
