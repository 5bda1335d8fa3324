/* Event: aclrtCreateEventExWithFlag for Python, and IPC events (see stream.h). */
#include "stream.h" /* Python.h first: it sets the feature macros */

#include <string.h>

#define SELF ((aipc_py_event *)op)

typedef struct event_call {
  aclrtEvent handle;
  uint32_t flags;
  aclrtStream stream;
  aclrtIpcEventHandle ipc;
  int32_t timeout_ms; /* a slice */
  aclrtEventRecordedStatus status;
  float ms;
  aclrtEvent other;
  int done;
} event_call;

static void open_event(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg);

/* 0 if e can be used here. An IPC event inherited across fork opens its
 * handle in the child on first use (the child's runtime has none of the
 * parent's events, but the handle works in any process of the user). */
int aipc_py_event_usable(aipc_py_event *e) {
  if (e->handle == NULL) {
    PyErr_SetString(PyExc_ValueError, "Event is closed");
    return -1;
  }
  if (e->pid == aipc_py_pid()) return 0;
  if (!e->ipc) {
    PyErr_SetString(PyExc_ValueError,
                    "Event belongs to the parent process (a forked child has no events of it; an ipc=True event "
                    "works in any process)");
    return -1;
  }
  aipc_py_state *st = aipc_py_state_of(Py_TYPE(e));
  event_call c = {.ipc = e->ipc_handle};
  if (aipc_py_call(st, e->device, open_event, &c) < 0) return -1;
  e->handle = c.handle;
  e->pid = aipc_py_pid();
  e->opened = 1;
  return 0;
}


static void create_event(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  event_call *c = arg;
  if (aipc_py_note(p, f, AIPC_CALL_NAME(create_event_ex_with_flag), p->create_event_ex_with_flag(&c->handle, c->flags)))
    return;
  if ((c->flags & ACL_EVENT_IPC) &&
      aipc_py_note(p, f, AIPC_CALL_NAME(ipc_get_event_handle), p->ipc_get_event_handle(c->handle, &c->ipc))) {
    (void)p->destroy_event(c->handle);
    c->handle = NULL;
  }
}

static void open_event(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  event_call *c = arg;
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(ipc_open_event_handle), p->ipc_open_event_handle(c->ipc, &c->handle));
}

static void destroy_event(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  event_call *c = arg;
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(destroy_event), p->destroy_event(c->handle));
}

static void record_event(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  event_call *c = arg;
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(record_event), p->record_event(c->handle, c->stream));
}

static void query_event(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  event_call *c = arg;
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(query_event_status), p->query_event_status(c->handle, &c->status));
}

static void elapsed(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  event_call *c = arg;
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(event_elapsed_time), p->event_elapsed_time(&c->ms, c->handle, c->other));
}

/* One slice of a synchronize (AIPC_PY_WAIT_SLICE_MS). */
static void sync_slice(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  event_call *c = arg;
  aclError rc = p->synchronize_event_with_timeout(c->handle, c->timeout_ms);
  if (rc == ACL_ERROR_RT_EVENT_SYNC_TIMEOUT) {
    (void)p->get_recent_err_msg();
    return;
  }
  c->done = 1;
  if (rc == ACL_ERROR_FEATURE_UNSUPPORTED) { /* an older CANN: one wait without slices */
    (void)p->get_recent_err_msg();
    (void)aipc_py_note(p, f, AIPC_CALL_NAME(synchronize_event), p->synchronize_event(c->handle));
    return;
  }
  (void)aipc_py_note(p, f, AIPC_CALL_NAME(synchronize_event_with_timeout), rc);
}

/* Waits for c->handle; timeout_s < 0: without limit. 0, or -1 with an
 * exception. owner (NULL for a handle of the caller's own): the Event whose
 * close() waits for the slice running; the next slice sees it closed. */
static int synchronize(aipc_py_state *st, event_call *c, int32_t device, double timeout_s, aipc_py_event *owner) {
  Py_ssize_t *busy[AIPC_PY_BUSY_MAX] = {owner != NULL ? &owner->busy : NULL, NULL, NULL};
  long long deadline_ms = timeout_s < 0 ? -1 : (long long)(timeout_s * 1000.0);
  for (long long waited = 0;;) {
    long long left = deadline_ms - waited;
    c->timeout_ms = deadline_ms < 0 || left > AIPC_PY_WAIT_SLICE_MS ? AIPC_PY_WAIT_SLICE_MS
                                                                    : (left < 1 ? 1 : (int32_t)left);
    c->done = 0;
    if (aipc_py_call_counted(st, device, busy, sync_slice, c) < 0) return -1;
    if (c->done) return 0;
    waited += c->timeout_ms;
    if (deadline_ms >= 0 && waited >= deadline_ms) {
      aipc_py_failure f = AIPC_PY_FAILURE_INIT;
      f.code = ACL_ERROR_RT_EVENT_SYNC_TIMEOUT;
      f.call = AIPC_CALL_NAME(synchronize_event_with_timeout);
      snprintf(f.message, sizeof f.message, "Event.synchronize: the event did not complete within %g s", timeout_s);
      aipc_py_raise(st, &f);
      return -1;
    }
    if (PyErr_CheckSignals() < 0) return -1;
    if (owner != NULL && owner->handle == NULL) {
      PyErr_SetString(PyExc_ValueError, "Event is closed");
      return -1;
    }
  }
}

/* ---- construction ------------------------------------------------------------ */

static aipc_py_event *event_alloc(aipc_py_state *st, aclrtEvent handle, int32_t device) {
  aipc_py_event *e = (aipc_py_event *)st->event_type->tp_alloc(st->event_type, 0);
  if (e == NULL) {
    event_call c = {.handle = handle};
    aipc_py_failure f = AIPC_PY_FAILURE_INIT;
    (void)aipc_py_call_released(st->provider, &f, device, destroy_event, &c);
    return NULL;
  }
  e->handle = handle;
  e->device = device;
  e->pid = aipc_py_pid();
  return e;
}

PyObject *aipc_py_event_create(aipc_py_state *st, int ipc, int timing, int32_t device) {
  if (ipc && timing) {
    PyErr_SetString(PyExc_ValueError, "an IPC event keeps no time (CANN): ipc=True and timing=True do not combine");
    return NULL;
  }
  if (device < 0) device = aipc_py_current_device(st->provider);
  event_call c = {.flags = ipc ? ACL_EVENT_IPC : ACL_EVENT_SYNC | (timing ? ACL_EVENT_TIME_LINE : 0)};
  if (aipc_py_call(st, device, create_event, &c) < 0) return NULL;
  aipc_py_event *e = event_alloc(st, c.handle, device);
  if (e == NULL) return NULL;
  e->ipc = ipc;
  e->timing = timing;
  e->ipc_handle = c.ipc;
  return (PyObject *)e;
}

static PyObject *event_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"ipc", "timing", "device", NULL};
  int ipc = 0, timing = 0;
  PyObject *device_obj = Py_None;
  int32_t device;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|ppO:Event", kwlist, &ipc, &timing, &device_obj)) return NULL;
  if (aipc_py_parse_device(device_obj, &device) < 0) return NULL;
  return aipc_py_event_create(aipc_py_state_of(type), ipc, timing, device);
}

static int parse_handle(PyObject *obj, aclrtIpcEventHandle *h) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return -1;
  int ok = view.len == (Py_ssize_t)sizeof h->reserved;
  if (ok) memcpy(h->reserved, view.buf, sizeof h->reserved);
  PyBuffer_Release(&view);
  if (!ok) {
    PyErr_Format(PyExc_ValueError, "an IPC event handle has %d bytes", (int)sizeof h->reserved);
    return -1;
  }
  return 0;
}

/* Event.from_handle(handle, device=None): opens an IPC event handle. */
static PyObject *event_from_handle(PyObject *cls, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"handle", "device", NULL};
  aipc_py_state *st = aipc_py_state_of((PyTypeObject *)cls);
  PyObject *handle_obj, *device_obj = Py_None;
  int32_t device;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O:from_handle", kwlist, &handle_obj, &device_obj)) return NULL;
  if (aipc_py_parse_device(device_obj, &device) < 0) return NULL;
  event_call c = {0};
  if (parse_handle(handle_obj, &c.ipc) < 0) return NULL;
  if (device < 0) device = aipc_py_current_device(st->provider);
  if (aipc_py_call(st, device, open_event, &c) < 0) return NULL;
  aipc_py_event *e = event_alloc(st, c.handle, device);
  if (e == NULL) return NULL;
  e->ipc = 1;
  e->opened = 1;
  e->ipc_handle = c.ipc;
  return (PyObject *)e;
}

/* ---- what streams and export() use (stream.h) ---------------------------------- */

int aipc_py_event_record(aipc_py_state *st, aipc_py_event *ev, PyObject *stream_obj) {
  if (aipc_py_event_usable(ev) < 0) return -1;
  event_call c = {.handle = ev->handle};
  if (aipc_py_stream_arg(st, stream_obj, &c.stream) < 0) return -1;
  Py_ssize_t *busy[AIPC_PY_BUSY_MAX] = {&ev->busy, aipc_py_stream_busy(stream_obj), NULL};
  return aipc_py_call_counted(st, ev->device, busy, record_event, &c);
}

int aipc_py_event_wait_handle(aipc_py_state *st, const aclrtIpcEventHandle *h, int32_t device) {
  event_call c = {.ipc = *h};
  if (device < 0) device = aipc_py_current_device(st->provider);
  if (aipc_py_call(st, device, open_event, &c) < 0) return -1;
  int rc = synchronize(st, &c, device, -1.0, NULL);
  aipc_py_failure f = AIPC_PY_FAILURE_INIT;
  if (aipc_py_call_released(st->provider, &f, device, destroy_event, &c) != ACL_SUCCESS && rc == 0) {
    aipc_py_raise(st, &f);
    rc = -1;
  }
  return rc;
}

/* ---- methods ------------------------------------------------------------------- */

static PyObject *event_record(PyObject *op, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"stream", NULL};
  PyObject *stream_obj = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:record", kwlist, &stream_obj)) return NULL;
  if (aipc_py_event_record(aipc_py_state_of(Py_TYPE(op)), SELF, stream_obj) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *event_query(PyObject *op, PyObject *unused) {
  if (aipc_py_event_usable(SELF) < 0) return NULL;
  event_call c = {.handle = SELF->handle};
  Py_ssize_t *busy[AIPC_PY_BUSY_MAX] = {&SELF->busy, NULL, NULL};
  if (aipc_py_call_counted(aipc_py_state_of(Py_TYPE(op)), SELF->device, busy, query_event, &c) < 0) return NULL;
  return PyBool_FromLong(c.status == ACL_EVENT_RECORDED_STATUS_COMPLETE);
}

static PyObject *event_synchronize(PyObject *op, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"timeout", NULL};
  PyObject *timeout_obj = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:synchronize", kwlist, &timeout_obj)) return NULL;
  double timeout = -1.0;
  if (timeout_obj != Py_None) {
    timeout = PyFloat_AsDouble(timeout_obj);
    if (timeout == -1.0 && PyErr_Occurred()) return NULL;
    if (!(timeout >= 0.0) || timeout > 1e9) {
      PyErr_SetString(PyExc_ValueError, "timeout must be None or a number of seconds >= 0");
      return NULL;
    }
  }
  if (aipc_py_event_usable(SELF) < 0) return NULL;
  event_call c = {.handle = SELF->handle};
  Py_INCREF(op); /* alive while the GIL is released */
  int rc = synchronize(aipc_py_state_of(Py_TYPE(op)), &c, SELF->device, timeout, SELF);
  Py_DECREF(op);
  if (rc < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *event_elapsed(PyObject *op, PyObject *other) {
  aipc_py_state *st = aipc_py_state_of(Py_TYPE(op));
  if (Py_TYPE(other) != st->event_type) {
    PyErr_Format(PyExc_TypeError, "elapsed() needs an ascend_ipc.Event, not %.100s", Py_TYPE(other)->tp_name);
    return NULL;
  }
  if (aipc_py_event_usable(SELF) < 0 || aipc_py_event_usable((aipc_py_event *)other) < 0) return NULL;
  event_call c = {.handle = SELF->handle, .other = ((aipc_py_event *)other)->handle};
  Py_ssize_t *busy[AIPC_PY_BUSY_MAX] = {&SELF->busy, other != op ? &((aipc_py_event *)other)->busy : NULL, NULL};
  if (aipc_py_call_counted(st, SELF->device, busy, elapsed, &c) < 0) return NULL;
  return PyFloat_FromDouble((double)c.ms);
}

static PyObject *event_close(PyObject *op, PyObject *unused) {
  aclrtEvent handle = SELF->handle;
  if (handle == NULL) Py_RETURN_NONE;
  SELF->handle = NULL; /* new calls (and a second close) see it closed from now on */
  if (SELF->pid == aipc_py_pid()) {
    aipc_py_wait_idle(&SELF->busy, NULL, NULL); /* calls running in other threads */
    event_call c = {.handle = handle};
    if (aipc_py_call(aipc_py_state_of(Py_TYPE(op)), SELF->device, destroy_event, &c) < 0) {
      if (SELF->handle == NULL) SELF->handle = handle; /* still alive: close() can be retried */
      return NULL;
    }
  }
  Py_RETURN_NONE;
}

/* Pickling. A copy pickled by the process that created the event holds the
 * Event there (put and drop), as an exporter's IpcHandle holds its memory:
 * one_receiver (multiprocessing's ForkingPickler) until that copy is
 * unpickled, which opens it; else (plain pickle, many receivers) until the
 * hold's deadline. An opened event's copy holds nothing here: the creator's
 * event is not this process's to keep. */
PyObject *aipc_py_event_reduce(PyObject *op, int one_receiver) {
  if (!SELF->ipc) {
    PyErr_SetString(PyExc_TypeError,
                    "only an Event(ipc=True) can be pickled: other events exist in one process only");
    return NULL;
  }
  if (SELF->handle == NULL) {
    PyErr_SetString(PyExc_ValueError, "Event is closed");
    return NULL;
  }
  PyObject *hold = Py_NewRef(Py_None), *result = NULL;
  if (!SELF->opened && SELF->pid == aipc_py_pid()) {
    PyObject *fn = aipc_py_callback(aipc_py_state_of(Py_TYPE(op))->hold, "hold");
    Py_SETREF(hold, fn != NULL ? PyObject_CallFunctionObjArgs(fn, op, one_receiver ? Py_True : Py_False, NULL) : NULL);
    if (hold == NULL) return NULL;
  }
  if (hold == Py_None) {
    /* Nothing to give back: the plain form, which older versions read too. */
    PyObject *from_handle = PyObject_GetAttrString((PyObject *)Py_TYPE(op), "from_handle");
    if (from_handle != NULL)
      result = Py_BuildValue("(N(y#))", from_handle, SELF->ipc_handle.reserved, (Py_ssize_t)sizeof SELF->ipc_handle);
  } else {
    PyObject *rebuild = PyObject_GetAttrString(PyType_GetModule(Py_TYPE(op)), "_rebuild_event");
    if (rebuild != NULL)
      result = Py_BuildValue("(N(y#O))", rebuild, SELF->ipc_handle.reserved, (Py_ssize_t)sizeof SELF->ipc_handle,
                             hold);
  }
  Py_DECREF(hold);
  return result;
}

static PyObject *event_reduce(PyObject *op, PyObject *unused) { return aipc_py_event_reduce(op, 0); }

/* _rebuild_event(handle, hold): unpickling of a copy that carries the
 * creator's hold: opens the event (Event.from_handle), then gives the hold
 * back, whether the open worked or not (the copy is used up either way). */
PyObject *aipc_py_event_rebuild(PyObject *module, PyObject *args) {
  aipc_py_state *st = aipc_py_state_of_module(module);
  PyObject *handle, *hold;
  if (!PyArg_ParseTuple(args, "OO:_rebuild_event", &handle, &hold)) return NULL;
  if (aipc_py_check_hold(hold, "_rebuild_event") < 0) return NULL;
  PyObject *call_args = PyTuple_Pack(1, handle);
  if (call_args == NULL) return NULL;
  PyObject *ev = event_from_handle((PyObject *)st->event_type, call_args, NULL);
  Py_DECREF(call_args);
  Py_INCREF(hold);
  aipc_py_release_hold(st, &hold);
  return ev;
}

static PyObject *event_enter(PyObject *op, PyObject *unused) { return Py_NewRef(op); }
static PyObject *event_exit(PyObject *op, PyObject *args) { return event_close(op, NULL); }

static PyObject *event_repr(PyObject *op) {
  return PyUnicode_FromFormat("Event(ipc=%s, timing=%s, device=%d%s%s)", SELF->ipc ? "True" : "False",
                              SELF->timing ? "True" : "False", (int)SELF->device, SELF->opened ? ", opened" : "",
                              SELF->handle ? "" : ", closed");
}

static PyObject *get_ipc(PyObject *op, void *c) { return PyBool_FromLong(SELF->ipc); }
static PyObject *get_timing(PyObject *op, void *c) { return PyBool_FromLong(SELF->timing); }
static PyObject *get_device(PyObject *op, void *c) { return PyLong_FromLong(SELF->device); }
static PyObject *get_closed(PyObject *op, void *c) { return PyBool_FromLong(SELF->handle == NULL); }
static PyObject *get_ipc_handle(PyObject *op, void *c) {
  if (!SELF->ipc) Py_RETURN_NONE;
  return PyBytes_FromStringAndSize(SELF->ipc_handle.reserved, (Py_ssize_t)sizeof SELF->ipc_handle);
}

static PyGetSetDef event_getset[] = {
    {"ipc", get_ipc, NULL, "True for an IPC event (shareable with other processes).", NULL},
    {"timing", get_timing, NULL, "True if the event keeps time (elapsed()).", NULL},
    {"device", get_device, NULL, "The device the event belongs to.", NULL},
    {"closed", get_closed, NULL, "True after close().", NULL},
    {"ipc_handle", get_ipc_handle, NULL,
     "An IPC event's aclrtIpcEventHandle, 64 bytes (None for other events): whoever holds it may wait on and "
     "record the event.",
     NULL},
    {0},
};

static PyMethodDef event_methods[] = {
    {"record", (PyCFunction)(void (*)(void))event_record, METH_VARARGS | METH_KEYWORDS,
     "record($self, /, stream=None)\n--\n\n"
     "Records the event on stream (aclrtRecordEvent; None: the default stream): it\n"
     "completes when the work queued there before now has run."},
    {"query", event_query, METH_NOARGS,
     "query($self, /)\n--\n\nTrue if the latest record has run (aclrtQueryEventStatus); never waits."},
    {"synchronize", (PyCFunction)(void (*)(void))event_synchronize, METH_VARARGS | METH_KEYWORDS,
     "synchronize($self, /, timeout=None)\n--\n\n"
     "Waits until the latest record has run (aclrtSynchronizeEvent), with the GIL\n"
     "released; Ctrl-C interrupts it. timeout in seconds: AclError\n"
     "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT when it passes. An IPC event whose recorder died\n"
     "before its record ran fails with ACL_ERROR_RT_IPC_ERROR."},
    {"elapsed", event_elapsed, METH_O,
     "elapsed($self, end, /)\n--\n\n"
     "Milliseconds from this event's record to end's (aclrtEventElapsedTime); both\n"
     "made with timing=True and complete."},
    {"from_handle", (PyCFunction)(void (*)(void))event_from_handle, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "from_handle($type, /, handle, device=None)\n--\n\n"
     "Opens another process's IPC event from its 64-byte handle (aclrtIpcOpenEventHandle)."},
    {"close", event_close, METH_NOARGS,
     "close($self, /)\n--\n\nDestroys the event (aclrtDestroyEvent); queued work that uses it is unaffected."},
    {"__reduce__", event_reduce, METH_NOARGS,
     "__reduce__($self, /)\n--\n\nAn IPC event pickles as its handle; unpickling opens it."},
    {"__enter__", event_enter, METH_NOARGS, "__enter__($self, /)\n--\n\nThe event itself."},
    {"__exit__", event_exit, METH_VARARGS, "__exit__($self, /, *exc_info)\n--\n\nCloses the event."},
    {0},
};

static void event_dealloc(PyObject *op) {
  PyTypeObject *tp = Py_TYPE(op);
  if (SELF->handle != NULL && SELF->pid == aipc_py_pid()) {
    aipc_py_state *st = aipc_py_state_of(tp);
    event_call c = {.handle = SELF->handle};
    aipc_py_failure f = AIPC_PY_FAILURE_INIT;
    if (aipc_py_call_released(st->provider, &f, SELF->device, destroy_event, &c) != ACL_SUCCESS)
      aipc_py_warn_leak(st, "an Event", &f);
  }
  tp->tp_free(op);
  Py_DECREF(tp);
}

static const char event_doc[] =
    "Event(ipc=False, timing=False, device=None)\n--\n\n"
    "A CANN event (aclrtCreateEventExWithFlag): record(stream) marks a point in a\n"
    "stream's work; query(), synchronize() and Stream.wait() see when it is reached.\n"
    "ipc=True makes an IPC event (ACL_EVENT_IPC): it pickles as its handle, and the\n"
    "process that unpickles it waits on and records the same event. timing=True lets\n"
    "elapsed() measure between two events.";

static PyType_Slot event_slots[] = {
    {Py_tp_doc, (void *)event_doc},
    {Py_tp_new, event_new},
    {Py_tp_dealloc, event_dealloc},
    {Py_tp_repr, event_repr},
    {Py_tp_methods, event_methods},
    {Py_tp_getset, event_getset},
    {0, NULL},
};

static PyType_Spec event_spec = {
    .name = "ascend_ipc._C.Event",
    .basicsize = sizeof(aipc_py_event),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = event_slots,
};

int aipc_py_event_init_type(PyObject *module, aipc_py_state *st) {
  st->event_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &event_spec, NULL);
  if (st->event_type == NULL) return -1;
  return PyModule_AddType(module, st->event_type);
}
