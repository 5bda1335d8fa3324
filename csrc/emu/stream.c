/*
 * Streams: each has a worker thread and a FIFO of tasks (copies, memsets,
 * event records and waits, notify records and waits). Work is validated
 * when queued (argument errors come back at once) and again when it runs,
 * so memory freed in between is an asynchronous error that
 * aclrtSynchronizeStream reports.
 *
 * Failure modes (aclrtSetStreamFailureMode). ACL_CONTINUE_ON_FAILURE, the
 * default: the tasks behind a failed one run, as CANN documents; the failure
 * is kept for aclrtSynchronizeStream, and the events recorded until it is
 * reported complete with it, so a consumer waiting on them learns that the
 * work before the record did not all succeed. ACL_STOP_ON_FAILURE: after a
 * failure the stream runs nothing more: its queued tasks are dropped (a
 * dropped record completes its event with the failure, so no waiter hangs),
 * new work is refused with the failure's code, and every synchronize returns
 * it, until the stream is destroyed (CANN's "abort state").
 *
 * aclrtStreamAbort interrupts the running task (a blocking one gives up) and
 * drops the queued ones; its results and errors are discarded, and a
 * synchronize that was waiting meanwhile returns ACL_ERROR_RT_STREAM_ABORT.
 * aclrtStreamStop interrupts the running task only (it fails with
 * ACL_ERROR_RT_STREAM_ABORT); the queued ones then run.
 *
 * Handles are checked against the registry of live streams (handles.c), so
 * a stale or made-up handle is an error, not a crash. Callers hold a
 * reference while they use a stream; the last reference frees it.
 *
 * Every stream belongs to a context (context.c: its id), the one current in
 * the thread that created it. Each context has a default stream, the NULL
 * stream of the threads where it is current: created on first use,
 * registered like any stream (so aclrtCtxGetCurrentDefaultStream can hand it
 * out) but never destroyed by aclrtDestroyStream; g_defaults maps context
 * ids to them. Lock order: g_defaults_mu -> the registry -> a stream's mu.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "os/os.h"
#include "emu_internal.h"
#include "handles.h"

typedef struct stream {
  aipc__handle h; /* first: the registry's head */
  pthread_mutex_t mu;
  pthread_cond_t work; /* queue non-empty or stop */
  pthread_cond_t idle; /* pending reached 0 */
  aipc__task *head, *tail;
  size_t pending; /* queued plus running */
  bool stop;
  bool started; /* the worker has run: see stream_new */
  atomic_bool cancel; /* the running task must give up: see `interrupt` */
  aclError err;       /* first asynchronous error since the last synchronize */
  char msg[512];
  pthread_t thread;
  int32_t device;  /* current device of the thread that created it */
  uint64_t ctx;    /* the id of its context */
  bool is_default; /* its context's default stream */
  atomic_uint overflow_switch; /* aclrtSetStreamOverflowSwitch */
  /* Configuration (aclrtCreateStreamWithConfig, V2); fixed at creation. */
  uint32_t flags;
  uint32_t priority;
  uint32_t id;       /* aipc__stream_id, and aclrtStreamGetId */
  uint32_t task_seq; /* the last task id given out, under mu */
  /* Under mu: */
  uint64_t mode;        /* ACL_CONTINUE_ON_FAILURE or ACL_STOP_ON_FAILURE */
  bool mode_set;        /* CANN: once per stream */
  bool halted;          /* STOP_ON_FAILURE triggered: err and msg stay */
  bool running;         /* the worker is inside a task's run */
  aipc__task *current;  /* that task: a forked child frees its record */
  int interrupt;        /* why cancel is set: INT_FORCE (for good), INT_ABORT, INT_STOP (that task only) */
  uint64_t aborts;      /* aclrtStreamAbort calls so far: a synchronize spanning one fails */
  aipc__recorder *rec; /* under mu: a model capturing or building from this stream takes its tasks */
} stream;

enum { INT_NONE, INT_FORCE, INT_ABORT, INT_STOP };
/* Streams whose tasks the host may not queue: the device (or a model) runs them. */
#define HOST_REFUSED_FLAGS (ACL_STREAM_PERSISTENT | ACL_STREAM_DEVICE_USE_ONLY | ACL_STREAM_CPU_SCHEDULE)
_Static_assert(offsetof(stream, h) == 0, "a stream's address is its registry head's");

static void release(aipc__handle *h);
static void forget(aipc__handle *h);
static void fork_hold(aipc__handle *h, bool hold);
static const aipc__handle_ops g_ops = {"stream", release, forget, fork_hold};
static aipc__handles g_streams = AIPC__HANDLES_INIT(&g_ops);
/* Context id -> its default stream (borrowed: the registry holds the
 * reference; an entry goes before its stream leaves the registry). */
static pthread_mutex_t g_defaults_mu = PTHREAD_MUTEX_INITIALIZER;
static aipc__hmap g_defaults = AIPC__HMAP_INIT;
static atomic_uint g_next_id = 1;
/* The stream whose work this thread does (its worker, or a callback it waits
 * for): a synchronize or destroy of it from here would wait for itself. */
static _Thread_local aipc__stream_mark tl_running;
static _Thread_local bool tl_has_last;
static _Thread_local uint32_t tl_last_task; /* aclrtGetThreadLastTaskId */

static aipc__hkey ctx_key(uint64_t id) { return (aipc__hkey){id, 0}; }

/* After registering a stream of context ctx: whether ctx is still live. A
 * destroy takes the context out before it collects its streams, so a stream
 * registered while the context was live is collected by it, and one whose
 * context is gone here is the creator's to undo. */
static aclError ctx_still_live(const char *call, uint64_t ctx) {
  uint64_t now;
  int32_t device;
  aclError rc = aipc__ctx_current(call, &now, &device);
  if (rc == ACL_SUCCESS && now != ctx)
    rc = aipc__fail(ACL_ERROR_RT_CONTEXT_NULL, "%s: the current context was destroyed meanwhile", call);
  return rc;
}

/* A task the stream will never run: its drop hook (a record completes its
 * event with err), then its free. */
static void drop_task(aipc__task *t, aclError err) {
  if (t->drop) t->drop(t, err);
  t->free(t);
}

static void free_tasks(stream *s, aclError err) {
  for (aipc__task *t = s->head, *next; t; t = next) {
    next = t->next;
    drop_task(t, err);
  }
  s->head = s->tail = NULL;
}

/* Fork child: frees the task records only (what they reference, events
 * included, the child's other parts forget by themselves). */
static void forget_tasks(stream *s) {
  for (aipc__task *t = s->head, *next; t; t = next) {
    next = t->next;
    free(t);
  }
  s->head = s->tail = NULL;
  free(s->current); /* the parent's worker was running it */
  s->current = NULL;
}

static void put(stream *s) {
  if (!aipc__handle_unref(&s->h)) return;
  if (s->rec && s->rec->release) s->rec->release(s->rec); /* destroyed while a model recorded from it */
  free_tasks(s, ACL_ERROR_RT_STREAM_ABORT);
  pthread_cond_destroy(&s->work);
  pthread_cond_destroy(&s->idle);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static void *worker(void *arg) {
  stream *s = arg;
  tl_running = (aipc__stream_mark){true, s->id};
  pthread_mutex_lock(&s->mu);
  s->started = true;
  pthread_cond_broadcast(&s->idle);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
    aipc__task *t = s->head;
    if (!t) break;
    s->head = t->next;
    if (!s->head) s->tail = NULL;
    if (s->halted) { /* stopped on failure: nothing more runs */
      aclError err = s->err;
      pthread_mutex_unlock(&s->mu);
      drop_task(t, err);
      pthread_mutex_lock(&s->mu);
      if (--s->pending == 0) pthread_cond_broadcast(&s->idle);
      continue;
    }
    aclError failed = s->err;
    s->running = true;
    s->current = t;
    pthread_mutex_unlock(&s->mu);
    aclError rc = t->run(t, failed, &s->cancel);
    char m[sizeof s->msg];
    if (rc) {
      const char *e = aipc__recent_err_msg();
      snprintf(m, sizeof m, "%s", e ? e : aipc__error_text(rc));
    }
    pthread_mutex_lock(&s->mu);
    s->running = false;
    s->current = NULL;
    pthread_mutex_unlock(&s->mu);
    t->free(t);
    pthread_mutex_lock(&s->mu);
    if (s->interrupt == INT_ABORT) {
      rc = ACL_SUCCESS; /* aborted: its results are discarded */
    } else if (s->interrupt == INT_STOP && rc) {
      rc = ACL_ERROR_RT_STREAM_ABORT;
      snprintf(m, sizeof m, "the task was stopped by aclrtStreamStop");
    }
    if (s->interrupt != INT_NONE && s->interrupt != INT_FORCE) {
      s->interrupt = INT_NONE;
      atomic_store(&s->cancel, false);
    }
    if (rc && s->err == ACL_SUCCESS) {
      s->err = rc;
      memcpy(s->msg, m, sizeof s->msg);
    }
    if (rc && s->mode == ACL_STOP_ON_FAILURE) s->halted = true;
    s->pending--;
    pthread_cond_broadcast(&s->idle); /* for synchronize (pending 0), and abort or stop (running over) */
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static aclError stream_new(const char *call, uint64_t ctx, int32_t device, uint32_t flags, uint32_t priority,
                           stream **out) {
  stream *s = calloc(1, sizeof *s);
  if (!s) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->idle, NULL);
  aipc__handle_init(&s->h);
  atomic_init(&s->cancel, false);
  s->device = device;
  s->ctx = ctx;
  s->flags = flags;
  s->priority = priority;
  s->id = atomic_fetch_add(&g_next_id, 1);
  s->mode = ACL_CONTINUE_ON_FAILURE;
  int e = aipc__os_thread_start(&s->thread, worker, s);
  if (e != 0) {
    put(s);
    return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: cannot start the stream's worker thread: %s", call, strerror(e));
  }
  /* The worker is asleep before the stream is handed out: a fork right after
   * (multiprocessing's default on Linux) copies no lock a starting thread
   * holds, such as a sanitizer allocator's. */
  pthread_mutex_lock(&s->mu);
  while (!s->started) pthread_cond_wait(&s->idle, &s->mu);
  pthread_mutex_unlock(&s->mu);
  *out = s;
  return ACL_SUCCESS;
}

/* Waits for s's queued work (force: only for the task already running,
 * which is told to give up if it waits; the rest is dropped), stops and
 * joins its worker, drops one reference. */
static void stream_shutdown(stream *s, bool force) {
  pthread_mutex_lock(&s->mu);
  if (force) {
    s->interrupt = INT_FORCE;
    atomic_store(&s->cancel, true);
    for (aipc__task *t = s->head; t; t = t->next) s->pending--;
    free_tasks(s, ACL_ERROR_RT_STREAM_ABORT);
    if (s->pending == 0) pthread_cond_broadcast(&s->idle); /* for a synchronize in another thread */
  }
  while (s->pending > 0) pthread_cond_wait(&s->idle, &s->mu);
  s->stop = true;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  put(s);
}

/* The registry's reference, dropped: by a failed create and aclFinalize. */
static void release(aipc__handle *h) {
  /* The queued work runs, but a wait gives up at once: nothing may satisfy
   * it any more (aclFinalize never hangs on a value, event or notify wait). */
  stream *s = (stream *)h;
  pthread_mutex_lock(&s->mu);
  s->interrupt = INT_FORCE;
  atomic_store(&s->cancel, true);
  pthread_mutex_unlock(&s->mu);
  stream_shutdown(s, false);
}

/* A referenced stream for handle h (NULL: the default stream). */
static aclError get(const char *call, aclrtStream h, stream **out) {
  if (h) {
    aipc__handle *o;
    aclError rc = aipc__handles_get(&g_streams, call, "stream", h, &o);
    if (rc == ACL_SUCCESS) *out = (stream *)o;
    return rc;
  }
  uint64_t ctx;
  int32_t device;
  aclError rc = aipc__ctx_current(call, &ctx, &device);
  if (rc) return rc;
  bool made = false;
  pthread_mutex_lock(&g_defaults_mu);
  stream *s = aipc__hmap_get(&g_defaults, ctx_key(ctx));
  if (!s) {
    if ((rc = stream_new(call, ctx, device, 0, 0, &s)) == ACL_SUCCESS) {
      s->is_default = true;
      aipc__handle_ref(&s->h); /* the caller's; the registry takes the first */
      if ((rc = aipc__handles_add(&g_streams, call, &s->h)) == ACL_SUCCESS) {
        if ((rc = ctx_still_live(call, ctx)) == ACL_SUCCESS && aipc__hmap_put(&g_defaults, ctx_key(ctx), s) != 0)
          rc = aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
        aipc__handle *o;
        if (rc && aipc__handles_remove(&g_streams, call, s, &o) == ACL_SUCCESS) stream_shutdown(s, false);
      }
      if (rc) {
        put(s);
        s = NULL;
      }
      made = rc == ACL_SUCCESS;
    }
  } else {
    aipc__handle_ref(&s->h);
  }
  pthread_mutex_unlock(&g_defaults_mu);
  if (rc) return rc;
  if (made) aipc__stream_state_notify(s, ACL_RT_STREAM_STATE_CREATE_POST);
  *out = s;
  return ACL_SUCCESS;
}

/* mode: SUBMIT_PLAIN (a kind that cannot be recorded), SUBMIT_RECORDABLE
 * (clone given) or SUBMIT_RECORD_ONLY (a recorder's own marker). */
enum { SUBMIT_PLAIN, SUBMIT_RECORDABLE, SUBMIT_RECORD_ONLY };

static aclError submit(const char *call, aclrtStream h, aipc__task *t, int mode, aipc__task_clone clone,
                       uint32_t *id) {
  stream *s = NULL;
  aclError rc = get(call, h, &s);
  if (rc) {
    t->free(t);
    return rc;
  }
  t->next = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->stop) {
    pthread_mutex_unlock(&s->mu);
    t->free(t);
    put(s);
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream %p is being destroyed", call, h);
  }
  if (s->rec || mode == SUBMIT_RECORD_ONLY) { /* recorded, not run (model.c decides) */
    if (s->rec)
      rc = s->rec->record(s->rec, call, t, mode == SUBMIT_PLAIN ? NULL : clone);
    else {
      t->free(t);
      rc = aipc__fail(ACL_ERROR_RT_STREAM_MODEL,
                      "%s: stream %p is not bound to a model runtime instance being built (aclmdlRIBindStream)", call,
                      h);
    }
    pthread_mutex_unlock(&s->mu);
    put(s);
    return rc;
  }
  if (s->flags & HOST_REFUSED_FLAGS) {
    uint32_t f = s->flags;
    pthread_mutex_unlock(&s->mu);
    t->free(t);
    put(s);
    if (f & ACL_STREAM_PERSISTENT)
      return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                        "%s: stream %p was created with ACL_STREAM_PERSISTENT, whose tasks run only in a model: bind "
                        "it to one being built (aclmdlRIBindStream) first",
                        call, h);
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: stream %p was created with ACL_STREAM_%s: only the device queues work on it", call, h,
                      (f & ACL_STREAM_DEVICE_USE_ONLY) ? "DEVICE_USE_ONLY" : "CPU_SCHEDULE");
  }
  if (s->halted) {
    /* Stopped on failure: the work is accepted and never runs, as a device
     * discards the tasks that reach a stopped stream (CANN's callback sample
     * launches after the fault and expects success). Its drop hook ends its
     * waiters with the failure; every synchronize reports it. */
    aclError err = s->err;
    pthread_mutex_unlock(&s->mu);
    drop_task(t, err);
    put(s);
    return ACL_SUCCESS;
  }
  uint32_t tid = ++s->task_seq;
  if (id) *id = tid;
  if (h) { /* CANN counts the tasks of streams the user created */
    tl_last_task = tid;
    tl_has_last = true;
  }
  if (s->tail)
    s->tail->next = t;
  else
    s->head = t;
  s->tail = t;
  s->pending++;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  put(s);
  return ACL_SUCCESS;
}

aclError aipc__stream_submit_id(const char *call, aclrtStream h, aipc__task *t, uint32_t *id) {
  return submit(call, h, t, SUBMIT_PLAIN, NULL, id);
}

aclError aipc__stream_submit(const char *call, aclrtStream h, aipc__task *t) {
  return submit(call, h, t, SUBMIT_PLAIN, NULL, NULL);
}

aclError aipc__stream_submit_recordable(const char *call, aclrtStream h, aipc__task *t, aipc__task_clone clone) {
  return submit(call, h, t, SUBMIT_RECORDABLE, clone, NULL);
}

aclError aipc__stream_submit_record_only(const char *call, aclrtStream h, aipc__task *t) {
  return submit(call, h, t, SUBMIT_RECORD_ONLY, NULL, NULL);
}

aclError aipc__stream_swap_recorder(const char *call, aclrtStream h, aipc__recorder *expect, aipc__recorder *rec,
                                    bool *swapped) {
  if (!h) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL (the default stream)", call);
  stream *s = NULL;
  aclError rc = get(call, h, &s);
  if (rc) return rc;
  pthread_mutex_lock(&s->mu);
  *swapped = s->rec == expect;
  if (*swapped) s->rec = rec;
  pthread_mutex_unlock(&s->mu);
  put(s);
  return ACL_SUCCESS;
}

bool aipc__stream_recording(aclrtStream h) {
  if (!h) return false;
  aipc__handle *o;
  if (aipc__handles_get(&g_streams, "", "stream", h, &o) != ACL_SUCCESS) return false;
  stream *s = (stream *)o;
  pthread_mutex_lock(&s->mu);
  bool r = s->rec != NULL;
  pthread_mutex_unlock(&s->mu);
  put(s);
  return r;
}

aclError aipc__stream_device(const char *call, aclrtStream h, int32_t *device) {
  if (!h) {
    *device = aipc__device_current();
    return ACL_SUCCESS;
  }
  stream *s = NULL;
  aclError rc = get(call, h, &s);
  if (rc) return rc;
  *device = s->device;
  put(s);
  return ACL_SUCCESS;
}

aclError aipc__stream_id(const char *call, aclrtStream h, uint32_t *id) {
  stream *s = NULL;
  aclError rc = get(call, h, &s);
  if (rc) return rc;
  *id = s->id;
  put(s);
  return ACL_SUCCESS;
}

bool aipc__stream_last_task(uint32_t *id) {
  *id = tl_last_task;
  return tl_has_last;
}

aipc__stream_mark aipc__stream_enter(uint32_t stream_id) {
  aipc__stream_mark prev = tl_running;
  tl_running = (aipc__stream_mark){true, stream_id};
  return prev;
}

void aipc__stream_leave(aipc__stream_mark prev) { tl_running = prev; }

bool aipc__stream_in_task(void) { return tl_running.in; }

/* A wait for s from the thread doing s's work would never end. */
static aclError check_not_self(const char *call, const stream *s) {
  if (s && tl_running.in && tl_running.id == s->id)
    return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR,
                      "%s: called from a callback or task of this stream, it would wait for itself (CANN: a "
                      "callback must not synchronize or destroy its own stream)",
                      call);
  return ACL_SUCCESS;
}


static aclError create(const char *call, aclrtStream *stream_out, uint32_t flags, uint32_t priority) {
  if (!stream_out) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL", call);
  uint64_t ctx;
  int32_t device;
  aclError rc = aipc__ctx_current(call, &ctx, &device); /* streams are created in the current context */
  if (rc) return rc;
  stream *s = NULL;
  if ((rc = stream_new(call, ctx, device, flags, priority, &s))) return rc;
  if ((rc = aipc__handles_add(&g_streams, call, &s->h))) return rc;
  if ((rc = ctx_still_live(call, ctx))) { /* a racing aclrtDestroyContext */
    aipc__handle *o;
    if (aipc__handles_remove(&g_streams, call, s, &o) == ACL_SUCCESS) stream_shutdown(s, false);
    return rc;
  }
  *stream_out = s;
  aipc__stream_state_notify(s, ACL_RT_STREAM_STATE_CREATE_POST);
  return ACL_SUCCESS;
}

aclError aipc__emu_create_stream(aclrtStream *stream_out) {
  return create(AIPC_CALL_NAME(create_stream), stream_out, 0, 0);
}

aclError aipc__emu_create_stream_with_config(aclrtStream *stream_out, uint32_t priority, uint32_t flag) {
  /* CANN: priority is reserved (kept and reported back); flag bits it does
   * not define make an ordinary stream. */
  return create(AIPC_CALL_NAME(create_stream_with_config), stream_out, flag, priority);
}

aclError aipc__emu_create_stream_v2(aclrtStream *stream_out, const aclrtStreamConfigHandle *handle) {
  const char *call = AIPC_CALL_NAME(create_stream_v2);
  if (!handle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", call);
  return create(call, stream_out, (uint32_t)handle->flag, handle->priority);
}

static aclError destroy(const char *call, aclrtStream h, bool force) {
  if (!h) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: the default stream (NULL) cannot be destroyed", call);
  stream *s = NULL;
  aclError rc = get(call, h, &s);
  if (rc) return rc;
  bool is_default = s->is_default;
  rc = check_not_self(call, s);
  put(s);
  if (rc) return rc;
  if (is_default)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream %p is a context's default stream, which cannot be destroyed",
                      call, h);
  aipc__stream_state_notify(h, ACL_RT_STREAM_STATE_DESTROY_PRE); /* the callbacks see a stream still usable */
  aipc__handle *o;
  rc = aipc__handles_remove(&g_streams, call, h, &o);
  if (rc) return rc;
  stream_shutdown((stream *)o, force);
  return ACL_SUCCESS;
}

aclError aipc__emu_destroy_stream(aclrtStream h) { return destroy(AIPC_CALL_NAME(destroy_stream), h, false); }

aclError aipc__emu_destroy_stream_force(aclrtStream h) {
  return destroy(AIPC_CALL_NAME(destroy_stream_force), h, true);
}

/* Waits until s is idle, or until timeout_ms (< 0: no limit) passes. */
static bool wait_idle(stream *s, int64_t timeout_ms) {
  if (timeout_ms < 0) {
    while (s->pending > 0) pthread_cond_wait(&s->idle, &s->mu);
    return true;
  }
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += (timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  while (s->pending > 0)
    if (pthread_cond_timedwait(&s->idle, &s->mu, &until) != 0 && s->pending > 0) return false;
  return true;
}

static aclError synchronize(const char *call, aclrtStream h, int64_t timeout_ms) {
  stream *s = NULL;
  aclError rc = get(call, h, &s);
  if (rc) return rc;
  if ((rc = check_not_self(call, s))) {
    put(s);
    return rc;
  }
  char msg[sizeof s->msg];
  pthread_mutex_lock(&s->mu);
  if (s->flags & HOST_REFUSED_FLAGS) { /* CANN: returns at once for these streams */
    pthread_mutex_unlock(&s->mu);
    put(s);
    return ACL_SUCCESS;
  }
  uint64_t aborts = s->aborts;
  if (!wait_idle(s, timeout_ms)) {
    pthread_mutex_unlock(&s->mu);
    put(s);
    return aipc__fail(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, "%s: the stream's work did not finish within %lld ms", call,
                      (long long)timeout_ms);
  }
  if (s->aborts != aborts) {
    pthread_mutex_unlock(&s->mu);
    put(s);
    return aipc__fail(ACL_ERROR_RT_STREAM_ABORT, "%s: the stream was aborted (aclrtStreamAbort) while waiting", call);
  }
  rc = s->err;
  memcpy(msg, s->msg, sizeof msg);
  if (!s->halted) s->err = ACL_SUCCESS; /* stopped on failure: it stays */
  pthread_mutex_unlock(&s->mu);
  put(s);
  if (rc) return aipc__fail(rc, "%s: queued work failed: %s", call, msg);
  return ACL_SUCCESS;
}

aclError aipc__emu_synchronize_stream(aclrtStream h) { return synchronize(AIPC_CALL_NAME(synchronize_stream), h, -1); }

aclError aipc__emu_synchronize_stream_with_timeout(aclrtStream h, int32_t timeout) {
  const char *call = AIPC_CALL_NAME(synchronize_stream_with_timeout);
  if (timeout < -1)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: timeout %d ms is invalid (-1: wait without limit, or >= 0)", call,
                      (int)timeout);
  return synchronize(call, h, timeout == 0 ? -1 : timeout);
}

/* ---- configuration, state, abort and stop --------------------------------- */

aclError aipc__emu_set_stream_failure_mode(aclrtStream h, uint64_t mode) {
  const char *call = AIPC_CALL_NAME(set_stream_failure_mode);
  if (mode != ACL_CONTINUE_ON_FAILURE && mode != ACL_STOP_ON_FAILURE)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: mode %llu is neither ACL_CONTINUE_ON_FAILURE (0) nor ACL_STOP_ON_FAILURE (1)", call,
                      (unsigned long long)mode);
  stream *s = NULL;
  aclError rc = get(call, h, &s);
  if (rc) return rc;
  pthread_mutex_lock(&s->mu);
  if (s->mode_set && s->mode != mode)
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: the stream's failure mode was already set (to %s); CANN sets it once per stream", call,
                    s->mode == ACL_STOP_ON_FAILURE ? "ACL_STOP_ON_FAILURE" : "ACL_CONTINUE_ON_FAILURE");
  else {
    s->mode = mode;
    s->mode_set = true;
  }
  pthread_mutex_unlock(&s->mu);
  put(s);
  return rc;
}

aclError aipc__emu_stream_query(aclrtStream h, aclrtStreamStatus *status) {
  const char *call = AIPC_CALL_NAME(stream_query);
  if (!status) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: status is NULL", call);
  stream *s = NULL;
  aclError rc = get(call, h, &s);
  if (rc) return rc;
  pthread_mutex_lock(&s->mu);
  *status = s->pending == 0 ? ACL_STREAM_STATUS_COMPLETE : ACL_STREAM_STATUS_NOT_READY;
  pthread_mutex_unlock(&s->mu);
  put(s);
  return ACL_SUCCESS;
}

/* Reads one field of stream h (NULL: the default stream) for a getter. */
static aclError read_field(const char *call, aclrtStream h, const void *out, const char *what, stream **s) {
  if (!out) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s is NULL", call, what);
  return get(call, h, s);
}

aclError aipc__emu_stream_get_flags(aclrtStream h, uint32_t *flags) {
  stream *s = NULL;
  aclError rc = read_field(AIPC_CALL_NAME(stream_get_flags), h, flags, "flags", &s);
  if (rc) return rc;
  *flags = s->flags;
  put(s);
  return ACL_SUCCESS;
}

aclError aipc__emu_stream_get_id(aclrtStream h, int32_t *streamId) {
  stream *s = NULL;
  aclError rc = read_field(AIPC_CALL_NAME(stream_get_id), h, streamId, "streamId", &s);
  if (rc) return rc;
  *streamId = s->id;
  put(s);
  return ACL_SUCCESS;
}

aclError aipc__emu_stream_get_priority(aclrtStream h, uint32_t *priority) {
  stream *s = NULL;
  aclError rc = read_field(AIPC_CALL_NAME(stream_get_priority), h, priority, "priority", &s);
  if (rc) return rc;
  *priority = s->priority;
  put(s);
  return ACL_SUCCESS;
}

/* Tells the running task of s to give up (why: INT_ABORT or INT_STOP) and
 * waits until it has returned. mu held. */
static void interrupt_running(stream *s, int why) {
  if (!s->running || s->interrupt == INT_FORCE) return;
  s->interrupt = why;
  atomic_store(&s->cancel, true);
  while (s->running) pthread_cond_wait(&s->idle, &s->mu);
}

aclError aipc__emu_stream_abort(aclrtStream h) {
  const char *call = AIPC_CALL_NAME(stream_abort);
  stream *s = NULL;
  aclError rc = get(call, h, &s);
  if (rc) return rc;
  pthread_mutex_lock(&s->mu);
  s->aborts++;
  aipc__task *dropped = s->head; /* dropped outside the lock: a record's event may reach the IPC layer */
  for (aipc__task *t = s->head; t; t = t->next) s->pending--;
  s->head = s->tail = NULL;
  interrupt_running(s, INT_ABORT);
  s->err = ACL_SUCCESS; /* what ran before the abort is discarded with it */
  s->msg[0] = '\0';
  s->halted = false;
  if (s->pending == 0) pthread_cond_broadcast(&s->idle);
  pthread_mutex_unlock(&s->mu);
  for (aipc__task *t = dropped, *next; t; t = next) {
    next = t->next;
    drop_task(t, ACL_ERROR_RT_STREAM_ABORT);
  }
  put(s);
  return ACL_SUCCESS;
}

aclError aipc__emu_stream_stop(aclrtStream h) {
  const char *call = AIPC_CALL_NAME(stream_stop);
  if (!h) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: the default stream (NULL) cannot be stopped", call);
  stream *s = NULL;
  aclError rc = get(call, h, &s);
  if (rc) return rc;
  pthread_mutex_lock(&s->mu);
  interrupt_running(s, INT_STOP);
  pthread_mutex_unlock(&s->mu);
  put(s);
  return ACL_SUCCESS;
}

/* Config handles are plain host records, CANN's struct: the caller owns the
 * pointer; V2 reads flag and priority from it. */
aclrtStreamConfigHandle *aipc__emu_create_stream_config_handle(void) {
  aclrtStreamConfigHandle *c = calloc(1, sizeof *c);
  if (!c) aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", AIPC_CALL_NAME(create_stream_config_handle));
  return c;
}

aclError aipc__emu_destroy_stream_config_handle(aclrtStreamConfigHandle *handle) {
  if (!handle)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", AIPC_CALL_NAME(destroy_stream_config_handle));
  free(handle);
  return ACL_SUCCESS;
}

aclError aipc__emu_set_stream_config_opt(aclrtStreamConfigHandle *handle, aclrtStreamConfigAttr attr,
                                         const void *attrValue, size_t valueSize) {
  const char *call = AIPC_CALL_NAME(set_stream_config_opt);
  if (!handle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", call);
  if (!attrValue) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: attrValue is NULL", call);
  size_t want;
  switch (attr) {
    case ACL_RT_STREAM_WORK_ADDR_PTR: want = sizeof(void *); break;
    case ACL_RT_STREAM_WORK_SIZE: want = sizeof(size_t); break;
    case ACL_RT_STREAM_FLAG:
    case ACL_RT_STREAM_PRIORITY: want = sizeof(uint32_t); break;
    default:
      return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: attr %d is not an aclrtStreamConfigAttr (0..3)", call, (int)attr);
  }
  if (valueSize != want)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: valueSize %zu for attr %d; it takes %zu bytes", call, valueSize,
                      (int)attr, want);
  uint32_t u32;
  switch (attr) {
    case ACL_RT_STREAM_WORK_ADDR_PTR: memcpy(&handle->workptr, attrValue, want); break;
    case ACL_RT_STREAM_WORK_SIZE: memcpy(&handle->workSize, attrValue, want); break;
    case ACL_RT_STREAM_FLAG:
      memcpy(&u32, attrValue, want);
      handle->flag = u32;
      break;
    default: memcpy(&handle->priority, attrValue, want); break;
  }
  return ACL_SUCCESS;
}

/* ---- copies and memsets ---------------------------------------------- */

typedef struct copy_task {
  aipc__task t;
  void *dst;
  const void *src;
  size_t destMax, count;
  aclrtMemcpyKind kind;
  int32_t cur_dev;
} copy_task;

static void free_plain(aipc__task *t) { free(t); }

/* Copies and memsets replay as they were queued: the same bytes, checked
 * again when they run. */
static aclError clone_plain(const aipc__task *t, size_t size, const char *call, aipc__task **out) {
  aipc__task *c = malloc(size);
  if (!c) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  memcpy(c, t, size);
  c->next = NULL;
  *out = c;
  return ACL_SUCCESS;
}

static aclError clone_copy(const aipc__task *t, const char *call, aipc__task **out) {
  return clone_plain(t, sizeof(copy_task), call, out);
}

static aclError run_copy(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)cancel;
  (void)failed; /* runs after a failure too: see the top of this file */
  copy_task *c = (copy_task *)t;
  return aipc__mem_copy("aclrtMemcpyAsync (running on the stream)", c->dst, c->destMax, c->src, c->count, c->kind,
                        c->cur_dev, true);
}

aclError aipc__emu_memcpy_async(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,
                                aclrtStream h) {
  const char *call = AIPC_CALL_NAME(memcpy_async);
  if (!dst) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: dst is NULL", call);
  if (!src) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: src is NULL", call);
  if ((unsigned)kind > ACL_MEMCPY_INTER_DEVICE_TO_DEVICE)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: kind %d is not an aclrtMemcpyKind (0..7)", call, (int)kind);
  if (count > destMax)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: count %zu is larger than destMax %zu", call, count, destMax);
  int32_t dev;
  aclError rc = aipc__stream_device(call, h, &dev); /* a bad handle is an error even for 0 bytes */
  if (rc || count == 0) return rc;
  int32_t cur = aipc__device_current();
  rc = aipc__mem_copy_check(call, dst, destMax, src, count, kind, cur, true);
  if (rc) return rc;
  copy_task *c = malloc(sizeof *c);
  if (!c) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  *c = (copy_task){{NULL, run_copy, free_plain, NULL}, dst, src, destMax, count, kind, cur};
  return aipc__stream_submit_recordable(call, h, &c->t, clone_copy);
}

typedef struct memset_task {
  aipc__task t;
  void *dst;
  size_t count;
  int value;
} memset_task;

static aclError clone_memset(const aipc__task *t, const char *call, aipc__task **out) {
  return clone_plain(t, sizeof(memset_task), call, out);
}

static aclError run_memset(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)cancel;
  (void)failed;
  memset_task *m = (memset_task *)t;
  return aipc__mem_memset("aclrtMemsetAsync (running on the stream)", m->dst, m->value, m->count);
}

aclError aipc__emu_memset_async(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream h) {
  const char *call = AIPC_CALL_NAME(memset_async);
  if (count == 0) return ACL_SUCCESS; /* CANN's acl layer: before any other check, the stream's too */
  if (!devPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: devPtr is NULL", call);
  if (count > maxCount)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: count %zu is larger than maxCount %zu", call, count, maxCount);
  int32_t dev;
  aclError rc = aipc__stream_device(call, h, &dev);
  if (rc || count == 0) return rc;
  rc = aipc__mem_memset_check(call, devPtr, count);
  if (rc) return rc;
  memset_task *m = malloc(sizeof *m);
  if (!m) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  *m = (memset_task){{NULL, run_memset, free_plain, NULL}, devPtr, count, (int)(value & 0xff)};
  return aipc__stream_submit_recordable(call, h, &m->t, clone_memset);
}

/* ---- teardown and fork ------------------------------------------------ */

void aipc__stream_finalize(void) {
  pthread_mutex_lock(&g_defaults_mu);
  aipc__hmap_clear(&g_defaults);
  pthread_mutex_unlock(&g_defaults_mu);
  aipc__handles_finalize(&g_streams);
}

/* The streams that match, referenced, in a malloc'ed array (*n of them):
 * take_if's match runs under the registry lock and takes nothing. */
typedef struct collect {
  bool (*match)(stream *s, const void *arg);
  const void *arg;
  stream **v;
  size_t n, cap;
  bool oom;
} collect;

static bool collect_one(aipc__handle *h, void *arg) {
  collect *c = arg;
  stream *s = (stream *)h;
  if (!c->match(s, c->arg)) return false;
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 16;
    stream **v = realloc(c->v, cap * sizeof *v);
    if (!v) {
      c->oom = true;
      return false;
    }
    c->v = v;
    c->cap = cap;
  }
  aipc__handle_ref(&s->h);
  c->v[c->n++] = s;
  return false;
}

static void collect_streams(collect *c) { (void)aipc__handles_take_if(&g_streams, collect_one, c); }

static void collect_put(collect *c) {
  for (size_t i = 0; i < c->n; i++) put(c->v[i]);
  free(c->v);
}

static void wait_drained(stream *s) {
  pthread_mutex_lock(&s->mu);
  while (s->pending > 0) pthread_cond_wait(&s->idle, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static bool default_on(stream *s, const void *device) { return s->is_default && s->device == *(const int32_t *)device; }

static bool on_device(aipc__handle *h, void *device) {
  stream *s = (stream *)h;
  return !s->is_default && s->device == *(int32_t *)device;
}

void aipc__stream_reset_device(int32_t device) {
  /* The default streams' work is waited for, as CANN documents; their errors
   * stay for aclrtSynchronizeStream. */
  collect c = {default_on, &device, NULL, 0, 0, false};
  collect_streams(&c);
  for (size_t i = 0; i < c.n; i++) wait_drained(c.v[i]);
  collect_put(&c);
  for (aipc__handle *h; (h = aipc__handles_take_if(&g_streams, on_device, &device));)
    stream_shutdown((stream *)h, true);
}

static bool in_ctx(aipc__handle *h, void *ctx) { return ((stream *)h)->ctx == *(uint64_t *)ctx; }

void aipc__stream_destroy_context(uint64_t id) {
  pthread_mutex_lock(&g_defaults_mu);
  (void)aipc__hmap_remove(&g_defaults, ctx_key(id));
  pthread_mutex_unlock(&g_defaults_mu);
  for (aipc__handle *h; (h = aipc__handles_take_if(&g_streams, in_ctx, &id));) stream_shutdown((stream *)h, false);
}

aclError aipc__stream_default_handle(const char *call, aclrtStream *out) {
  stream *s = NULL;
  aclError rc = get(call, NULL, &s);
  if (rc) return rc;
  *out = s;
  put(s);
  return ACL_SUCCESS;
}

static bool on_dev(stream *s, const void *device) { return s->device == *(const int32_t *)device; }

aclError aipc__stream_synchronize_device(const char *call, int32_t device) {
  collect c = {on_dev, &device, NULL, 0, 0, false};
  collect_streams(&c);
  if (c.oom) {
    collect_put(&c);
    return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  }
  aclError rc = ACL_SUCCESS;
  char msg[sizeof c.v[0]->msg] = "";
  for (size_t i = 0; i < c.n; i++) {
    stream *s = c.v[i];
    pthread_mutex_lock(&s->mu);
    while (s->pending > 0) pthread_cond_wait(&s->idle, &s->mu);
    if (s->err && rc == ACL_SUCCESS) {
      rc = s->err;
      memcpy(msg, s->msg, sizeof msg);
    }
    pthread_mutex_unlock(&s->mu);
  }
  collect_put(&c);
  if (rc) return aipc__fail(rc, "%s: queued work on device %d failed: %s", call, (int)device, msg);
  return ACL_SUCCESS;
}

aclError aipc__stream_overflow_switch(const char *call, aclrtStream h, const uint32_t *set, uint32_t *get_out) {
  stream *s = NULL;
  aclError rc = get(call, h, &s);
  if (rc) return rc;
  uint64_t ctx;
  int32_t device;
  if ((rc = aipc__ctx_current(call, &ctx, &device)) == ACL_SUCCESS && s->ctx != ctx)
    rc = aipc__fail(ACL_ERROR_RT_STREAM_CONTEXT, "%s: stream %p belongs to another context than the current one", call,
                    h);
  if (rc) {
    put(s);
    return rc;
  }
  if (set) atomic_store(&s->overflow_switch, *set);
  if (get_out) *get_out = atomic_load(&s->overflow_switch);
  put(s);
  return ACL_SUCCESS;
}

/* Fork: hold the registry and every stream's queue still, so the child
 * copies consistent lists it can free. */
static void fork_hold(aipc__handle *h, bool hold) {
  stream *s = (stream *)h;
  hold ? pthread_mutex_lock(&s->mu) : pthread_mutex_unlock(&s->mu);
}

/* Fork child: the workers do not exist here: free what the parent's streams
 * left in memory without joining them or touching their (held) locks. */
static void forget(aipc__handle *h) {
  forget_tasks((stream *)h);
  free(h);
}

void aipc__stream_atfork_prepare(void) {
  pthread_mutex_lock(&g_defaults_mu);
  aipc__handles_atfork_prepare(&g_streams);
}

void aipc__stream_atfork_parent(void) {
  aipc__handles_atfork_parent(&g_streams);
  pthread_mutex_unlock(&g_defaults_mu);
}

void aipc__stream_atfork_child(void) {
  aipc__handles_atfork_child(&g_streams); /* forgets the default streams too */
  aipc__hmap_clear(&g_defaults);
  pthread_mutex_init(&g_defaults_mu, NULL);
}
