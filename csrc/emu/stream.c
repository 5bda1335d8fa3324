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
 * Handles are checked against a registry of live streams, so a stale or
 * made-up handle is an error, not a crash. Callers hold a reference while
 * they use a stream; the last reference frees it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/hashmap.h"
#include "os/os.h"
#include "emu_internal.h"

typedef struct stream {
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
  atomic_int refs;
  int32_t device; /* current device of the thread that created it */
} stream;

static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static aipc__hmap g_reg = AIPC__HMAP_INIT; /* handle -> stream */
static stream *g_default;                  /* the NULL stream, created lazily */

static aipc__hkey handle_key(const void *s) { return (aipc__hkey){(uint64_t)(uintptr_t)s, 0}; }

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
  if (atomic_fetch_sub(&s->refs, 1) != 1) return;
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
  atomic_init(&s->refs, 1);
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

/* A referenced stream for handle h (NULL: the default stream). */
static aclError get(const char *call, aclrtStream h, stream **out) {
  aclError rc = ACL_SUCCESS;
  pthread_mutex_lock(&g_reg_mu);
  stream *s = NULL;
  if (!h) {
    if (!g_default) rc = stream_new(call, &g_default);
    s = g_default;
  } else {
    s = aipc__hmap_get(&g_reg, handle_key(h));
    if (!s)
      rc = aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream %p is not a live stream (never created, or already destroyed)",
                      call, h);
  }
  if (rc == ACL_SUCCESS && s) {
    atomic_fetch_add(&s->refs, 1);
    *out = s;
  }
  pthread_mutex_unlock(&g_reg_mu);
  return rc;
}

aclError aipc__stream_submit(const char *call, aclrtStream h, aipc__task *t) {
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
  if (!stream_out) return aipc__fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateStream: stream is NULL");
  stream *s = NULL;
  aclError rc = stream_new("aclrtCreateStream", &s);
  if (rc) return rc;
  pthread_mutex_lock(&g_reg_mu);
  int e = aipc__hmap_put(&g_reg, handle_key(s), s);
  pthread_mutex_unlock(&g_reg_mu);
  if (e != 0) {
    stream_shutdown(s, false);
    return aipc__fail(ACL_ERROR_BAD_ALLOC, "aclrtCreateStream: out of host memory");
  }
  *stream_out = s;
  return ACL_SUCCESS;
}

static aclError destroy(const char *call, aclrtStream h, bool force) {
  if (!h) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: the default stream (NULL) cannot be destroyed", call);
  pthread_mutex_lock(&g_reg_mu);
  stream *s = aipc__hmap_remove(&g_reg, handle_key(h));
  pthread_mutex_unlock(&g_reg_mu);
  if (!s)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream %p is not a live stream (never created, or already destroyed)",
                      call, h);
  stream_shutdown(s, force);
  return ACL_SUCCESS;
}

aclError aipc__emu_destroy_stream(aclrtStream h) { return destroy("aclrtDestroyStream", h, false); }

aclError aipc__emu_destroy_stream_force(aclrtStream h) { return destroy("aclrtDestroyStreamForce", h, true); }

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

aclError aipc__emu_synchronize_stream(aclrtStream h) { return synchronize("aclrtSynchronizeStream", h, -1); }

aclError aipc__emu_synchronize_stream_with_timeout(aclrtStream h, int32_t timeout) {
  static const char call[] = "aclrtSynchronizeStreamWithTimeout";
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

static aclError run_copy(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)cancel;
  if (failed) return ACL_SUCCESS; /* skipped: see the top of this file */
  copy_task *c = (copy_task *)t;
  return aipc__mem_copy("aclrtMemcpyAsync (running on the stream)", c->dst, c->destMax, c->src, c->count, c->kind,
                        c->cur_dev, true);
}

aclError aipc__emu_memcpy_async(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,
                                aclrtStream h) {
  static const char call[] = "aclrtMemcpyAsync";
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
  return aipc__stream_submit(call, h, &c->t);
}

typedef struct memset_task {
  aipc__task t;
  void *dst;
  size_t count;
  int value;
} memset_task;

static aclError run_memset(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)cancel;
  if (failed) return ACL_SUCCESS;
  memset_task *m = (memset_task *)t;
  return aipc__mem_memset("aclrtMemsetAsync (running on the stream)", m->dst, m->value, m->count);
}

aclError aipc__emu_memset_async(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream h) {
  static const char call[] = "aclrtMemsetAsync";
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
  return aipc__stream_submit(call, h, &m->t);
}

/* ---- teardown and fork ------------------------------------------------ */

void aipc__stream_finalize(void) {
  for (;;) {
    pthread_mutex_lock(&g_reg_mu);
    size_t cur = 0;
    aipc__hkey k;
    stream *s = NULL;
    if (aipc__hmap_next(&g_reg, &cur, &k, (void **)&s)) {
      aipc__hmap_remove(&g_reg, k);
    } else {
      s = g_default;
      g_default = NULL;
      aipc__hmap_clear(&g_reg);
    }
    pthread_mutex_unlock(&g_reg_mu);
    if (!s) break;
    stream_shutdown(s, false);
  }
}

void aipc__stream_reset_device(int32_t device) {
  pthread_mutex_lock(&g_reg_mu);
  stream *d = g_default;
  if (d) atomic_fetch_add(&d->refs, 1);
  pthread_mutex_unlock(&g_reg_mu);
  if (d) { /* its work is waited for, as CANN documents; its errors stay for aclrtSynchronizeStream */
    pthread_mutex_lock(&d->mu);
    while (d->pending > 0) pthread_cond_wait(&d->idle, &d->mu);
    pthread_mutex_unlock(&d->mu);
    put(d);
  }
  for (;;) {
    stream *victim = NULL;
    pthread_mutex_lock(&g_reg_mu);
    size_t cur = 0;
    aipc__hkey k;
    void *v;
    while (aipc__hmap_next(&g_reg, &cur, &k, &v)) {
      if (((stream *)v)->device != device) continue;
      victim = v;
      aipc__hmap_remove(&g_reg, k);
      break;
    }
    pthread_mutex_unlock(&g_reg_mu);
    if (!victim) break;
    stream_shutdown(victim, true);
  }
}

/* Fork: hold the registry and every stream's queue still, so the child
 * copies consistent lists it can free. */
static void lock_all(bool lock) {
  size_t cur = 0;
  void *v;
  while (aipc__hmap_next(&g_reg, &cur, NULL, &v)) {
    stream *s = v;
    lock ? pthread_mutex_lock(&s->mu) : pthread_mutex_unlock(&s->mu);
  }
  if (g_default) lock ? pthread_mutex_lock(&g_default->mu) : pthread_mutex_unlock(&g_default->mu);
}

void aipc__stream_atfork_prepare(void) {
  pthread_mutex_lock(&g_reg_mu);
  lock_all(true);
}

void aipc__stream_atfork_parent(void) {
  lock_all(false);
  pthread_mutex_unlock(&g_reg_mu);
}

void aipc__stream_atfork_child(void) {
  /* The workers do not exist here: free what the parent's streams left in
   * memory without joining them or touching their (held) locks. */
  size_t cur = 0;
  void *v;
  while (aipc__hmap_next(&g_reg, &cur, NULL, &v)) {
    forget_tasks(v);
    free(v);
  }
  aipc__hmap_clear(&g_reg);
  if (g_default) {
    forget_tasks(g_default);
    free(g_default);
    g_default = NULL;
  }
  g_reg_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}
