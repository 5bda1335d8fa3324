/*
 * Host work on streams: callbacks (aclrtLaunchCallback, run by the thread
 * that aclrtSubscribeReport bound to the stream, inside its
 * aclrtProcessReport), host functions (aclrtLaunchHostFunc: on the thread
 * bound by aclrtSubscribeHostFunc, inside its aclrtProcessHostFunc, or
 * else on the stream's own worker, a thread of the runtime), and the
 * process's exception callback with the information it reads.
 *
 * A callback is a stream task: when the worker reaches it, it hands an
 * item to the bound thread's queue and, for ACL_CALLBACK_BLOCK and every
 * host function, waits until that thread has run it, so later tasks of the
 * stream run after it returned. The binding is looked up when the task runs,
 * not when it is queued: a stream unsubscribed meanwhile fails the task
 * (ACL_ERROR_RT_STREAM_NO_CB_REG) instead of waiting for ever, and so do
 * items still queued for a thread when their stream is unsubscribed or at
 * aclFinalize. A callback runs with no lock of the runtime held, so it may
 * call the runtime; a synchronize or destroy of its own stream fails (it
 * would wait for itself, see aipc__stream_enter).
 *
 * Thread ids are what CANN's samples pass: the pthread_t value of the thread
 * (std::thread::id printed). A subscription is keyed by the stream's handle
 * and id (aipc__stream_id), so a stream destroyed while subscribed never
 * lends its subscription to a new stream at the same address.
 *
 * State: the subscriptions, the per-thread queues and the exception callback
 * are this file's, under g_mu. g_mu is the outermost lock of the runtime
 * (runtime.c): nothing is called with it held but the pthread calls.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu_internal.h"

#define MAX_THREADS 1024 /* CANN's limit on subscribed threads per process */

typedef enum sub_kind { KIND_REPORT, KIND_HOSTFUNC, KIND_COUNT } sub_kind;

static const char *const kind_subscribe[KIND_COUNT] = {"aclrtSubscribeReport", "aclrtSubscribeHostFunc"};

typedef enum item_state { ITEM_QUEUED, ITEM_RUNNING, ITEM_DONE } item_state;

/* One callback handed to a bound thread. A blocking item lives in its task
 * (the worker waits for ITEM_DONE); a non-blocking one is the queue's, freed
 * by whoever runs or drops it. */
typedef struct item {
  struct item *next;
  void (*fn)(void *);
  void *arg;
  bool block;
  item_state state;
  aclError status; /* set with ITEM_DONE: ACL_SUCCESS, or why it was dropped */
  aclrtStream stream;
  uint32_t stream_id;
} item;

/* A bound thread of one kind and its queue. */
typedef struct thread_q {
  struct thread_q *next;
  sub_kind kind;
  uint64_t tid;
  int32_t device;
  uint32_t streams; /* subscriptions naming it */
  uint32_t waiters; /* threads inside Process* on it: it is freed when both are 0 */
  item *head, *tail;
  pthread_cond_t cv; /* an item arrived, or its subscriptions ended */
} thread_q;

typedef struct sub {
  struct sub *next;
  sub_kind kind;
  aclrtStream stream;
  uint32_t stream_id;
  thread_q *q;
} sub;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_done = PTHREAD_COND_INITIALIZER; /* an item reached ITEM_DONE */
static sub *g_subs;
static thread_q *g_threads;
static uint32_t g_nthreads;
static _Atomic(aclrtExceptionInfoCallback) g_exception_cb;

/* ---- lists, all under g_mu -------------------------------------------- */

static sub *find_sub(sub_kind k, aclrtStream h, uint32_t id) {
  for (sub *s = g_subs; s; s = s->next)
    if (s->kind == k && s->stream == h && s->stream_id == id) return s;
  return NULL;
}

static thread_q *find_q(sub_kind k, uint64_t tid) {
  for (thread_q *q = g_threads; q; q = q->next)
    if (q->kind == k && q->tid == tid) return q;
  return NULL;
}

static void free_q_if_unused(thread_q *q) {
  if (q->streams || q->waiters || q->head) return;
  for (thread_q **p = &g_threads; *p; p = &(*p)->next)
    if (*p == q) {
      *p = q->next;
      break;
    }
  g_nthreads--;
  pthread_cond_destroy(&q->cv);
  free(q);
}

/* Ends an item that will not run: its waiter learns why, or it is freed. */
static void drop_item(item *it, aclError why) {
  if (it->block) {
    it->state = ITEM_DONE;
    it->status = why;
  } else {
    free(it);
  }
}

/* Drops q's queued items of stream (h, id), or all of them (all). */
static void drop_items(thread_q *q, bool all, aclrtStream h, uint32_t id) {
  item **p = &q->head;
  q->tail = NULL;
  while (*p) {
    item *it = *p;
    if (all || (it->stream == h && it->stream_id == id)) {
      *p = it->next;
      drop_item(it, ACL_ERROR_RT_STREAM_NO_CB_REG);
    } else {
      q->tail = it;
      p = &it->next;
    }
  }
  pthread_cond_broadcast(&g_done);
}

/* ---- subscribe, unsubscribe ------------------------------------------- */

static aclError subscribe(sub_kind k, const char *call, uint64_t tid, aclrtStream h) {
  if (k == KIND_HOSTFUNC && !h)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: exeStream is NULL (the default stream cannot be subscribed)", call);
  uint32_t id;
  int32_t device;
  aclError rc = aipc__stream_id(call, h, &id);
  if (rc || (rc = aipc__stream_device(call, h, &device))) return rc;
  sub *s = calloc(1, sizeof *s);
  if (!s) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  pthread_mutex_lock(&g_mu);
  sub *old = find_sub(k, h, id);
  thread_q *q = find_q(k, tid);
  if (old) {
    uint64_t other = old->q->tid;
    pthread_mutex_unlock(&g_mu);
    free(s);
    return aipc__fail(ACL_ERROR_RT_STREAM_SUBSCRIBE,
                      "%s: stream %p is already subscribed to thread %llu; a stream has one thread (unsubscribe "
                      "it first)",
                      call, h, (unsigned long long)other);
  }
  if (q && q->streams > 0 && q->device != device) {
    int32_t d = q->device;
    pthread_mutex_unlock(&g_mu);
    free(s);
    return aipc__fail(ACL_ERROR_RT_THREAD_SUBSCRIBE,
                      "%s: thread %llu already handles streams of device %d; stream %p is on device %d (one "
                      "thread serves one device)",
                      call, (unsigned long long)tid, (int)d, h, (int)device);
  }
  if (!q) {
    if (g_nthreads >= MAX_THREADS) {
      pthread_mutex_unlock(&g_mu);
      free(s);
      return aipc__fail(ACL_ERROR_RT_THREAD_SUBSCRIBE, "%s: %d threads are subscribed already, the most CANN allows",
                        call, MAX_THREADS);
    }
    q = calloc(1, sizeof *q);
    if (!q) {
      pthread_mutex_unlock(&g_mu);
      free(s);
      return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
    }
    q->kind = k;
    q->tid = tid;
    pthread_cond_init(&q->cv, NULL);
    q->next = g_threads;
    g_threads = q;
    g_nthreads++;
  }
  q->device = device;
  q->streams++;
  *s = (sub){g_subs, k, h, id, q};
  g_subs = s;
  pthread_mutex_unlock(&g_mu);
  return ACL_SUCCESS;
}

static aclError unsubscribe(sub_kind k, const char *call, uint64_t tid, aclrtStream h) {
  if (k == KIND_HOSTFUNC && !h) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: exeStream is NULL", call);
  uint32_t id;
  aclError rc = aipc__stream_id(call, h, &id);
  if (rc) return rc;
  pthread_mutex_lock(&g_mu);
  sub *s = find_sub(k, h, id);
  if (!s) {
    pthread_mutex_unlock(&g_mu);
    return aipc__fail(ACL_ERROR_RT_STREAM_SUBSCRIBE, "%s: stream %p is not subscribed (%s)", call, h,
                      kind_subscribe[k]);
  }
  if (s->q->tid != tid) {
    uint64_t other = s->q->tid;
    pthread_mutex_unlock(&g_mu);
    return aipc__fail(ACL_ERROR_RT_THREAD_SUBSCRIBE, "%s: stream %p is subscribed to thread %llu, not %llu", call, h,
                      (unsigned long long)other, (unsigned long long)tid);
  }
  for (sub **p = &g_subs; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  thread_q *q = s->q;
  free(s);
  drop_items(q, false, h, id);
  q->streams--;
  pthread_cond_broadcast(&q->cv); /* a Process* with nothing left to serve returns */
  free_q_if_unused(q);
  pthread_mutex_unlock(&g_mu);
  return ACL_SUCCESS;
}

aclError aipc__emu_subscribe_report(uint64_t threadId, aclrtStream stream) {
  return subscribe(KIND_REPORT, AIPC_CALL_NAME(subscribe_report), threadId, stream);
}
aclError aipc__emu_unsubscribe_report(uint64_t threadId, aclrtStream stream) {
  return unsubscribe(KIND_REPORT, AIPC_CALL_NAME(unsubscribe_report), threadId, stream);
}
aclError aipc__emu_subscribe_host_func(uint64_t hostFuncThreadId, aclrtStream exeStream) {
  return subscribe(KIND_HOSTFUNC, AIPC_CALL_NAME(subscribe_host_func), hostFuncThreadId, exeStream);
}
aclError aipc__emu_unsubscribe_host_func(uint64_t hostFuncThreadId, aclrtStream exeStream) {
  return unsubscribe(KIND_HOSTFUNC, AIPC_CALL_NAME(unsubscribe_host_func), hostFuncThreadId, exeStream);
}

/* ---- processing, on the bound thread ---------------------------------- */

/* The condition variables use the default clock, CLOCK_REALTIME, as
 * stream.c's do. */
static void deadline_after(struct timespec *ts, int32_t ms) {
  clock_gettime(CLOCK_REALTIME, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

static aclError process(sub_kind k, const char *call, int32_t timeout) {
  if (timeout < -1 || timeout == 0)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: timeout %d is invalid (-1: wait without limit, or > 0 ms)", call,
                      (int)timeout);
  uint64_t tid = (uint64_t)pthread_self();
  pthread_mutex_lock(&g_mu);
  thread_q *q = find_q(k, tid);
  if (!q || q->streams == 0) {
    pthread_mutex_unlock(&g_mu);
    return aipc__fail(ACL_ERROR_RT_THREAD_SUBSCRIBE, "%s: this thread (%llu) is not subscribed to any stream (%s)",
                      call, (unsigned long long)tid, kind_subscribe[k]);
  }
  struct timespec until;
  if (timeout > 0) deadline_after(&until, timeout);
  q->waiters++;
  aclError rc = ACL_SUCCESS;
  while (!q->head && q->streams > 0) {
    int e = timeout > 0 ? pthread_cond_timedwait(&q->cv, &g_mu, &until) : pthread_cond_wait(&q->cv, &g_mu);
    if (e == ETIMEDOUT && !q->head) {
      rc = ACL_ERROR_RT_REPORT_TIMEOUT;
      break;
    }
  }
  if (!rc && !q->head) rc = ACL_ERROR_RT_THREAD_SUBSCRIBE; /* its last stream was unsubscribed meanwhile */
  /* Runs what is due, in queue order, with no lock held. */
  while (!rc && q->head) {
    item *it = q->head;
    q->head = it->next;
    if (!q->head) q->tail = NULL;
    it->state = ITEM_RUNNING;
    pthread_mutex_unlock(&g_mu);
    aipc__stream_mark prev = aipc__stream_enter(it->stream_id);
    it->fn(it->arg);
    aipc__stream_leave(prev);
    pthread_mutex_lock(&g_mu);
    if (it->block) {
      it->state = ITEM_DONE;
      it->status = ACL_SUCCESS;
      pthread_cond_broadcast(&g_done);
    } else {
      free(it);
    }
  }
  q->waiters--;
  free_q_if_unused(q);
  pthread_mutex_unlock(&g_mu);
  if (rc == ACL_ERROR_RT_REPORT_TIMEOUT)
    return aipc__fail(rc, "%s: no callback came within %d ms", call, (int)timeout);
  if (rc) return aipc__fail(rc, "%s: this thread's last stream was unsubscribed while it waited", call);
  return ACL_SUCCESS;
}

aclError aipc__emu_process_report(int32_t timeout) {
  return process(KIND_REPORT, AIPC_CALL_NAME(process_report), timeout);
}
aclError aipc__emu_process_host_func(int32_t timeout) {
  return process(KIND_HOSTFUNC, AIPC_CALL_NAME(process_host_func), timeout);
}

/* ---- the tasks --------------------------------------------------------- */

typedef struct cb_task {
  aipc__task t;
  sub_kind kind;
  const char *call;
  aclrtStream stream;
  uint32_t stream_id;
  item it; /* a blocking item lives here */
} cb_task;

static void free_cb(aipc__task *t) { free(t); }

static aclError run_cb(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)failed; /* host work runs after a failure too: it is how a program learns of it */
  cb_task *c = (cb_task *)t;
  pthread_mutex_lock(&g_mu);
  sub *s = find_sub(c->kind, c->stream, c->stream_id);
  if (!s) {
    pthread_mutex_unlock(&g_mu);
    if (c->kind == KIND_HOSTFUNC) { /* no bound thread: this worker, a thread of the runtime, runs it */
      c->it.fn(c->it.arg);
      return ACL_SUCCESS;
    }
    return aipc__fail(ACL_ERROR_RT_STREAM_NO_CB_REG,
                      "%s (running on the stream): the stream was unsubscribed before the callback ran", c->call);
  }
  item *it = &c->it;
  if (!it->block) { /* the queue takes a copy; the task ends now */
    it = malloc(sizeof *it);
    if (!it) {
      pthread_mutex_unlock(&g_mu);
      return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s (running on the stream): out of host memory", c->call);
    }
    *it = c->it;
  }
  thread_q *q = s->q;
  it->next = NULL;
  it->state = ITEM_QUEUED;
  if (q->tail)
    q->tail->next = it;
  else
    q->head = it;
  q->tail = it;
  pthread_cond_broadcast(&q->cv);
  if (!it->block) {
    pthread_mutex_unlock(&g_mu);
    return ACL_SUCCESS;
  }
  while (it->state != ITEM_DONE) {
    if (it->state == ITEM_QUEUED && atomic_load(cancel)) { /* destroyed by force: take it back */
      /* q lives while it holds a queued item (free_q_if_unused) */
      item **p = &q->head;
      q->tail = NULL;
      while (*p) {
        if (*p == it) {
          *p = it->next;
          continue;
        }
        q->tail = *p;
        p = &(*p)->next;
      }
      pthread_mutex_unlock(&g_mu);
      return ACL_SUCCESS;
    }
    struct timespec until;
    deadline_after(&until, AIPC_TASK_POLL_MS);
    pthread_cond_timedwait(&g_done, &g_mu, &until);
  }
  aclError st = it->status;
  pthread_mutex_unlock(&g_mu);
  if (st)
    return aipc__fail(st, "%s (running on the stream): the stream was unsubscribed before its thread ran the callback",
                      c->call);
  return ACL_SUCCESS;
}

static aclError launch(sub_kind k, const char *call, aclrtStream h, void (*fn)(void *), void *arg, bool block) {
  uint32_t id;
  aclError rc = aipc__stream_id(call, h, &id);
  if (rc) return rc;
  if (k == KIND_REPORT) {
    pthread_mutex_lock(&g_mu);
    bool bound = find_sub(k, h, id) != NULL;
    pthread_mutex_unlock(&g_mu);
    if (!bound)
      return aipc__fail(ACL_ERROR_RT_STREAM_NO_CB_REG,
                        "%s: no thread is subscribed to stream %p (call aclrtSubscribeReport first)", call, h);
  }
  cb_task *c = calloc(1, sizeof *c);
  if (!c) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  c->t.run = run_cb;
  c->t.free = free_cb;
  c->kind = k;
  c->call = call;
  c->stream = h;
  c->stream_id = id;
  c->it = (item){NULL, fn, arg, block, ITEM_QUEUED, ACL_SUCCESS, h, id};
  return aipc__stream_submit(call, h, &c->t);
}

aclError aipc__emu_launch_callback(aclrtCallback fn, void *userData, aclrtCallbackBlockType blockType,
                                   aclrtStream stream) {
  const char *call = AIPC_CALL_NAME(launch_callback);
  if (!fn) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: fn is NULL", call);
  if (blockType != ACL_CALLBACK_BLOCK && blockType != ACL_CALLBACK_NO_BLOCK)
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      "%s: blockType %d is not ACL_CALLBACK_NO_BLOCK (0) or ACL_CALLBACK_BLOCK (1)", call,
                      (int)blockType);
  return launch(KIND_REPORT, call, stream, fn, userData, blockType == ACL_CALLBACK_BLOCK);
}

aclError aipc__emu_launch_host_func(aclrtStream stream, aclrtHostFunc fn, void *args) {
  const char *call = AIPC_CALL_NAME(launch_host_func);
  if (!fn) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: fn is NULL", call);
  return launch(KIND_HOSTFUNC, call, stream, fn, args, true);
}

/* ---- exceptions ----------------------------------------------------------- */

struct rtExceptionInfo {
  aipc__exception e;
};

aclError aipc__emu_set_exception_info_callback(aclrtExceptionInfoCallback callback) {
  atomic_store(&g_exception_cb, callback);
  return ACL_SUCCESS;
}

void aipc__exception_report(const aipc__exception *e) {
  aclrtExceptionInfoCallback cb = atomic_load(&g_exception_cb);
  if (!cb) return;
  struct rtExceptionInfo info = {*e};
  cb(&info);
}

#define INFO_GETTER(field, member)                                                                  \
  uint32_t aipc__emu_get_##field##_from_exception_info(const aclrtExceptionInfo *info) {            \
    if (!info) {                                                                                    \
      (void)aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: info is NULL",                                 \
                       AIPC_CALL_NAME(get_##field##_from_exception_info));                          \
      return 0xFFFFFFFFu;                                                                           \
    }                                                                                               \
    return info->e.member;                                                                          \
  }
INFO_GETTER(task_id, task_id)
INFO_GETTER(stream_id, stream_id)
INFO_GETTER(thread_id, thread_id)
INFO_GETTER(device_id, device_id)
INFO_GETTER(error_code, error_code)
#undef INFO_GETTER

aclError aipc__emu_get_args_from_exception_info(const aclrtExceptionInfo *info, void **devArgsPtr,
                                                uint32_t *devArgsLen) {
  const char *call = AIPC_CALL_NAME(get_args_from_exception_info);
  if (!info) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: info is NULL", call);
  if (!devArgsPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: devArgsPtr is NULL", call);
  if (!devArgsLen) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: devArgsLen is NULL", call);
  *devArgsPtr = info->e.args;
  *devArgsLen = info->e.args_len;
  return ACL_SUCCESS;
}

aclError aipc__emu_get_func_handle_from_exception_info(const aclrtExceptionInfo *info, aclrtFuncHandle *func) {
  const char *call = AIPC_CALL_NAME(get_func_handle_from_exception_info);
  if (!info) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: info is NULL", call);
  if (!func) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: func is NULL", call);
  *func = info->e.func;
  return ACL_SUCCESS;
}

aclError aipc__emu_get_thread_last_task_id(uint32_t *taskId) {
  const char *call = AIPC_CALL_NAME(get_thread_last_task_id);
  if (!taskId) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: taskId is NULL", call);
  uint32_t id;
  if (!aipc__stream_last_task(&id))
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: this thread has queued no task on a stream it created", call);
  *taskId = id;
  return ACL_SUCCESS;
}

/* ---- aclFinalize, fork ------------------------------------------------ */

void aipc__callback_finalize(void) {
  pthread_mutex_lock(&g_mu);
  while (g_subs) {
    sub *s = g_subs;
    g_subs = s->next;
    s->q->streams--;
    free(s);
  }
  for (thread_q *q = g_threads, *next; q; q = next) {
    next = q->next;
    drop_items(q, true, NULL, 0);
    pthread_cond_broadcast(&q->cv);
    free_q_if_unused(q); /* else its last waiter frees it */
  }
  atomic_store(&g_exception_cb, NULL);
  pthread_mutex_unlock(&g_mu);
}

void aipc__callback_atfork_prepare(void) { pthread_mutex_lock(&g_mu); }
void aipc__callback_atfork_parent(void) { pthread_mutex_unlock(&g_mu); }

/* The child has none of the bound threads or workers: it forgets them all.
 * Blocking items were in the parent's tasks, which the streams forget. */
void aipc__callback_atfork_child(void) {
  for (sub *s = g_subs, *next; s; s = next) {
    next = s->next;
    free(s);
  }
  for (thread_q *q = g_threads, *next; q; q = next) {
    next = q->next;
    for (item *it = q->head, *n; it; it = n) {
      n = it->next;
      if (!it->block) free(it);
    }
    free(q);
  }
  g_subs = NULL;
  g_threads = NULL;
  g_nthreads = 0;
  pthread_mutex_init(&g_mu, NULL);
  pthread_cond_init(&g_done, NULL);
}
