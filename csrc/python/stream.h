/*
 * Stream (aclrtCreateStream) and Event (aclrtCreateEventExWithFlag): the
 * stream order of CANN for Python, SPEC 3.1.
 *
 * A Stream keeps alive every Python object its queued work reads or writes
 * (the arrays and host buffers of copy_from, the events it waits on) until
 * synchronize() has seen that work run, so queued work never outlives its
 * operands. An Event made with ipc=True pickles as its 64-byte
 * aclrtIpcEventHandle; unpickling opens it (aclrtIpcOpenEventHandle) in the
 * receiving process. Every wait releases the GIL and is cut into short
 * slices, between which Ctrl-C (KeyboardInterrupt) gets through.
 *
 * Both record the process that made them: in a forked child they are
 * foreign (the child's runtime has no such stream or event), and every use
 * is a ValueError.
 */
#ifndef ASCEND_IPC_PYTHON_STREAM_H_
#define ASCEND_IPC_PYTHON_STREAM_H_

#include "module.h"

typedef struct aipc_py_stream {
  PyObject_HEAD
  aclrtStream handle; /* NULL once closed */
  int32_t device;
  long pid;
  PyObject *pending; /* list: what queued work uses, released by synchronize() */
  Py_ssize_t busy;   /* calls using handle with the GIL released (aipc_py_call_counted) */
} aipc_py_stream;

typedef struct aipc_py_event {
  PyObject_HEAD
  aclrtEvent handle; /* NULL once closed */
  int32_t device;
  long pid;
  int ipc, timing, opened;
  aclrtIpcEventHandle ipc_handle; /* ipc: the handle (the creator fetches it at creation) */
  Py_ssize_t busy; /* calls using handle with the GIL released (aipc_py_call_counted) */
} aipc_py_event;

/* Both types (event.c adds Event). */
int aipc_py_stream_init_types(PyObject *module, aipc_py_state *st);
int aipc_py_event_init_type(PyObject *module, aipc_py_state *st);

/* The stream handle of obj (None: the default stream, NULL) for work on
 * device: 0, or -1 with TypeError/ValueError. */
int aipc_py_stream_arg(aipc_py_state *st, PyObject *obj, aclrtStream *handle);
/* The busy counter of a Stream obj (for aipc_py_call_counted), NULL for None. */
Py_ssize_t *aipc_py_stream_busy(PyObject *obj);
/* Keeps obj alive until the stream's next synchronize(). 0 or -1. */
int aipc_py_stream_keep(PyObject *stream, PyObject *obj);

/* 0 if ev can be used in this process (an IPC event inherited across fork
 * opens its handle here on first use); else -1 with ValueError or AclError. */
int aipc_py_event_usable(aipc_py_event *ev);
/* A new Event: ipc, else sync (and timing). device < 0: the current one. */
PyObject *aipc_py_event_create(aipc_py_state *st, int ipc, int timing, int32_t device);
/* Records ev on stream_obj (None: the default stream). 0 or -1. */
int aipc_py_event_record(aipc_py_state *st, aipc_py_event *ev, PyObject *stream_obj);
/* Pickling of an IPC event (Event.__reduce__, and _reduce_for_one() for
 * one receiver); _rebuild_event(handle, hold): its unpickling. */
PyObject *aipc_py_event_reduce(PyObject *op, int one_receiver);
PyObject *aipc_py_event_rebuild(PyObject *module, PyObject *args);
/* Opens an IPC event handle and waits (GIL released, interruptible) until
 * the record it saw last has run, then destroys the opened event. 0 or -1. */
int aipc_py_event_wait_handle(aipc_py_state *st, const aclrtIpcEventHandle *h, int32_t device);

#endif
