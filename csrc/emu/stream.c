/*
 * Streams: each has a worker thread and a FIFO of tasks (copies, memsets,
 * event records and waits, notify records and waits). Work is validated
 * when queued (argument errors come back at once) and again when it runs,
 * so memory freed in between is an asynchronous error that
 * aclrtSynchronizeStream reports.
 *
 * After a task fails, the stream skips the copies and memsets queued behind
 * it until aclrtSynchronizeStream has reported the failure, and the events
 * it records complete with the failure: a consumer waiting on them learns
 * that the bytes it was waiting for were never written.
 *
 * Handles are checked against the registry of live streams (handles.c), so
 * a stale or made-up handle is an error, not a crash. Callers hold a
 * reference while they use a stream; the last reference frees it.
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
  atomic_bool cancel; /* DestroyStreamForce / ResetDeviceForce: a blocked wait gives up */
  aclError err;       /* first asynchronous error since the last synchronize */
  char msg[512];
  pthread_t thread;
  int32_t device; /* current device of the thread that created it */
  aipc__recorder *rec; /* under mu: a model capturing or building from this stream takes its tasks */
} stream;
_Static_assert(offsetof(stream, h) == 0, "a stream's address is its registry head's");

static void release(aipc__handle *h);
static void forget(aipc__handle *h);
static void fork_hold(aipc__handle *h, bool hold);
static const aipc__handle_ops g_ops = {"stream", release, forget, fork_hold};
static aipc__handles g_streams = AIPC__HANDLES_INIT(&g_ops);
static stream *g_default; /* the NULL stream, created lazily; under the registry lock */

static void free_tasks(stream *s) {
  for (aipc__task *t = s->head, *next; t; t = next) {
    next = t->next;
    t->free(t);
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
}

static void put(stream *s) {
  if (!aipc__handle_unref(&s->h)) return;
  if (s->rec && s->rec->release) s->rec->release(s->rec); /* destroyed while a model recorded from it */
  free_tasks(s);
  pthread_cond_destroy(&s->work);
  pthread_cond_destroy(&s->idle);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static void *worker(void *arg) {
  stream *s = arg;
  pthread_mutex_lock(&s->mu);
  s->started = true;
  pthread_cond_broadcast(&s->idle);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
    aipc__task *t = s->head;
    if (!t) break;
    s->head = t->next;
    if (!s->head) s->tail = NULL;
    aclError failed = s->err;
    pthread_mutex_unlock(&s->mu);
    aclError rc = t->run(t, failed, &s->cancel);
    const char *m = rc ? aipc__recent_err_msg() : NULL;
    t->free(t);
    pthread_mutex_lock(&s->mu);
    if (rc && s->err == ACL_SUCCESS) {
      s->err = rc;
      snprintf(s->msg, sizeof s->msg, "%s", m ? m : aipc__error_text(rc));
    }
    if (--s->pending == 0) pthread_cond_broadcast(&s->idle);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static aclError stream_new(const char *call, stream **out) {
  stream *s = calloc(1, sizeof *s);
  if (!s) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->idle, NULL);
  aipc__handle_init(&s->h);
  atomic_init(&s->cancel, false);
  s->device = aipc__device_current();
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
    atomic_store(&s->cancel, true);
    for (aipc__task *t = s->head; t; t = t->next) s->pending--;
    free_tasks(s);
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
static void release(aipc__handle *h) { stream_shutdown((stream *)h, false); }

/* A referenced stream for handle h (NULL: the default stream). */
static aclError get(const char *call, aclrtStream h, stream **out) {
  if (h) {
    aipc__handle *o;
    aclError rc = aipc__handles_get(&g_streams, call, "stream", h, &o);
    if (rc == ACL_SUCCESS) *out = (stream *)o;
    return rc;
  }
  aclError rc = ACL_SUCCESS;
  aipc__handles_lock(&g_streams);
  if (!g_default) rc = stream_new(call, &g_default);
  if (rc == ACL_SUCCESS) {
    aipc__handle_ref(&g_default->h);
    *out = g_default;
  }
  aipc__handles_unlock(&g_streams);
  return rc;
}

/* mode: SUBMIT_PLAIN (a kind that cannot be recorded), SUBMIT_RECORDABLE
 * (clone given) or SUBMIT_RECORD_ONLY (a recorder's own marker). */
enum { SUBMIT_PLAIN, SUBMIT_RECORDABLE, SUBMIT_RECORD_ONLY };

static aclError submit(const char *call, aclrtStream h, aipc__task *t, int mode, aipc__task_clone clone) {
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

aclError aipc__stream_submit(const char *call, aclrtStream h, aipc__task *t) {
  return submit(call, h, t, SUBMIT_PLAIN, NULL);
}

aclError aipc__stream_submit_recordable(const char *call, aclrtStream h, aipc__task *t, aipc__task_clone clone) {
  return submit(call, h, t, SUBMIT_RECORDABLE, clone);
}

aclError aipc__stream_submit_record_only(const char *call, aclrtStream h, aipc__task *t) {
  return submit(call, h, t, SUBMIT_RECORD_ONLY, NULL);
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

aclError aipc__emu_create_stream(aclrtStream *stream_out) {
  const char *call = AIPC_CALL_NAME(create_stream);
  if (!stream_out) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL", call);
  stream *s = NULL;
  aclError rc = stream_new(call, &s);
  if (rc) return rc;
  if ((rc = aipc__handles_add(&g_streams, call, &s->h))) return rc;
  *stream_out = s;
  return ACL_SUCCESS;
}

static aclError destroy(const char *call, aclrtStream h, bool force) {
  if (!h) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: the default stream (NULL) cannot be destroyed", call);
  aipc__handle *o;
  aclError rc = aipc__handles_remove(&g_streams, call, h, &o);
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
  char msg[sizeof s->msg];
  pthread_mutex_lock(&s->mu);
  if (!wait_idle(s, timeout_ms)) {
    pthread_mutex_unlock(&s->mu);
    put(s);
    return aipc__fail(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, "%s: the stream's work did not finish within %lld ms", call,
                      (long long)timeout_ms);
  }
  rc = s->err;
  memcpy(msg, s->msg, sizeof msg);
  s->err = ACL_SUCCESS;
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
  if (failed) return ACL_SUCCESS; /* skipped: see the top of this file */
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
  *c = (copy_task){{NULL, run_copy, free_plain}, dst, src, destMax, count, kind, cur};
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
  if (failed) return ACL_SUCCESS;
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
  *m = (memset_task){{NULL, run_memset, free_plain}, devPtr, count, (int)(value & 0xff)};
  return aipc__stream_submit_recordable(call, h, &m->t, clone_memset);
}

/* ---- teardown and fork ------------------------------------------------ */

void aipc__stream_finalize(void) {
  aipc__handles_finalize(&g_streams);
  aipc__handles_lock(&g_streams);
  stream *s = g_default;
  g_default = NULL;
  aipc__handles_unlock(&g_streams);
  if (s) stream_shutdown(s, false);
}

static bool on_device(aipc__handle *h, void *device) { return ((stream *)h)->device == *(int32_t *)device; }

void aipc__stream_reset_device(int32_t device) {
  aipc__handles_lock(&g_streams);
  stream *d = g_default;
  if (d) aipc__handle_ref(&d->h);
  aipc__handles_unlock(&g_streams);
  if (d) { /* its work is waited for, as CANN documents; its errors stay for aclrtSynchronizeStream */
    pthread_mutex_lock(&d->mu);
    while (d->pending > 0) pthread_cond_wait(&d->idle, &d->mu);
    pthread_mutex_unlock(&d->mu);
    put(d);
  }
  for (aipc__handle *h; (h = aipc__handles_take_if(&g_streams, on_device, &device));)
    stream_shutdown((stream *)h, true);
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
  aipc__handles_atfork_prepare(&g_streams);
  if (g_default) fork_hold(&g_default->h, true);
}

void aipc__stream_atfork_parent(void) {
  if (g_default) fork_hold(&g_default->h, false);
  aipc__handles_atfork_parent(&g_streams);
}

void aipc__stream_atfork_child(void) {
  aipc__handles_atfork_child(&g_streams);
  if (g_default) {
    forget(&g_default->h);
    g_default = NULL;
  }
}
