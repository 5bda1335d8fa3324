/* Callbacks (aclrtLaunchCallback with aclrtSubscribeReport / ProcessReport),
 * host functions (aclrtLaunchHostFunc, subscribed or not), exception info
 * getters and the thread's last task id: where each runs, stream order,
 * every error code, callbacks that call the runtime, threads, fork and
 * aclFinalize with callbacks nobody will run. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ipc_util.h"

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static uint64_t self_id(void) { return (uint64_t)pthread_self(); }

/* A thread that calls aclrtProcessReport (or ProcessHostFunc) until told to stop. */
typedef struct processor {
  pthread_t t;
  atomic_bool stop;
  bool hostfunc;
  atomic_int timeouts;
} processor;

static void *process_loop(void *arg) {
  processor *p = arg;
  while (!atomic_load(&p->stop)) {
    aclError rc = p->hostfunc ? aclrtProcessHostFunc(20) : aclrtProcessReport(20);
    if (rc == ACL_ERROR_RT_REPORT_TIMEOUT) atomic_fetch_add(&p->timeouts, 1);
    else if (rc == ACL_ERROR_RT_THREAD_SUBSCRIBE) sleep_ms(1); /* not subscribed yet, or any more */
  }
  return NULL;
}

static void processor_start(processor *p, bool hostfunc) {
  atomic_init(&p->stop, false);
  atomic_init(&p->timeouts, 0);
  p->hostfunc = hostfunc;
  CHECK_EQ(pthread_create(&p->t, NULL, process_loop, p), 0);
}

static void processor_stop(processor *p) {
  atomic_store(&p->stop, true);
  CHECK_EQ(pthread_join(p->t, NULL), 0);
}

/* What a callback saw. */
typedef struct seen {
  atomic_int calls;
  pthread_t thread;
  atomic_int order[16];
  atomic_int n;
} seen;

static void record_cb(void *arg) {
  seen *s = arg;
  s->thread = pthread_self();
  atomic_fetch_add(&s->calls, 1);
}

/* ---- report callbacks ------------------------------------------------ */

TEST(callback_runs_on_the_subscribed_thread) {
  aclrtStream s = stream_new();
  processor p;
  processor_start(&p, false);
  CHECK_OK(aclrtSubscribeReport((uint64_t)p.t, s));
  seen a = {0};
  for (int i = 0; i < 5; i++) CHECK_OK(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_BLOCK, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(atomic_load(&a.calls), 5);
  CHECK(pthread_equal(a.thread, p.t));
  processor_stop(&p);
  CHECK_OK(aclrtUnSubscribeReport((uint64_t)p.t, s));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclFinalize());
}

TEST(callback_on_the_default_stream) {
  processor p;
  processor_start(&p, false);
  CHECK_OK(aclrtSubscribeReport((uint64_t)p.t, NULL));
  seen a = {0};
  CHECK_OK(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_BLOCK, NULL));
  CHECK_OK(aclrtSynchronizeStream(NULL));
  CHECK_EQ(atomic_load(&a.calls), 1);
  CHECK_OK(aclrtUnSubscribeReport((uint64_t)p.t, NULL));
  processor_stop(&p);
  CHECK_OK(aclFinalize());
}

/* BLOCK: what is queued after the callback runs after it returned. */
static atomic_int g_flag;
static void slow_set_flag(void *arg) {
  (void)arg;
  sleep_ms(100);
  atomic_store(&g_flag, 1);
}
static void read_flag(void *arg) { *(int *)arg = atomic_load(&g_flag); }

TEST(block_holds_back_later_tasks) {
  aclrtStream s = stream_new();
  processor p;
  processor_start(&p, false);
  CHECK_OK(aclrtSubscribeReport((uint64_t)p.t, s));
  atomic_store(&g_flag, 0);
  int after = -1;
  CHECK_OK(aclrtLaunchCallback(slow_set_flag, NULL, ACL_CALLBACK_BLOCK, s));
  CHECK_OK(aclrtLaunchHostFunc(s, read_flag, &after));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(after, 1);
  processor_stop(&p);
  CHECK_OK(aclFinalize());
}

/* NO_BLOCK: a later task runs without waiting for the callback, so the
 * callback can wait for that later task (with BLOCK this would never end). */
static atomic_int g_later_ran;
static void wait_for_later(void *arg) {
  atomic_int *ok = arg; /* read by the test's thread: NO_BLOCK, so no synchronize orders it */
  for (int i = 0; i < 5000 && !atomic_load(&g_later_ran); i++) sleep_ms(1);
  atomic_store(ok, atomic_load(&g_later_ran));
}
static void mark_later(void *arg) {
  (void)arg;
  atomic_store(&g_later_ran, 1);
}

TEST(no_block_lets_later_tasks_run) {
  aclrtStream s = stream_new();
  processor p;
  processor_start(&p, false);
  CHECK_OK(aclrtSubscribeReport((uint64_t)p.t, s));
  atomic_int ok = 0;
  CHECK_OK(aclrtLaunchCallback(wait_for_later, &ok, ACL_CALLBACK_NO_BLOCK, s));
  CHECK_OK(aclrtLaunchHostFunc(s, mark_later, NULL));
  CHECK_OK(aclrtSynchronizeStream(s));
  for (int i = 0; i < 5000 && !atomic_load(&ok); i++) sleep_ms(1);
  CHECK_EQ(atomic_load(&ok), 1);
  processor_stop(&p);
  CHECK_OK(aclFinalize());
}

TEST(callbacks_keep_stream_order) {
  aclrtStream s = stream_new();
  processor p;
  processor_start(&p, false);
  CHECK_OK(aclrtSubscribeReport((uint64_t)p.t, s));
  int *dev = NULL, host = 0;
  CHECK_OK(aclrtMalloc((void **)&dev, 4096, ACL_MEM_MALLOC_HUGE_FIRST));
  int vals[3] = {0};
  for (int i = 0; i < 3; i++) {
    CHECK_OK(aclrtMemsetAsync(dev, 4096, i + 1, 4, s));
    CHECK_OK(aclrtMemcpyAsync(&vals[i], 4, dev, 4, ACL_MEMCPY_DEVICE_TO_HOST, s));
    CHECK_OK(aclrtLaunchCallback(read_flag, &host, ACL_CALLBACK_NO_BLOCK, s));
  }
  CHECK_OK(aclrtSynchronizeStream(s));
  for (int i = 0; i < 3; i++) CHECK_EQ(vals[i], (i + 1) * 0x01010101);
  processor_stop(&p);
  CHECK_OK(aclrtFree(dev));
  CHECK_OK(aclFinalize());
}

TEST(callback_bad_arguments) {
  aclrtStream s = stream_new();
  seen a = {0};
  CHECK_MSG(aclrtLaunchCallback(NULL, &a, ACL_CALLBACK_BLOCK, s), ACL_ERROR_INVALID_PARAM, "fn");
  CHECK_MSG(aclrtLaunchCallback(record_cb, &a, (aclrtCallbackBlockType)2, s), ACL_ERROR_INVALID_PARAM, "blockType");
  CHECK_MSG(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_BLOCK, s), ACL_ERROR_RT_STREAM_NO_CB_REG,
            "aclrtSubscribeReport");
  CHECK_ACL(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_BLOCK, (aclrtStream)&a), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtSubscribeReport(self_id(), (aclrtStream)&a), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtProcessReport(0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtProcessReport(-2), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtProcessReport(10), ACL_ERROR_RT_THREAD_SUBSCRIBE, "not subscribed");
  CHECK_MSG(aclrtUnSubscribeReport(self_id(), s), ACL_ERROR_RT_STREAM_SUBSCRIBE, "not subscribed");
  CHECK_OK(aclrtSubscribeReport(self_id(), s));
  CHECK_MSG(aclrtSubscribeReport(self_id(), s), ACL_ERROR_RT_STREAM_SUBSCRIBE, "already");
  CHECK_MSG(aclrtSubscribeReport(self_id() + 1, s), ACL_ERROR_RT_STREAM_SUBSCRIBE, "already");
  CHECK_MSG(aclrtProcessReport(10), ACL_ERROR_RT_REPORT_TIMEOUT, "10 ms");
  CHECK_MSG(aclrtUnSubscribeReport(self_id() + 1, s), ACL_ERROR_RT_THREAD_SUBSCRIBE, "not");
  /* one thread serves one device */
  CHECK_OK(aclrtSetDevice(1));
  aclrtStream s1 = stream_new();
  CHECK_MSG(aclrtSubscribeReport(self_id(), s1), ACL_ERROR_RT_THREAD_SUBSCRIBE, "device");
  CHECK_OK(aclrtSetDevice(0));
  /* the calling thread processes its own callbacks */
  CHECK_OK(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_NO_BLOCK, s));
  for (int i = 0; i < 200 && atomic_load(&a.calls) == 0; i++) (void)aclrtProcessReport(10);
  CHECK_EQ(atomic_load(&a.calls), 1);
  CHECK_OK(aclrtUnSubscribeReport(self_id(), s));
  CHECK_ACL(aclrtProcessReport(10), ACL_ERROR_RT_THREAD_SUBSCRIBE);
  CHECK_OK(aclrtDestroyStream(s1));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_ACL(aclrtUnSubscribeReport(self_id(), s), ACL_ERROR_INVALID_PARAM); /* destroyed */
  CHECK_OK(aclFinalize());
}

/* A stream destroyed while subscribed does not lend its subscription to a
 * new stream, even at the same address. */
TEST(destroyed_stream_takes_its_subscription) {
  aclrtStream s = stream_new();
  CHECK_OK(aclrtSubscribeReport(self_id(), s));
  CHECK_OK(aclrtDestroyStream(s));
  for (int i = 0; i < 8; i++) {
    aclrtStream t = stream_new();
    seen a = {0};
    CHECK_ACL(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_BLOCK, t), ACL_ERROR_RT_STREAM_NO_CB_REG);
    CHECK_OK(aclrtDestroyStream(t));
  }
  CHECK_OK(aclFinalize());
}

/* ---- callbacks that call the runtime ------------------------------------- */

typedef struct reentry {
  aclrtStream own, other;
  int *dev;
  aclError sync_own, sync_other, destroy_own, memcpy_rc, launch_rc, finalize_rc;
  int value;
  seen nested;
} reentry;

static void calls_runtime(void *arg) {
  reentry *r = arg;
  r->sync_own = aclrtSynchronizeStream(r->own);
  r->destroy_own = aclrtDestroyStream(r->own);
  r->finalize_rc = aclFinalize();
  r->sync_other = aclrtSynchronizeStream(r->other);
  r->memcpy_rc = aclrtMemcpy(&r->value, sizeof r->value, r->dev, sizeof r->value, ACL_MEMCPY_DEVICE_TO_HOST);
  r->launch_rc = aclrtLaunchCallback(record_cb, &r->nested, ACL_CALLBACK_BLOCK, r->own);
}

TEST(callback_may_call_the_runtime) {
  reentry r = {0};
  r.own = stream_new();
  r.other = stream_new();
  CHECK_OK(aclrtMalloc((void **)&r.dev, 4096, ACL_MEM_MALLOC_HUGE_FIRST));
  CHECK_OK(aclrtMemset(r.dev, 4096, 7, 4));
  processor p;
  processor_start(&p, false);
  CHECK_OK(aclrtSubscribeReport((uint64_t)p.t, r.own));
  CHECK_OK(aclrtLaunchCallback(calls_runtime, &r, ACL_CALLBACK_BLOCK, r.own));
  CHECK_OK(aclrtSynchronizeStream(r.own));
  CHECK_OK(aclrtSynchronizeStream(r.own)); /* the nested one too */
  CHECK_EQ(r.sync_own, ACL_ERROR_RT_INTERNAL_ERROR); /* made on another thread */
  CHECK_EQ(r.destroy_own, ACL_ERROR_RT_INTERNAL_ERROR); /* made on another thread */
  CHECK_EQ(r.finalize_rc, ACL_ERROR_RT_INTERNAL_ERROR); /* made on another thread */
  CHECK_EQ(r.sync_other, ACL_SUCCESS);
  CHECK_EQ(r.memcpy_rc, ACL_SUCCESS);
  CHECK_EQ(r.value, 0x07070707);
  CHECK_EQ(r.launch_rc, ACL_SUCCESS);
  CHECK_EQ(atomic_load(&r.nested.calls), 1);
  processor_stop(&p);
  CHECK_OK(aclrtFree(r.dev));
  CHECK_OK(aclFinalize());
}

/* A host function on the worker: the same guard. */
static void hostfunc_syncs_own(void *arg) {
  reentry *r = arg;
  r->sync_own = aclrtSynchronizeStream(r->own);
  r->sync_other = aclrtSynchronizeStream(r->other);
}

TEST(host_func_may_call_the_runtime) {
  reentry r = {0};
  r.own = stream_new();
  r.other = stream_new();
  CHECK_OK(aclrtLaunchHostFunc(r.own, hostfunc_syncs_own, &r));
  CHECK_OK(aclrtSynchronizeStream(r.own));
  CHECK_EQ(r.sync_own, ACL_ERROR_RT_INTERNAL_ERROR); /* made on another thread */
  CHECK_EQ(r.sync_other, ACL_SUCCESS);
  CHECK_OK(aclFinalize());
}

/* ---- host functions -------------------------------------------------- */

TEST(host_func_runs_on_a_runtime_thread_in_order) {
  aclrtStream s = stream_new();
  seen a = {0};
  int *dev = NULL, v = 0;
  CHECK_OK(aclrtMalloc((void **)&dev, 4096, ACL_MEM_MALLOC_HUGE_FIRST));
  atomic_store(&g_flag, 0);
  CHECK_OK(aclrtLaunchHostFunc(s, slow_set_flag, NULL));
  CHECK_OK(aclrtLaunchHostFunc(s, record_cb, &a));
  int after = -1;
  CHECK_OK(aclrtLaunchHostFunc(s, read_flag, &after));
  CHECK_OK(aclrtMemsetAsync(dev, 4096, 3, 4, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(after, 1);
  CHECK_EQ(atomic_load(&a.calls), 1);
  CHECK(!pthread_equal(a.thread, pthread_self()));
  CHECK_OK(aclrtMemcpy(&v, 4, dev, 4, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK_EQ(v, 0x03030303);
  CHECK_OK(aclrtLaunchHostFunc(NULL, record_cb, &a)); /* the default stream */
  CHECK_OK(aclrtSynchronizeStream(NULL));
  CHECK_EQ(atomic_load(&a.calls), 2);
  CHECK_OK(aclrtFree(dev));
  CHECK_OK(aclFinalize());
}

TEST(host_func_runs_on_the_subscribed_thread) {
  aclrtStream s = stream_new();
  processor p;
  processor_start(&p, true);
  CHECK_OK(aclrtSubscribeHostFunc((uint64_t)p.t, s));
  seen a = {0};
  atomic_store(&g_flag, 0);
  int after = -1;
  CHECK_OK(aclrtLaunchHostFunc(s, slow_set_flag, NULL));
  CHECK_OK(aclrtLaunchHostFunc(s, record_cb, &a));
  CHECK_OK(aclrtLaunchHostFunc(s, read_flag, &after));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(after, 1);
  CHECK(pthread_equal(a.thread, p.t));
  CHECK_OK(aclrtUnSubscribeHostFunc((uint64_t)p.t, s));
  /* unsubscribed: a runtime thread runs them again */
  CHECK_OK(aclrtLaunchHostFunc(s, record_cb, &a));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(atomic_load(&a.calls), 2);
  CHECK(!pthread_equal(a.thread, p.t));
  processor_stop(&p);
  CHECK_OK(aclFinalize());
}

TEST(host_func_bad_arguments) {
  aclrtStream s = stream_new();
  seen a = {0};
  CHECK_MSG(aclrtLaunchHostFunc(s, NULL, &a), ACL_ERROR_INVALID_PARAM, "fn");
  CHECK_ACL(aclrtLaunchHostFunc((aclrtStream)&a, record_cb, &a), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtSubscribeHostFunc(self_id(), NULL), ACL_ERROR_INVALID_PARAM, "NULL");
  CHECK_ACL(aclrtUnSubscribeHostFunc(self_id(), NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtProcessHostFunc(0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtProcessHostFunc(10), ACL_ERROR_RT_THREAD_SUBSCRIBE);
  CHECK_ACL(aclrtUnSubscribeHostFunc(self_id(), s), ACL_ERROR_RT_STREAM_SUBSCRIBE);
  CHECK_OK(aclrtSubscribeHostFunc(self_id(), s));
  CHECK_ACL(aclrtSubscribeHostFunc(self_id(), s), ACL_ERROR_RT_STREAM_SUBSCRIBE);
  CHECK_ACL(aclrtProcessHostFunc(10), ACL_ERROR_RT_REPORT_TIMEOUT);
  /* a report subscription is another thing: both may name one stream */
  CHECK_OK(aclrtSubscribeReport(self_id(), s));
  CHECK_ACL(aclrtUnSubscribeHostFunc(self_id() + 1, s), ACL_ERROR_RT_THREAD_SUBSCRIBE);
  CHECK_OK(aclrtUnSubscribeHostFunc(self_id(), s));
  CHECK_OK(aclrtUnSubscribeReport(self_id(), s));
  CHECK_OK(aclFinalize());
}

/* ---- callbacks nobody runs ------------------------------------------ */

TEST(unsubscribe_fails_waiting_callbacks) {
  aclrtStream s = stream_new();
  CHECK_OK(aclrtSubscribeReport(self_id(), s)); /* this thread never processes */
  seen a = {0};
  CHECK_OK(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_BLOCK, s));
  CHECK_OK(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_NO_BLOCK, s));
  sleep_ms(50);
  CHECK_OK(aclrtUnSubscribeReport(self_id(), s));
  CHECK_MSG(aclrtSynchronizeStream(s), ACL_ERROR_RT_STREAM_NO_CB_REG, "unsubscribed");
  CHECK_EQ(atomic_load(&a.calls), 0);
  CHECK_OK(aclFinalize());
}

TEST(finalize_drops_waiting_callbacks) {
  aclrtStream s = stream_new();
  CHECK_OK(aclrtSubscribeReport(self_id(), s));
  seen a = {0};
  for (int i = 0; i < 3; i++) CHECK_OK(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_BLOCK, s));
  CHECK_OK(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_NO_BLOCK, s));
  CHECK_OK(aclFinalize()); /* returns: nobody would ever run them */
  CHECK_EQ(atomic_load(&a.calls), 0);
  CHECK_ACL(aclrtProcessReport(10), ACL_ERROR_RT_THREAD_SUBSCRIBE);
  /* and everything works again */
  s = stream_new();
  processor p;
  processor_start(&p, false);
  CHECK_OK(aclrtSubscribeReport((uint64_t)p.t, s));
  CHECK_OK(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_BLOCK, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(atomic_load(&a.calls), 1);
  processor_stop(&p);
  CHECK_OK(aclFinalize());
}

TEST(destroy_force_ends_a_waiting_callback) {
  aclrtStream s = stream_new();
  CHECK_OK(aclrtSubscribeReport(self_id(), s));
  seen a = {0};
  CHECK_OK(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_BLOCK, s));
  sleep_ms(20);
  CHECK_OK(aclrtDestroyStreamForce(s));
  CHECK_EQ(atomic_load(&a.calls), 0);
  CHECK_ACL(aclrtProcessReport(10), ACL_ERROR_RT_REPORT_TIMEOUT); /* the subscription is gone with nothing queued */
  CHECK_OK(aclFinalize());
}

/* ---- threads ---------------------------------------------------------- */

#define N_THREADS 6
#define N_CALLBACKS 200

static void count_cb(void *arg) { atomic_fetch_add((atomic_int *)arg, 1); }

static void *launcher(void *arg) {
  atomic_int *count = arg;
  aclrtStream s = NULL;
  if (aclrtCreateStream(&s) != ACL_SUCCESS) return (void *)1;
  processor p;
  atomic_init(&p.stop, false);
  atomic_init(&p.timeouts, 0);
  p.hostfunc = false;
  if (pthread_create(&p.t, NULL, process_loop, &p) != 0) return (void *)1;
  long bad = aclrtSubscribeReport((uint64_t)p.t, s) != ACL_SUCCESS;
  for (int i = 0; i < N_CALLBACKS && !bad; i++) {
    bad |= aclrtLaunchCallback(count_cb, count, i % 2 ? ACL_CALLBACK_BLOCK : ACL_CALLBACK_NO_BLOCK, s) != 0;
    bad |= aclrtLaunchHostFunc(s, count_cb, count) != 0;
  }
  bad |= aclrtSynchronizeStream(s) != ACL_SUCCESS;
  atomic_store(&p.stop, true);
  pthread_join(p.t, NULL);
  bad |= aclrtUnSubscribeReport((uint64_t)p.t, s) != ACL_SUCCESS;
  bad |= aclrtDestroyStream(s) != ACL_SUCCESS;
  return (void *)bad;
}

TEST(many_threads_many_callbacks) {
  atomic_int count;
  atomic_init(&count, 0);
  pthread_t t[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) CHECK_EQ(pthread_create(&t[i], NULL, launcher, &count), 0);
  for (int i = 0; i < N_THREADS; i++) {
    void *bad;
    CHECK_EQ(pthread_join(t[i], &bad), 0);
    CHECK(bad == NULL);
  }
  /* NO_BLOCK callbacks may still be running when their stream is synchronized:
   * each processor ran what was queued before it stopped, or the unsubscribe
   * dropped it. Blocking ones and host functions all ran. */
  CHECK(atomic_load(&count) >= N_THREADS * N_CALLBACKS * 3 / 2);
  CHECK(atomic_load(&count) <= N_THREADS * N_CALLBACKS * 2);
  CHECK_OK(aclFinalize());
}

/* ---- fork -------------------------------------------------------------- */

static int child_starts_clean(void *arg) {
  aclrtStream parents = arg;
  seen a = {0};
  /* the parent's subscriptions and streams are not the child's */
  if (aclrtProcessReport(10) != ACL_ERROR_RT_THREAD_SUBSCRIBE) return 1;
  if (aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_BLOCK, parents) != ACL_ERROR_INVALID_PARAM) return 2;
  aclrtStream s;
  if (aclrtCreateStream(&s)) return 3;
  if (aclrtSubscribeReport(self_id(), s)) return 4;
  if (aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_NO_BLOCK, s)) return 5;
  for (int i = 0; i < 500 && atomic_load(&a.calls) == 0; i++) (void)aclrtProcessReport(10);
  if (atomic_load(&a.calls) != 1) return 6;
  if (aclrtLaunchHostFunc(s, record_cb, &a) || aclrtSynchronizeStream(s)) return 7;
  if (atomic_load(&a.calls) != 2) return 8;
  return aclFinalize() == ACL_SUCCESS ? 0 : 9;
}

TEST(fork_child_starts_clean) {
  aclrtStream s = stream_new();
  processor p;
  processor_start(&p, false);
  CHECK_OK(aclrtSubscribeReport((uint64_t)p.t, s));
  seen a = {0};
  CHECK_OK(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_BLOCK, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(th_wait(th_spawn(child_starts_clean, s)), 0);
  CHECK_OK(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_BLOCK, s)); /* the parent's still works */
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(atomic_load(&a.calls), 2);
  processor_stop(&p);
  CHECK_OK(aclFinalize());
}

/* ---- exception info and task ids ----------------------------------------- */

TEST(exception_info_getters_refuse_null) {
  CHECK_EQ(aclrtGetTaskIdFromExceptionInfo(NULL), 0xFFFFFFFFu);
  CHECK_EQ(aclrtGetStreamIdFromExceptionInfo(NULL), 0xFFFFFFFFu);
  CHECK_EQ(aclrtGetThreadIdFromExceptionInfo(NULL), 0xFFFFFFFFu);
  CHECK_EQ(aclrtGetDeviceIdFromExceptionInfo(NULL), 0xFFFFFFFFu);
  CHECK_EQ(aclrtGetErrorCodeFromExceptionInfo(NULL), 0xFFFFFFFFu);
  void *p;
  uint32_t n;
  aclrtFuncHandle f;
  CHECK_ACL(aclrtGetArgsFromExceptionInfo(NULL, &p, &n), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtGetFuncHandleFromExceptionInfo(NULL, &f), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtSetExceptionInfoCallback(NULL));
}

TEST(thread_last_task_id) {
  uint32_t id = 0, id2 = 0;
  CHECK_ACL(aclrtGetThreadLastTaskId(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtGetThreadLastTaskId(&id), ACL_ERROR_RT_PARAM_INVALID); /* nothing queued yet */
  aclrtStream s = stream_new();
  seen a = {0}, b = {0}; /* one per stream: the two run at once */
  CHECK_OK(aclrtLaunchHostFunc(s, record_cb, &a));
  CHECK_OK(aclrtGetThreadLastTaskId(&id));
  CHECK_OK(aclrtLaunchHostFunc(s, record_cb, &a));
  CHECK_OK(aclrtGetThreadLastTaskId(&id2));
  CHECK_EQ(id2, id + 1);
  CHECK_OK(aclrtLaunchHostFunc(NULL, record_cb, &b)); /* the default stream's tasks do not count */
  CHECK_OK(aclrtGetThreadLastTaskId(&id));
  CHECK_EQ(id, id2);
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtSynchronizeStream(NULL));
  CHECK_OK(aclFinalize());
}

/* A Process* call waits its timeout when nothing comes, and returns as soon
 * as a callback arrives. */
TEST(process_waits_its_timeout) {
  aclrtStream s = stream_new();
  CHECK_OK(aclrtSubscribeReport(self_id(), s));
  double t0 = now_s();
  CHECK_ACL(aclrtProcessReport(100), ACL_ERROR_RT_REPORT_TIMEOUT);
  CHECK(now_s() - t0 >= 0.09);
  seen a = {0};
  CHECK_OK(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_BLOCK, s));
  t0 = now_s();
  CHECK_OK(aclrtProcessReport(-1));
  CHECK_EQ(atomic_load(&a.calls), 1);
  CHECK(now_s() - t0 < 5);
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclFinalize());
}

/* A fork while a blocking callback waits for its thread: the child forgets
 * it (its worker is not in the child), the parent still runs it. */
static int child_after_pending(void *arg) {
  (void)arg;
  if (aclrtProcessReport(10) != ACL_ERROR_RT_THREAD_SUBSCRIBE) return 1;
  seen a = {0};
  aclrtStream s;
  if (aclrtCreateStream(&s) || aclrtLaunchHostFunc(s, record_cb, &a) || aclrtSynchronizeStream(s)) return 2;
  if (atomic_load(&a.calls) != 1) return 3;
  return aclFinalize() == ACL_SUCCESS ? 0 : 4;
}

TEST(fork_while_a_callback_waits) {
  aclrtStream s = stream_new();
  CHECK_OK(aclrtSubscribeReport(self_id(), s));
  seen a = {0};
  CHECK_OK(aclrtLaunchCallback(record_cb, &a, ACL_CALLBACK_BLOCK, s));
  sleep_ms(30); /* the worker waits for this thread */
  CHECK_EQ(th_wait(th_spawn(child_after_pending, NULL)), 0);
  for (int i = 0; i < 500 && atomic_load(&a.calls) == 0; i++) (void)aclrtProcessReport(10);
  CHECK_EQ(atomic_load(&a.calls), 1);
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclFinalize());
}
