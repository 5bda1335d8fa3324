/*
 * Events and IPC events.
 *
 * An event's state is a small record (the cell): how many records were
 * queued, the highest one that has run, its status and its time. A record
 * takes the next sequence number when it is queued and publishes it when the
 * stream runs it; a wait (aclrtSynchronizeEvent, aclrtStreamWaitEvent) takes
 * the sequence number queued last at the time of the call and waits until a
 * record at least that recent has run, so a later record never moves a wait
 * already issued, as CANN documents for aclrtCreateEventExWithFlag events.
 * Waiters sleep on a futex in the cell and are woken only when one sleeps.
 *
 * An IPC event's cell is a page of its own (a sealed memfd, memory.c)
 * shared through the IPC layer under a key of kind EVENT; the 64-byte
 * aclrtIpcEventHandle carries that key. Opening maps the page: records and
 * waits in any process see one another through it with no round trip. The
 * process that queued the latest record is named in the cell (pid and start
 * time), so a waiter notices when it dies before the record runs and fails
 * instead of waiting for ever. Anything in the cell may have been written by
 * another process of the user: it is read as numbers, never trusted as
 * pointers or sizes.
 *
 * Handles are checked against the registry of live events (handles.c);
 * stream tasks hold references, so an event destroyed with work pending lives until that work
 * has run (CANN: destroying does not block).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu/ipc/ipc.h"
#include "emu_internal.h"
#include "handles.h"
#include "os/os.h"

#define CELL_MAGIC 0x45504941u /* "AIPE" */

/* The shared state; laid out for 64-bit atomics in a page any process of
 * the user may map. */
typedef struct cell {
  _Atomic uint32_t word;    /* futex word: changes with every completion */
  _Atomic uint32_t waiters; /* threads sleeping (or about to) on word */
  _Atomic uint64_t recorded;  /* sequence number of the latest record queued */
  _Atomic uint64_t completed; /* highest sequence number that has run */
  _Atomic int32_t status;     /* ACL_SUCCESS, or the error of the stream that ran it */
  _Atomic int32_t recorder_pid;
  _Atomic uint64_t recorder_start; /* binds recorder_pid to its process */
  _Atomic uint64_t recorder_ns;    /* its pid namespace: another one's pids mean nothing here */
  _Atomic uint64_t stamp_ns;       /* CLOCK_MONOTONIC when `completed` ran */
  uint32_t magic;
} cell;

typedef enum event_api { API_LEGACY, API_EX } event_api;

typedef struct event {
  aipc__handle h;  /* first: the registry's head */
  uint32_t flags;  /* ACL_EVENT_* as created (an opened IPC event: ACL_EVENT_IPC) */
  event_api api;   /* which call made it: the rules differ */
  bool opened;     /* from aclrtIpcOpenEventHandle */
  bool shared;     /* creator: a handle was issued */
  int32_t device;
  uint32_t peer;   /* opened: the creator's pid */
  cell *c;
  char key[AIPC_KEY_CHARS + 1]; /* IPC: the key the handle carries */
} event;
_Static_assert(offsetof(event, h) == 0, "an event's address is its registry head's");

static void release(aipc__handle *h);
static void forget(aipc__handle *h);
static const aipc__handle_ops g_ops = {"event", release, forget, NULL};
/* Its lock also guards `shared` (one export per event). */
static aipc__handles g_events = AIPC__HANDLES_INIT(&g_ops);
static uint64_t g_self_start;             /* this process's start time, once read */
static uint64_t g_self_ns;                /* and its pid namespace */

#define TIMING_FLAGS (ACL_EVENT_TIME_LINE)
#define LEGACY_DEFAULT (ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE) /* aclrtCreateEvent: CANN's default event */

static uint64_t self_start(void) {
  uint64_t s = __atomic_load_n(&g_self_start, __ATOMIC_RELAXED);
  if (s == 0 && aipc__os_process_start(getpid(), &s) == 0) {
    __atomic_store_n(&g_self_ns, aipc__os_pid_namespace(), __ATOMIC_RELAXED);
    __atomic_store_n(&g_self_start, s, __ATOMIC_RELAXED);
  }
  return s;
}

static bool is_ipc(const event *e) { return (e->flags & ACL_EVENT_IPC) != 0; }

/* ---- lifetime ------------------------------------------------------------------- */

static void put(event *e) {
  if (!aipc__handle_unref(&e->h)) return;
  if (is_ipc(e)) {
    if (e->opened || e->shared) aipc__ipc_release(AIPC_CALL_NAME(destroy_event), e->key);
    if (!e->opened) aipc__mem_sync_free(e->c);
  } else {
    free(e->c);
  }
  memset(e->key, 0, sizeof e->key);
  free(e);
}

static void release(aipc__handle *h) { put((event *)h); }

/* Fork child: the pages and exports were the parent's (memory.c and the IPC
 * layer forget them likewise). */
static void forget(aipc__handle *h) {
  event *e = (event *)h;
  if (!is_ipc(e)) free(e->c);
  free(e);
}

static aclError get(const char *call, const char *what, aclrtEvent h, event **out) {
  aipc__handle *o;
  aclError rc = aipc__handles_get(&g_events, call, what, h, &o);
  if (rc == ACL_SUCCESS) *out = (event *)o;
  return rc;
}

static aclError publish(const char *call, event *e, aclrtEvent *out) {
  aipc__handle_init(&e->h);
  aclError rc = aipc__handles_add(&g_events, call, &e->h);
  if (rc == ACL_SUCCESS) *out = e;
  return rc;
}

static aclError create(const char *call, aclrtEvent *out, uint32_t flags, event_api api) {
  event *e = calloc(1, sizeof *e);
  if (!e) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  e->flags = flags;
  e->api = api;
  e->device = aipc__device_current();
  if (flags & ACL_EVENT_IPC) {
    void *page;
    aclError rc = aipc__mem_sync_alloc(call, e->device, &page);
    if (rc) {
      free(e);
      return rc;
    }
    e->c = page;
  } else if (!(e->c = calloc(1, sizeof *e->c))) {
    free(e);
    return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  }
  e->c->magic = CELL_MAGIC;
  return publish(call, e, out);
}

aclError aipc__emu_create_event(aclrtEvent *event_out) {
  const char *call = AIPC_CALL_NAME(create_event);
  if (!event_out) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: event is NULL", call);
  return create(call, event_out, LEGACY_DEFAULT, API_LEGACY);
}

aclError aipc__emu_create_event_with_flag(aclrtEvent *event_out, uint32_t flag) {
  const char *call = AIPC_CALL_NAME(create_event_with_flag);
  if (!event_out) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: event is NULL", call);
  if (flag & ACL_EVENT_IPC)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: ACL_EVENT_IPC is accepted only by aclrtCreateEventExWithFlag, and alone", call);
  if (flag == 0 || flag > 0x3f)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: flag 0x%x is not a combination of ACL_EVENT_SYNC, _CAPTURE_STREAM_PROGRESS, _TIME_LINE, "
                      "_DEVICE_USE_ONLY, _EXTERNAL",
                      call, flag);
  if ((flag & (ACL_EVENT_DEVICE_USE_ONLY | ACL_EVENT_EXTERNAL)) && (flag & (flag - 1)))
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: ACL_EVENT_DEVICE_USE_ONLY and ACL_EVENT_EXTERNAL cannot be combined with other flags (0x%x)",
                      call, flag);
  return create(call, event_out, flag, API_LEGACY);
}

aclError aipc__emu_create_event_ex_with_flag(aclrtEvent *event_out, uint32_t flag) {
  const char *call = AIPC_CALL_NAME(create_event_ex_with_flag);
  if (!event_out) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: event is NULL", call);
  const uint32_t allowed = ACL_EVENT_SYNC | ACL_EVENT_CAPTURE_STREAM_PROGRESS | 0x4u | ACL_EVENT_TIME_LINE;
  if ((flag & ACL_EVENT_IPC) && flag != ACL_EVENT_IPC)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: ACL_EVENT_IPC must be used alone (flag 0x%x)", call, flag);
  if (flag == 0 || (flag != ACL_EVENT_IPC && (flag & ~allowed)))
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: flag 0x%x is not ACL_EVENT_IPC or a combination of ACL_EVENT_SYNC, "
                      "_CAPTURE_STREAM_PROGRESS, _TIME_LINE",
                      call, flag);
  return create(call, event_out, flag, API_EX);
}

aclError aipc__emu_destroy_event(aclrtEvent h) {
  aipc__handle *o;
  aclError rc = aipc__handles_remove(&g_events, AIPC_CALL_NAME(destroy_event), h, &o);
  if (rc) return rc;
  put((event *)o); /* queued records and waits keep it until they have run */
  return ACL_SUCCESS;
}

/* ---- the cell ----------------------------------------------------------------------- */

static bool done(cell *c, uint64_t target) { return atomic_load(&c->completed) >= target; }

/* Publishes record seq as run, with the status of the stream that ran it. */
static void complete(cell *c, uint64_t seq, aclError status) {
  atomic_store(&c->status, status);
  atomic_store(&c->stamp_ns, aipc__os_now_ns());
  uint64_t cur = atomic_load(&c->completed);
  while (cur < seq && !atomic_compare_exchange_weak(&c->completed, &cur, seq)) {
  }
  atomic_fetch_add(&c->word, 1);
  if (atomic_load(&c->waiters) > 0) aipc__os_futex_wake_all((const uint32_t *)&c->word);
}

typedef enum wait_result { WAIT_DONE, WAIT_TIMEOUT, WAIT_DEAD, WAIT_CANCELLED } wait_result;

/*
 * Waits until record `target` of e has run, until deadline_ns (0: none), or
 * until cancel turns true. For an IPC event, also until the process that
 * queued the latest record is gone with it unrun (checked every slice).
 */
static wait_result wait_cell(event *e, uint64_t target, uint64_t deadline_ns, const atomic_bool *cancel,
                             int32_t *dead_pid) {
  cell *c = e->c;
  bool check_peer = is_ipc(e);
  for (;;) {
    atomic_fetch_add(&c->waiters, 1);
    uint32_t w = atomic_load(&c->word);
    bool ok = done(c, target);
    int slice = AIPC_TASK_POLL_MS;
    if (!ok && deadline_ns) {
      uint64_t now = aipc__os_now_ns();
      if (now >= deadline_ns) {
        atomic_fetch_sub(&c->waiters, 1);
        return done(c, target) ? WAIT_DONE : WAIT_TIMEOUT;
      }
      uint64_t left_ms = (deadline_ns - now + 999999) / 1000000;
      if (left_ms < (uint64_t)slice) slice = (int)left_ms;
    }
    if (!ok) aipc__os_futex_wait((const uint32_t *)&c->word, w, (cancel || check_peer || deadline_ns) ? slice : -1);
    atomic_fetch_sub(&c->waiters, 1);
    if (ok || done(c, target)) return WAIT_DONE;
    if (cancel && atomic_load(cancel)) return WAIT_CANCELLED;
    if (check_peer) {
      int32_t pid = atomic_load(&c->recorder_pid);
      uint64_t start = atomic_load(&c->recorder_start), ns = atomic_load(&c->recorder_ns);
      (void)self_start();
      if (pid != getpid() && ns == __atomic_load_n(&g_self_ns, __ATOMIC_RELAXED) && ns != 0 &&
          !aipc__os_process_alive(pid, start)) {
        if (done(c, target)) return WAIT_DONE;
        *dead_pid = pid;
        return WAIT_DEAD;
      }
    }
  }
}

/* The outcome of a wait as a recorded error, or ACL_SUCCESS. */
static aclError wait_error(const char *call, event *e, wait_result r, int32_t dead_pid, aclError timeout_code,
                           long long timeout, const char *unit) {
  switch (r) {
    case WAIT_DONE: {
      aclError st = atomic_load(&e->c->status);
      if (st == ACL_SUCCESS) return ACL_SUCCESS;
      return aipc__fail(st, "%s: the work recorded before the event failed (%s): its results were never written",
                        call, aipc__error_text(st));
    }
    case WAIT_TIMEOUT:
      return aipc__fail(timeout_code, "%s: the event did not complete within %lld %s", call, timeout, unit);
    case WAIT_DEAD:
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR,
                        "%s: process %d, which recorded this IPC event last, ended before its record ran: the event "
                        "will never complete",
                        call, (int)dead_pid);
    case WAIT_CANCELLED:
      return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: the waiting stream was destroyed", call);
  }
  return ACL_ERROR_RT_INTERNAL_ERROR;
}

/* ---- record --------------------------------------------------------------------------- */

typedef struct record_task {
  aipc__task t;
  event *e;
  uint64_t seq;
} record_task;

static aclError run_record(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)cancel;
  record_task *r = (record_task *)t;
  complete(r->e->c, r->seq, failed);
  return ACL_SUCCESS;
}

static void free_record(aipc__task *t) {
  put(((record_task *)t)->e);
  free(t);
}

/* Never to run (abort, stop on failure, destroy by force): the record's
 * waiters are released with why instead of waiting for ever. */
static void drop_record(aipc__task *t, aclError why) {
  record_task *r = (record_task *)t;
  complete(r->e->c, r->seq, why);
}

/* Refusals shared by the calls that queue work or wait on the host. */
static aclError usable(const char *call, const event *e) {
  if (e->flags & ACL_EVENT_DEVICE_USE_ONLY)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: the event was created with ACL_EVENT_DEVICE_USE_ONLY: only device code may use it", call);
  if (e->flags & ACL_EVENT_EXTERNAL)
    return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      "%s: the event was created with ACL_EVENT_EXTERNAL, which is for updating the tasks of a "
                      "captured model; the emulator does not update captured tasks",
                      call);
  return ACL_SUCCESS;
}

static void note_recorder(event *e) {
  if (is_ipc(e)) { /* who to watch for: this process, until it has run */
    atomic_store(&e->c->recorder_start, self_start());
    atomic_store(&e->c->recorder_ns, __atomic_load_n(&g_self_ns, __ATOMIC_RELAXED));
    atomic_store(&e->c->recorder_pid, (int32_t)getpid());
  }
}

/* A record replayed by a model runtime instance (model.c) is a record made
 * at that moment: it takes the next number then. */
static aclError clone_record(const aipc__task *t, const char *call, aipc__task **out) {
  event *e = ((const record_task *)t)->e;
  record_task *c = malloc(sizeof *c);
  if (!c) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  aipc__handle_ref(&e->h);
  note_recorder(e);
  *c = (record_task){{NULL, run_record, free_record, drop_record}, e, atomic_fetch_add(&e->c->recorded, 1) + 1};
  *out = &c->t;
  return ACL_SUCCESS;
}

static aclError record(const char *call, aclrtEvent h, aclrtStream stream) {
  event *e = NULL;
  aclError rc = get(call, "event", h, &e);
  if (rc) return rc;
  int32_t dev;
  if ((rc = usable(call, e)) || (rc = aipc__stream_device(call, stream, &dev))) goto out;
  if (dev != e->device) {
    rc = aipc__fail(ACL_ERROR_RT_STREAM_CONTEXT,
                    "%s: the event belongs to device %d and the stream to device %d: record on a stream of the "
                    "event's device",
                    call, (int)e->device, (int)dev);
    goto out;
  }
  record_task *r = malloc(sizeof *r);
  if (!r) {
    rc = aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
    goto out;
  }
  aipc__handle_ref(&e->h);
  if (aipc__stream_recording(stream)) { /* a template for model.c: its number is taken at each replay */
    *r = (record_task){{NULL, run_record, free_record, drop_record}, e, 0};
    rc = aipc__stream_submit_recordable(call, stream, &r->t, clone_record);
    goto out;
  }
  note_recorder(e);
  uint64_t seq = atomic_fetch_add(&e->c->recorded, 1) + 1;
  *r = (record_task){{NULL, run_record, free_record, drop_record}, e, seq};
  rc = aipc__stream_submit_recordable(call, stream, &r->t, clone_record); /* takes r, even when it fails */
  if (rc) { /* the sequence number is spent: complete it so no wait hangs on it */
    complete(e->c, seq, ACL_SUCCESS);
  }
out:
  put(e);
  return rc;
}

aclError aipc__emu_record_event(aclrtEvent h, aclrtStream stream) {
  return record(AIPC_CALL_NAME(record_event), h, stream);
}

aclError aipc__emu_record_event_with_flag(aclrtEvent h, aclrtStream stream, uint32_t flag) {
  const char *call = AIPC_CALL_NAME(record_event_with_flag);
  /* EXTERNAL: a record in a captured graph that streams outside it see.
   * model.c replays every recorded record as a real one, so on a recording
   * stream it is the plain record; CANN refuses it anywhere else. */
  if (flag == ACL_EVENT_RECORD_EXTERNAL && !aipc__stream_recording(stream))
    return aipc__fail(ACL_ERROR_RT_STREAM_NOT_CAPTURED,
                      "%s: ACL_EVENT_RECORD_EXTERNAL is only for a stream being captured (aclmdlRICaptureBegin)",
                      call);
  if (flag == ACL_EVENT_RECORD_EXTERNAL) return record(call, h, stream);
  if (flag != ACL_EVENT_RECORD_DEFAULT)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: flag 0x%x is neither ACL_EVENT_RECORD_DEFAULT (0) nor ACL_EVENT_RECORD_EXTERNAL (1)", call,
                      flag);
  return record(call, h, stream);
}

/* ---- reset ------------------------------------------------------------------------------ */

typedef struct reset_task {
  aipc__task t;
  event *e;
  uint64_t floor; /* the latest record queued before the reset */
} reset_task;

/* Back to "not recorded" for the waits: the latest record queued before the
 * reset, and every earlier one, count as not run, so a wait for them
 * blocks until a newer record runs (CANN's warning: a wait queued after a
 * reset on another stream does not succeed). A newer record that already
 * ran stays. */
static aclError run_reset(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)failed;
  (void)cancel;
  reset_task *r = (reset_task *)t;
  cell *c = r->e->c;
  uint64_t cur = atomic_load(&c->completed);
  while (cur <= r->floor && r->floor > 0 && !atomic_compare_exchange_weak(&c->completed, &cur, r->floor - 1)) {
  }
  atomic_store(&c->status, ACL_SUCCESS);
  return ACL_SUCCESS;
}

static void free_reset(aipc__task *t) {
  put(((reset_task *)t)->e);
  free(t);
}

aclError aipc__emu_reset_event(aclrtEvent h, aclrtStream stream) {
  const char *call = AIPC_CALL_NAME(reset_event);
  event *e = NULL;
  aclError rc = get(call, "event", h, &e);
  if (rc) return rc;
  int32_t dev;
  if ((rc = usable(call, e)) || (rc = aipc__stream_device(call, stream, &dev))) goto out;
  if (is_ipc(e) || !(e->flags & ACL_EVENT_SYNC)) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: only events created with ACL_EVENT_SYNC can be reset (flags 0x%x)", call, e->flags);
    goto out;
  }
  if (dev != e->device) {
    rc = aipc__fail(ACL_ERROR_RT_STREAM_CONTEXT, "%s: the event belongs to device %d and the stream to device %d",
                    call, (int)e->device, (int)dev);
    goto out;
  }
  reset_task *r = malloc(sizeof *r);
  if (!r) {
    rc = aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
    goto out;
  }
  aipc__handle_ref(&e->h);
  *r = (reset_task){{NULL, run_reset, free_reset, NULL}, e, atomic_load(&e->c->recorded)};
  rc = aipc__stream_submit(call, stream, &r->t);
out:
  put(e);
  return rc;
}

/* ---- query, synchronize ------------------------------------------------------------------- */

aclError aipc__emu_query_event_status(aclrtEvent h, aclrtEventRecordedStatus *status) {
  const char *call = AIPC_CALL_NAME(query_event_status);
  if (!status) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: status is NULL", call);
  event *e = NULL;
  aclError rc = get(call, "event", h, &e);
  if (rc) return rc;
  if (e->flags & ACL_EVENT_EXTERNAL) {
    rc = usable(call, e);
  } else {
    uint64_t target = atomic_load(&e->c->recorded);
    bool complete_now;
    if (target == 0) /* never recorded: CANN's two kinds of event answer differently */
      complete_now = e->api == API_EX;
    else
      complete_now = done(e->c, target) && atomic_load(&e->c->status) == ACL_SUCCESS;
    *status = complete_now ? ACL_EVENT_RECORDED_STATUS_COMPLETE : ACL_EVENT_RECORDED_STATUS_NOT_READY;
  }
  put(e);
  return rc;
}

static aclError synchronize(const char *call, aclrtEvent h, int32_t timeout_ms) {
  event *e = NULL;
  aclError rc = get(call, "event", h, &e);
  if (rc) return rc;
  if (e->flags & ACL_EVENT_EXTERNAL) {
    rc = usable(call, e);
    goto out;
  }
  uint64_t target = atomic_load(&e->c->recorded);
  if (target == 0) goto out; /* never recorded: nothing to wait for */
  uint64_t deadline = timeout_ms > 0 ? aipc__os_now_ns() + (uint64_t)timeout_ms * 1000000u : 0;
  int32_t dead = 0;
  wait_result r = wait_cell(e, target, deadline, NULL, &dead);
  rc = wait_error(call, e, r, dead, ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, timeout_ms, "ms");
out:
  put(e);
  return rc;
}

aclError aipc__emu_synchronize_event(aclrtEvent h) { return synchronize(AIPC_CALL_NAME(synchronize_event), h, -1); }

aclError aipc__emu_synchronize_event_with_timeout(aclrtEvent h, int32_t timeout) {
  const char *call = AIPC_CALL_NAME(synchronize_event_with_timeout);
  if (timeout == 0 || timeout < -1)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: timeout %d ms is invalid (-1: no limit, or > 0)", call,
                      (int)timeout);
  return synchronize(call, h, timeout);
}

/* ---- stream waits ---------------------------------------------------------------------------- */

typedef struct wait_task {
  aipc__task t;
  event *e;
  uint64_t target;
  int32_t timeout_s; /* 0: none */
} wait_task;

static aclError run_wait(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)failed;
  wait_task *w = (wait_task *)t;
  uint64_t deadline = w->timeout_s > 0 ? aipc__os_now_ns() + (uint64_t)w->timeout_s * 1000000000u : 0;
  int32_t dead = 0;
  wait_result r = wait_cell(w->e, w->target, deadline, cancel, &dead);
  return wait_error("aclrtStreamWaitEvent (running on the stream)", w->e, r, dead, ACL_ERROR_RT_TASK_TIMEOUT,
                    w->timeout_s, "s");
}

static void free_wait(aipc__task *t) {
  put(((wait_task *)t)->e);
  free(t);
}

/* A wait replayed by a model runtime instance waits for the records queued
 * before that moment (none: no wait). */
static aclError clone_wait(const aipc__task *t, const char *call, aipc__task **out) {
  const wait_task *w = (const wait_task *)t;
  uint64_t target = atomic_load(&w->e->c->recorded);
  *out = NULL;
  if (target == 0 || (done(w->e->c, target) && atomic_load(&w->e->c->status) == ACL_SUCCESS)) return ACL_SUCCESS;
  wait_task *c = malloc(sizeof *c);
  if (!c) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  aipc__handle_ref(&w->e->h);
  *c = (wait_task){{NULL, run_wait, free_wait, NULL}, w->e, target, w->timeout_s};
  *out = &c->t;
  return ACL_SUCCESS;
}

static aclError stream_wait(const char *call, aclrtStream stream, aclrtEvent h, int32_t timeout_s) {
  event *e = NULL;
  aclError rc = get(call, "event", h, &e);
  if (rc) return rc;
  int32_t dev;
  if ((rc = usable(call, e)) || (rc = aipc__stream_device(call, stream, &dev))) goto out;
  if (!is_ipc(e) && !(e->flags & ACL_EVENT_SYNC)) {
    rc = aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                    "%s: the event was created without ACL_EVENT_SYNC (flags 0x%x): streams cannot wait on it", call,
                    e->flags);
    goto out;
  }
  if (!is_ipc(e) && dev != e->device) {
    rc = aipc__fail(ACL_ERROR_RT_STREAM_CONTEXT,
                    "%s: the event belongs to device %d and the stream to device %d: across devices, share an IPC "
                    "event",
                    call, (int)e->device, (int)dev);
    goto out;
  }
  if (aipc__stream_recording(stream)) { /* a template for model.c: what to wait for is decided at each replay */
    wait_task *w = malloc(sizeof *w);
    if (!w) {
      rc = aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
      goto out;
    }
    aipc__handle_ref(&e->h);
    *w = (wait_task){{NULL, run_wait, free_wait, NULL}, e, 0, timeout_s};
    rc = aipc__stream_submit_recordable(call, stream, &w->t, clone_wait);
    goto out;
  }
  uint64_t target = atomic_load(&e->c->recorded);
  if (target == 0) {
    if (e->api == API_LEGACY)
      rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: the event has not been recorded", call);
    goto out; /* CANN: a wait on an Ex or IPC event never recorded is no wait */
  }
  if (done(e->c, target) && atomic_load(&e->c->status) == ACL_SUCCESS) goto out; /* nothing to hold back */
  wait_task *w = malloc(sizeof *w);
  if (!w) {
    rc = aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
    goto out;
  }
  aipc__handle_ref(&e->h);
  *w = (wait_task){{NULL, run_wait, free_wait, NULL}, e, target, timeout_s};
  rc = aipc__stream_submit_recordable(call, stream, &w->t, clone_wait);
out:
  put(e);
  return rc;
}

aclError aipc__emu_stream_wait_event(aclrtStream stream, aclrtEvent ev) {
  return stream_wait(AIPC_CALL_NAME(stream_wait_event), stream, ev, 0);
}

aclError aipc__emu_stream_wait_event_with_flag(aclrtStream stream, aclrtEvent ev, uint32_t timeout, uint32_t flag) {
  const char *call = AIPC_CALL_NAME(stream_wait_event_with_flag);
  /* EXTERNAL: a wait in a captured graph on a record outside it; replayed
   * waits already take their target when the model runs. */
  if (flag == ACL_EVENT_WAIT_EXTERNAL && !aipc__stream_recording(stream))
    return aipc__fail(ACL_ERROR_RT_STREAM_NOT_CAPTURED,
                      "%s: ACL_EVENT_WAIT_EXTERNAL is only for a stream being captured (aclmdlRICaptureBegin)", call);
  if (flag != ACL_EVENT_WAIT_DEFAULT && flag != ACL_EVENT_WAIT_EXTERNAL)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: flag 0x%x is neither ACL_EVENT_WAIT_DEFAULT (0) nor ACL_EVENT_WAIT_EXTERNAL (1)", call, flag);
  if (timeout > INT32_MAX)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: timeout %u s is out of range (0: no limit, up to %d)", call,
                      timeout, INT32_MAX);
  return stream_wait(call, stream, ev, (int32_t)timeout);
}

aclError aipc__emu_stream_wait_event_with_timeout(aclrtStream stream, aclrtEvent ev, int32_t timeout) {
  const char *call = AIPC_CALL_NAME(stream_wait_event_with_timeout);
  if (timeout < 0)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: timeout %d s is negative (0: no limit)", call, (int)timeout);
  return stream_wait(call, stream, ev, timeout);
}

/* ---- timing ---------------------------------------------------------------------------------- */

static aclError stamp(const char *call, const char *what, event *e, uint64_t *ns) {
  if (is_ipc(e))
    return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "%s: %s is an IPC event, which keeps no time", call, what);
  if ((e->flags & ACL_EVENT_EXTERNAL) || (e->flags & ACL_EVENT_DEVICE_USE_ONLY)) return usable(call, e);
  if (!(e->flags & TIMING_FLAGS))
    return aipc__fail(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
                      "%s: %s was created without ACL_EVENT_TIME_LINE (flags 0x%x): it keeps no time", call, what,
                      e->flags);
  uint64_t target = atomic_load(&e->c->recorded);
  if (target == 0) return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: %s was never recorded", call, what);
  if (!done(e->c, target))
    return aipc__fail(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
                      "%s: %s has not completed yet (synchronize it or its stream first)", call, what);
  *ns = atomic_load(&e->c->stamp_ns);
  return ACL_SUCCESS;
}

aclError aipc__emu_event_get_timestamp(aclrtEvent h, uint64_t *timestamp) {
  const char *call = AIPC_CALL_NAME(event_get_timestamp);
  if (!timestamp) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: timestamp is NULL", call);
  event *e = NULL;
  aclError rc = get(call, "event", h, &e);
  if (rc) return rc;
  uint64_t ns;
  if ((rc = stamp(call, "event", e, &ns)) == ACL_SUCCESS)
    *timestamp = ns / 1000; /* CANN: microseconds since the device started; here CLOCK_MONOTONIC (since boot) */
  put(e);
  return rc;
}

aclError aipc__emu_event_elapsed_time(float *ms, aclrtEvent start, aclrtEvent end) {
  const char *call = AIPC_CALL_NAME(event_elapsed_time);
  if (!ms) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: ms is NULL", call);
  event *a = NULL, *b = NULL;
  aclError rc = get(call, "startEvent", start, &a);
  if (rc) return rc;
  if ((rc = get(call, "endEvent", end, &b))) goto out;
  uint64_t t0, t1;
  if ((rc = stamp(call, "startEvent", a, &t0)) || (rc = stamp(call, "endEvent", b, &t1))) goto out;
  *ms = (float)(((double)t1 - (double)t0) / 1e6);
out:
  put(a);
  if (b) put(b);
  return rc;
}

/* ---- IPC handles ---------------------------------------------------------------------------- */

aclError aipc__emu_ipc_get_event_handle(aclrtEvent h, aclrtIpcEventHandle *handle) {
  const char *call = AIPC_CALL_NAME(ipc_get_event_handle);
  if (!handle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", call);
  event *e = NULL;
  aclError rc = get(call, "event", h, &e);
  if (rc) return rc;
  if (!is_ipc(e)) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: the event was not created with aclrtCreateEventExWithFlag(ACL_EVENT_IPC) (flags 0x%x)", call,
                    e->flags);
  } else if (e->opened) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: the event was opened from a handle; only its creator issues handles (pass on the same "
                    "handle)",
                    call);
  } else {
    aipc__handles_lock(&g_events); /* one export per event: every call gives the same handle */
    if (!e->shared) {
      rc = aipc__ipc_share(call, AIPC_OBJECT_EVENT, e->c, false, e->key);
      if (rc == ACL_SUCCESS) e->shared = true;
    }
    aipc__handles_unlock(&g_events);
    if (rc == ACL_SUCCESS) {
      aipc__event_handle_write(e->key, handle);
    }
  }
  put(e);
  return rc;
}

aclError aipc__emu_ipc_open_event_handle(aclrtIpcEventHandle handle, aclrtEvent *event_out) {
  const char *call = AIPC_CALL_NAME(ipc_open_event_handle);
  if (!event_out) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: event is NULL", call);
  event *e = calloc(1, sizeof *e);
  if (!e) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  aipc__key k;
  aclError rc = aipc__event_handle_parse(call, &handle, &k, e->key);
  memset(k.secret, 0, sizeof k.secret);
  void *page;
  if (rc == ACL_SUCCESS) rc = aipc__ipc_open(call, AIPC_OBJECT_EVENT, e->key, &page, &e->peer);
  if (rc) {
    memset(e->key, 0, sizeof e->key);
    free(e);
    return rc;
  }
  e->c = page;
  e->flags = ACL_EVENT_IPC;
  e->api = API_EX;
  e->opened = true;
  e->device = aipc__device_current();
  return publish(call, e, event_out);
}

/* ---- teardown, fork ---------------------------------------------------------------------------- */

/* Streams have drained: every reference left is the registry's. */
void aipc__event_finalize(void) { aipc__handles_finalize(&g_events); }

void aipc__event_atfork_prepare(void) { aipc__handles_atfork_prepare(&g_events); }
void aipc__event_atfork_parent(void) { aipc__handles_atfork_parent(&g_events); }

void aipc__event_atfork_child(void) {
  aipc__handles_atfork_child(&g_events); /* the child starts with no events */
  g_self_start = 0;
  g_self_ns = 0;
}
