/* Stream configuration, failure modes, abort and stop, state callbacks,
 * event reset / timestamps / flagged calls, value writes and waits (across
 * streams, threads and processes), reductions and random numbers: CANN's
 * rules for each call, every error code, fork and aclFinalize. */
#include <math.h>
#include <pthread.h>

#include "ipc_util.h"

/* Queues on s a copy that fails when it runs (its source is freed while the
 * gate holds it back). */
static void queue_failing_copy(aclrtStream s, char *host, size_t n) {
  void *victim = dmalloc(PAGE);
  CHECK_OK(aclrtMemcpyAsync(host, n, victim, n, ACL_MEMCPY_DEVICE_TO_HOST, s));
  CHECK_OK(aclrtFree(victim));
}

static uint64_t read_word(void *dev) {
  uint64_t v = 0;
  CHECK_OK(aclrtMemcpy(&v, sizeof v, dev, sizeof v, ACL_MEMCPY_DEVICE_TO_HOST));
  return v;
}

/* ---- configuration ---------------------------------------------------------------- */

TEST(configured_streams_report_flags_priority_and_id) {
  aclrtStream a, b, c;
  CHECK_OK(aclrtCreateStreamWithConfig(&a, 3, ACL_STREAM_FAST_LAUNCH | ACL_STREAM_FAST_SYNC));
  CHECK_OK(aclrtCreateStreamWithConfig(&b, 0, ACL_STREAM_HUGE));
  CHECK_ACL(aclrtCreateStreamWithConfig(NULL, 0, 0), ACL_ERROR_INVALID_PARAM);
  uint32_t f, p;
  int32_t ida, idb, idd;
  CHECK_OK(aclrtStreamGetFlags(a, &f));
  CHECK_EQ(f, ACL_STREAM_FAST_LAUNCH | ACL_STREAM_FAST_SYNC);
  CHECK_OK(aclrtStreamGetPriority(a, &p));
  CHECK_EQ(p, 3);
  CHECK_OK(aclrtStreamGetFlags(b, &f));
  CHECK_EQ(f, ACL_STREAM_HUGE);
  CHECK_OK(aclrtStreamGetId(a, &ida));
  CHECK_OK(aclrtStreamGetId(b, &idb));
  CHECK_OK(aclrtStreamGetId(NULL, &idd)); /* the default stream has one too */
  CHECK(ida != idb && ida != idd && idb != idd);
  CHECK_OK(aclrtStreamGetFlags(NULL, &f));
  CHECK_EQ(f, 0);
  CHECK_OK(aclrtStreamGetPriority(NULL, &p));
  CHECK_EQ(p, 0);
  /* bad arguments */
  CHECK_ACL(aclrtStreamGetFlags(a, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtStreamGetId(a, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtStreamGetPriority(a, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtStreamGetFlags((aclrtStream)&f, &f), ACL_ERROR_INVALID_PARAM);
  /* they work as streams */
  void *d = dmalloc(PAGE);
  CHECK_OK(aclrtMemsetAsync(d, PAGE, 7, PAGE, a));
  CHECK_OK(aclrtSynchronizeStream(a));
  CHECK_EQ(read_word(d), 0x0707070707070707ull);
  CHECK_OK(aclrtDestroyStream(a));
  CHECK_ACL(aclrtStreamGetId(a, &ida), ACL_ERROR_INVALID_PARAM); /* destroyed */
  CHECK_OK(aclrtDestroyStream(b));
  CHECK_OK(aclrtCreateStream(&c));
  int32_t idc;
  CHECK_OK(aclrtStreamGetId(c, &idc));
  CHECK(idc != ida && idc != idb); /* ids are not reused */
  CHECK_OK(aclrtDestroyStream(c));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

TEST(config_handles_and_create_v2) {
  aclrtStreamConfigHandle *h = aclrtCreateStreamConfigHandle();
  CHECK(h != NULL);
  uint32_t flag = ACL_STREAM_FAST_SYNC, prio = 5;
  CHECK_OK(aclrtSetStreamConfigOpt(h, ACL_RT_STREAM_FLAG, &flag, sizeof flag));
  CHECK_OK(aclrtSetStreamConfigOpt(h, ACL_RT_STREAM_PRIORITY, &prio, sizeof prio));
  CHECK_ACL(aclrtSetStreamConfigOpt(NULL, ACL_RT_STREAM_FLAG, &flag, sizeof flag), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtSetStreamConfigOpt(h, ACL_RT_STREAM_FLAG, NULL, sizeof flag), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtSetStreamConfigOpt(h, ACL_RT_STREAM_FLAG, &flag, 2), ACL_ERROR_INVALID_PARAM, "valueSize");
  CHECK_MSG(aclrtSetStreamConfigOpt(h, (aclrtStreamConfigAttr)9, &flag, sizeof flag), ACL_ERROR_INVALID_PARAM,
            "aclrtStreamConfigAttr");
  size_t ws = 4096;
  CHECK_OK(aclrtSetStreamConfigOpt(h, ACL_RT_STREAM_WORK_SIZE, &ws, sizeof ws));
  CHECK_EQ(h->workSize, 4096);
  aclrtStream s;
  CHECK_ACL(aclrtCreateStreamV2(&s, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtCreateStreamV2(NULL, h), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtCreateStreamV2(&s, h));
  uint32_t f, p;
  CHECK_OK(aclrtStreamGetFlags(s, &f));
  CHECK_OK(aclrtStreamGetPriority(s, &p));
  CHECK_EQ(f, ACL_STREAM_FAST_SYNC);
  CHECK_EQ(p, 5);
  CHECK_OK(aclrtDestroyStreamConfigHandle(h)); /* the stream keeps its copy */
  CHECK_ACL(aclrtDestroyStreamConfigHandle(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclFinalize());
}

TEST(device_only_and_persistent_streams_take_no_host_work) {
  aclrtStream dev, per;
  CHECK_OK(aclrtCreateStreamWithConfig(&dev, 0, ACL_STREAM_DEVICE_USE_ONLY));
  CHECK_OK(aclrtCreateStreamWithConfig(&per, 0, ACL_STREAM_PERSISTENT));
  void *d = dmalloc(PAGE);
  CHECK_MSG(aclrtMemsetAsync(d, PAGE, 1, PAGE, dev), ACL_ERROR_RT_PARAM_INVALID, "DEVICE_USE_ONLY");
  CHECK_MSG(aclrtValueWrite(d, 1, 0, per), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "ACL_STREAM_PERSISTENT");
  CHECK_OK(aclrtSynchronizeStream(dev)); /* CANN: returns at once for these */
  CHECK_OK(aclrtSynchronizeStream(per));
  aclrtStreamStatus st;
  CHECK_OK(aclrtStreamQuery(dev, &st));
  CHECK_EQ(st, ACL_STREAM_STATUS_COMPLETE);
  CHECK_OK(aclrtStreamStop(dev));
  CHECK_OK(aclrtStreamAbort(per));
  CHECK_OK(aclrtDestroyStreamForce(dev));
  CHECK_OK(aclrtDestroyStream(per));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

TEST(stream_query_follows_the_queue) {
  aclrtStream s = stream_new();
  aclrtStreamStatus st;
  CHECK_ACL(aclrtStreamQuery(s, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtStreamQuery((aclrtStream)&st, &st), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtStreamQuery(s, &st));
  CHECK_EQ(st, ACL_STREAM_STATUS_COMPLETE);
  aclrtNotify g = gate_new(s);
  CHECK_OK(aclrtStreamQuery(s, &st));
  CHECK_EQ(st, ACL_STREAM_STATUS_NOT_READY);
  CHECK_OK(aclrtRecordNotify(g, NULL));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtStreamQuery(s, &st));
  CHECK_EQ(st, ACL_STREAM_STATUS_COMPLETE);
  CHECK_OK(aclrtSynchronizeStream(NULL)); /* the record ran there */
  CHECK_OK(aclrtStreamQuery(NULL, &st)); /* the default stream */
  CHECK_EQ(st, ACL_STREAM_STATUS_COMPLETE);
  CHECK_OK(aclrtDestroyNotify(g));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclFinalize());
}

/* ---- failure modes ------------------------------------------------------------------ */

TEST(failure_mode_arguments) {
  aclrtStream s = stream_new();
  CHECK_ACL(aclrtSetStreamFailureMode(s, 2), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtSetStreamFailureMode((aclrtStream)&s, ACL_STOP_ON_FAILURE), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtSetStreamFailureMode(s, ACL_STOP_ON_FAILURE));
  CHECK_OK(aclrtSetStreamFailureMode(s, ACL_STOP_ON_FAILURE)); /* the same again: nothing changes */
  CHECK_MSG(aclrtSetStreamFailureMode(s, ACL_CONTINUE_ON_FAILURE), ACL_ERROR_RT_PARAM_INVALID, "once");
  CHECK_OK(aclrtSetStreamFailureMode(NULL, ACL_CONTINUE_ON_FAILURE)); /* the default stream */
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclFinalize());
}

TEST(continue_on_failure_runs_the_tasks_behind_a_failure) {
  aclrtStream s = stream_new();
  aclrtNotify g = gate_new(s);
  void *d = dmalloc(PAGE);
  char h[16];
  queue_failing_copy(s, h, sizeof h);
  CHECK_OK(aclrtMemsetAsync(d, PAGE, 3, PAGE, s)); /* runs: CANN's continue mode */
  CHECK_OK(aclrtValueWrite((char *)d + 8, 42, 0, s));
  aclrtEvent e;
  CHECK_OK(aclrtCreateEvent(&e));
  CHECK_OK(aclrtRecordEvent(e, s));
  CHECK_OK(aclrtRecordNotify(g, NULL));
  /* the record after the failure tells its waiters */
  CHECK_MSG(aclrtSynchronizeEvent(e), ACL_ERROR_INVALID_PARAM, "never written");
  CHECK_MSG(aclrtSynchronizeStream(s), ACL_ERROR_INVALID_PARAM, "not allocated");
  CHECK_EQ(read_word(d), 0x0303030303030303ull);
  CHECK_EQ(read_word((char *)d + 8), 42);
  CHECK_OK(aclrtSynchronizeStream(s)); /* reported once; the stream works on */
  CHECK_OK(aclrtMemsetAsync(d, PAGE, 4, PAGE, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(read_word(d), 0x0404040404040404ull);
  CHECK_OK(aclrtDestroyEvent(e));
  CHECK_OK(aclrtDestroyNotify(g));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

TEST(stop_on_failure_runs_nothing_after_a_failure) {
  aclrtStream s = stream_new();
  CHECK_OK(aclrtSetStreamFailureMode(s, ACL_STOP_ON_FAILURE));
  aclrtNotify g = gate_new(s);
  void *d = dmalloc(PAGE);
  char h[16];
  CHECK_OK(aclrtMemsetAsync(d, PAGE, 1, PAGE, s)); /* before the failure: runs */
  queue_failing_copy(s, h, sizeof h);
  /* behind it, every kind of task is dropped */
  CHECK_OK(aclrtMemsetAsync(d, PAGE, 2, PAGE, s));
  CHECK_OK(aclrtValueWrite((char *)d + 8, 42, 0, s));
  CHECK_OK(aclrtValueWait((char *)d + 16, 1, ACL_STREAM_WAIT_VALUE_EQ, s)); /* would wait for ever */
  float one[4] = {1, 1, 1, 1};
  CHECK_OK(aclrtMemcpyAsync((char *)d + 64, 16, one, 16, ACL_MEMCPY_HOST_TO_DEVICE, s));
  aclrtEvent e;
  CHECK_OK(aclrtCreateEvent(&e));
  CHECK_OK(aclrtRecordEvent(e, s));
  CHECK_OK(aclrtRecordNotify(g, NULL));
  CHECK_MSG(aclrtSynchronizeEvent(e), ACL_ERROR_INVALID_PARAM, "never written"); /* the dropped record ends the wait */
  CHECK_MSG(aclrtSynchronizeStream(s), ACL_ERROR_INVALID_PARAM, "not allocated");
  CHECK_EQ(read_word(d), 0x0101010101010101ull);
  CHECK_EQ(read_word((char *)d + 8), 0x0101010101010101ull);
  CHECK_EQ(read_word((char *)d + 64), 0x0101010101010101ull);
  /* the stream stays stopped: new work is accepted and dropped, as the device drops it; every
   * synchronize says why, and an event recorded there completes with the failure */
  CHECK_OK(aclrtMemsetAsync(d, PAGE, 5, PAGE, s));
  CHECK_OK(aclrtRecordEvent(e, s));
  CHECK_MSG(aclrtSynchronizeEvent(e), ACL_ERROR_INVALID_PARAM, "never written");
  CHECK_ACL(aclrtSynchronizeStream(s), ACL_ERROR_INVALID_PARAM);
  CHECK_EQ(read_word(d), 0x0101010101010101ull);
  aclrtStreamStatus st;
  CHECK_OK(aclrtStreamQuery(s, &st));
  CHECK_EQ(st, ACL_STREAM_STATUS_COMPLETE);
  /* other streams are not affected */
  aclrtStream o = stream_new();
  CHECK_OK(aclrtMemsetAsync(d, PAGE, 6, PAGE, o));
  CHECK_OK(aclrtSynchronizeStream(o));
  CHECK_EQ(read_word(d), 0x0606060606060606ull);
  CHECK_OK(aclrtDestroyEvent(e));
  CHECK_OK(aclrtDestroyNotify(g));
  CHECK_OK(aclrtDestroyStreamForce(s));
  CHECK_OK(aclrtDestroyStream(o));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

TEST(abort_clears_a_stopped_stream) {
  aclrtStream s = stream_new();
  CHECK_OK(aclrtSetStreamFailureMode(s, ACL_STOP_ON_FAILURE));
  char h[16];
  void *d = dmalloc(PAGE);
  aclrtNotify g = gate_new(s);
  queue_failing_copy(s, h, sizeof h);
  CHECK_OK(aclrtRecordNotify(g, NULL));
  CHECK_ACL(aclrtSynchronizeStream(s), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtStreamAbort(s)); /* drops the failure with the rest */
  CHECK_OK(aclrtMemsetAsync(d, PAGE, 9, PAGE, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(read_word(d), 0x0909090909090909ull);
  CHECK_OK(aclrtDestroyNotify(g));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

/* ---- abort and stop ------------------------------------------------------------------ */

TEST(abort_interrupts_and_drops_the_queue) {
  aclrtStream s = stream_new();
  void *d = dmalloc(PAGE);
  CHECK_OK(aclrtMemset(d, PAGE, 0, PAGE));
  CHECK_OK(aclrtValueWait(d, 1, ACL_STREAM_WAIT_VALUE_EQ, s)); /* blocks: nobody writes 1 */
  CHECK_OK(aclrtMemsetAsync((char *)d + 64, 64, 5, 64, s));
  aclrtEvent e;
  CHECK_OK(aclrtCreateEvent(&e));
  CHECK_OK(aclrtRecordEvent(e, s));
  CHECK_ACL(aclrtStreamAbort(NULL), ACL_SUCCESS);
  CHECK_ACL(aclrtStreamAbort((aclrtStream)&e), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtStreamAbort(s));
  CHECK_MSG(aclrtSynchronizeEvent(e), ACL_ERROR_RT_STREAM_ABORT, "never written"); /* dropped: its waiters hear */
  CHECK_OK(aclrtSynchronizeStream(s)); /* nothing left, nothing to report */
  CHECK_EQ(read_word((char *)d + 64), 0);
  CHECK_OK(aclrtMemsetAsync((char *)d + 64, 64, 5, 64, s)); /* usable again */
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(read_word((char *)d + 64), 0x0505050505050505ull);
  CHECK_OK(aclrtDestroyEvent(e));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

typedef struct sync_arg {
  aclrtStream s;
  aclError rc;
} sync_arg;

static void *sync_thread(void *p) {
  sync_arg *a = p;
  a->rc = aclrtSynchronizeStream(a->s);
  return NULL;
}

TEST(a_synchronize_waiting_through_an_abort_says_so) {
  aclrtStream s = stream_new();
  void *d = dmalloc(PAGE);
  CHECK_OK(aclrtValueWait(d, 1, ACL_STREAM_WAIT_VALUE_EQ, s));
  sync_arg a = {s, -1};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, sync_thread, &a) == 0);
  aclrtStreamStatus st;
  for (int i = 0; i < 100; i++) usleep(1000); /* let it start waiting */
  CHECK_OK(aclrtStreamQuery(s, &st));
  CHECK_EQ(st, ACL_STREAM_STATUS_NOT_READY);
  CHECK_OK(aclrtStreamAbort(s));
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_EQ(a.rc, ACL_ERROR_RT_STREAM_ABORT);
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

TEST(stop_interrupts_the_running_task_only) {
  aclrtStream s = stream_new();
  void *d = dmalloc(PAGE);
  CHECK_OK(aclrtValueWait(d, 1, ACL_STREAM_WAIT_VALUE_EQ, s)); /* blocks */
  CHECK_OK(aclrtValueWrite((char *)d + 8, 77, 0, s));            /* queued behind it */
  CHECK_MSG(aclrtStreamStop(NULL), ACL_ERROR_RT_PARAM_INVALID, "default stream");
  CHECK_ACL(aclrtStreamStop((aclrtStream)&d), ACL_ERROR_INVALID_PARAM);
  aclrtStreamStatus st;
  do { /* the wait must be running before the stop means anything */
    CHECK_OK(aclrtStreamQuery(s, &st));
  } while (st != ACL_STREAM_STATUS_NOT_READY);
  usleep(20000);
  CHECK_OK(aclrtStreamStop(s));
  CHECK_MSG(aclrtSynchronizeStream(s), ACL_ERROR_RT_STREAM_ABORT, "aclrtStreamStop");
  CHECK_EQ(read_word((char *)d + 8), 77); /* the queued task ran */
  CHECK_OK(aclrtStreamStop(s));           /* nothing running: nothing to do */
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

/* ---- state callbacks ---------------------------------------------------------------- */

static pthread_mutex_t g_cb_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_cb_created, g_cb_destroyed;
static aclrtStream g_cb_last;
static pthread_t g_cb_thread;
static int g_cb_usable;

static void state_cb(aclrtStream s, aclrtStreamState state, void *args) {
  pthread_mutex_lock(&g_cb_mu);
  if (state == ACL_RT_STREAM_STATE_CREATE_POST) g_cb_created += *(int *)args;
  if (state == ACL_RT_STREAM_STATE_DESTROY_PRE) {
    g_cb_destroyed += *(int *)args;
    uint32_t f;
    g_cb_usable += aclrtStreamGetFlags(s, &f) == ACL_SUCCESS; /* still a live stream */
  }
  g_cb_last = s;
  g_cb_thread = pthread_self();
  pthread_mutex_unlock(&g_cb_mu);
}

TEST(state_callbacks_run_on_a_runtime_thread) {
  int one = 1, ten = 10;
  CHECK_ACL(aclrtRegStreamStateCallback(NULL, state_cb, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtRegStreamStateCallback("", state_cb, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtRegStreamStateCallback("a", state_cb, &one));
  CHECK_MSG(aclrtRegStreamStateCallback("a", state_cb, &one), ACL_ERROR_RT_PARAM_INVALID, "already registered");
  CHECK_OK(aclrtRegStreamStateCallback("b", state_cb, &ten));
  aclrtStream s = stream_new();
  CHECK_EQ(g_cb_created, 11); /* both ran before the create returned */
  CHECK(g_cb_last == s);
  CHECK(!pthread_equal(g_cb_thread, pthread_self()));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_EQ(g_cb_destroyed, 11);
  CHECK_EQ(g_cb_usable, 2);
  CHECK_OK(aclrtRegStreamStateCallback("b", NULL, NULL)); /* removed */
  CHECK_OK(aclrtRegStreamStateCallback("never", NULL, NULL));
  CHECK_OK(aclrtMemsetAsync(dmalloc(PAGE), PAGE, 0, PAGE, NULL)); /* the default stream, made now */
  CHECK_EQ(g_cb_created, 12);
  aclrtStream def = NULL;
  CHECK_OK(aclrtCtxGetCurrentDefaultStream(&def));
  /* the default stream's own handle (not "!= s": s is freed, its address may come back) */
  CHECK(g_cb_last != NULL && g_cb_last == def);
  CHECK_OK(aclFinalize()); /* registrations go */
  s = stream_new();
  CHECK_EQ(g_cb_created, 12);
  CHECK_OK(aclrtRegStreamStateCallback("a", state_cb, &one)); /* registrable again */
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_EQ(g_cb_destroyed, 12);
  CHECK_OK(aclFinalize());
}

static aclrtStream g_inner;
static void nesting_cb(aclrtStream s, aclrtStreamState state, void *args) {
  (void)args;
  if (state == ACL_RT_STREAM_STATE_CREATE_POST && s && !g_inner) CHECK_OK(aclrtCreateStream(&g_inner));
}

TEST(a_callback_may_create_streams) {
  CHECK_OK(aclrtRegStreamStateCallback("nest", nesting_cb, NULL));
  aclrtStream s = stream_new();
  CHECK(g_inner != NULL && g_inner != s);
  CHECK_OK(aclrtDestroyStream(g_inner));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclFinalize());
}

/* ---- events -------------------------------------------------------------------------- */

TEST(event_timestamps_are_microseconds_of_a_monotonic_clock) {
  aclrtStream s = stream_new();
  aclrtEvent a, b, plain;
  CHECK_OK(aclrtCreateEvent(&a));
  CHECK_OK(aclrtCreateEvent(&b));
  CHECK_OK(aclrtCreateEventWithFlag(&plain, ACL_EVENT_SYNC));
  uint64_t ta, tb;
  CHECK_ACL(aclrtEventGetTimestamp(a, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtEventGetTimestamp(NULL, &ta), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtEventGetTimestamp(a, &ta), ACL_ERROR_RT_INTERNAL_ERROR); /* never recorded */
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_OK(aclrtRecordEvent(a, s));
  usleep(20000);
  CHECK_OK(aclrtRecordEvent(b, s));
  CHECK_OK(aclrtRecordEvent(plain, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtEventGetTimestamp(a, &ta));
  CHECK_OK(aclrtEventGetTimestamp(b, &tb));
  uint64_t start_us = (uint64_t)t0.tv_sec * 1000000u + (uint64_t)t0.tv_nsec / 1000;
  CHECK(ta >= start_us && tb >= ta + 19000);
  float ms;
  CHECK_OK(aclrtEventElapsedTime(&ms, a, b));
  CHECK(fabs(ms * 1000.0 - (double)(tb - ta)) < 2.0);
  CHECK_ACL(aclrtEventGetTimestamp(plain, &ta), ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID); /* no ACL_EVENT_TIME_LINE */
  CHECK_OK(aclrtDestroyEvent(a));
  CHECK_OK(aclrtDestroyEvent(b));
  CHECK_OK(aclrtDestroyEvent(plain));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclFinalize());
}

TEST(record_and_wait_with_flags) {
  aclrtStream s = stream_new(), w = stream_new();
  aclrtEvent e;
  CHECK_OK(aclrtCreateEventExWithFlag(&e, ACL_EVENT_SYNC));
  CHECK_MSG(aclrtRecordEventWithFlag(e, s, ACL_EVENT_RECORD_EXTERNAL), ACL_ERROR_RT_STREAM_NOT_CAPTURED, "being captured");
  CHECK_ACL(aclrtRecordEventWithFlag(e, s, 2), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtRecordEventWithFlag(NULL, s, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtStreamWaitEventWithFlag(w, e, 0, ACL_EVENT_WAIT_EXTERNAL), ACL_ERROR_RT_STREAM_NOT_CAPTURED, "being captured");
  CHECK_ACL(aclrtStreamWaitEventWithFlag(w, e, 0, 7), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtStreamWaitEventWithFlag(w, e, 0x80000000u, 0), ACL_ERROR_RT_PARAM_INVALID);
  /* stream order across streams, as aclrtRecordEvent / aclrtStreamWaitEventWithTimeout */
  void *d = dmalloc(PAGE);
  aclrtNotify g = gate_new(s);
  CHECK_OK(aclrtValueWrite(d, 5, 0, s));
  CHECK_OK(aclrtRecordEventWithFlag(e, s, ACL_EVENT_RECORD_DEFAULT));
  CHECK_OK(aclrtStreamWaitEventWithFlag(w, e, 10, ACL_EVENT_WAIT_DEFAULT));
  CHECK_OK(aclrtValueWait(d, 5, ACL_STREAM_WAIT_VALUE_EQ, w)); /* met only if the wait held w back */
  CHECK_OK(aclrtValueWrite((char *)d + 8, 6, 0, w));
  usleep(20000);
  CHECK_EQ(read_word((char *)d + 8), 0);
  CHECK_OK(aclrtRecordNotify(g, NULL));
  CHECK_OK(aclrtSynchronizeStream(w));
  CHECK_EQ(read_word((char *)d + 8), 6);
  CHECK_OK(aclrtDestroyNotify(g));
  CHECK_OK(aclrtDestroyEvent(e));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtDestroyStream(w));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

TEST(reset_event_returns_it_to_not_recorded) {
  aclrtStream s = stream_new(), w = stream_new();
  aclrtEvent e, noflag, ipc;
  CHECK_OK(aclrtCreateEvent(&e));
  CHECK_OK(aclrtCreateEventWithFlag(&noflag, ACL_EVENT_TIME_LINE));
  CHECK_OK(aclrtCreateEventExWithFlag(&ipc, ACL_EVENT_IPC));
  CHECK_ACL(aclrtResetEvent(NULL, s), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtResetEvent(e, (aclrtStream)&e), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtResetEvent(noflag, s), ACL_ERROR_RT_PARAM_INVALID, "ACL_EVENT_SYNC");
  CHECK_ACL(aclrtResetEvent(ipc, s), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_OK(aclrtRecordEvent(e, s));
  CHECK_OK(aclrtSynchronizeEvent(e));
  aclrtEventRecordedStatus st;
  CHECK_OK(aclrtQueryEventStatus(e, &st));
  CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_COMPLETE);
  CHECK_OK(aclrtResetEvent(e, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtQueryEventStatus(e, &st));
  CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_NOT_READY);
  /* a wait issued now waits for a new record (CANN's warning about resets) */
  void *d = dmalloc(PAGE);
  CHECK_OK(aclrtStreamWaitEvent(w, e));
  CHECK_OK(aclrtValueWrite(d, 1, 0, w));
  usleep(20000);
  CHECK_EQ(read_word(d), 0);
  CHECK_OK(aclrtRecordEvent(e, s));
  CHECK_OK(aclrtSynchronizeStream(w));
  CHECK_EQ(read_word(d), 1);
  CHECK_OK(aclrtQueryEventStatus(e, &st));
  CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_COMPLETE);
  CHECK_OK(aclrtDestroyEvent(e));
  CHECK_OK(aclrtDestroyEvent(noflag));
  CHECK_OK(aclrtDestroyEvent(ipc));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtDestroyStream(w));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

/* ---- value write and wait ---------------------------------------------------------- */

TEST(value_calls_check_their_arguments) {
  void *d = dmalloc(PAGE);
  uint64_t host = 0;
  aclrtStream s = stream_new();
  CHECK_ACL(aclrtValueWrite(NULL, 1, 0, s), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtValueWrite((char *)d + 4, 1, 0, s), ACL_ERROR_RT_PARAM_INVALID, "aligned");
  CHECK_MSG(aclrtValueWrite(d, 1, 1, s), ACL_ERROR_RT_PARAM_INVALID, "reserved");
  CHECK_MSG(aclrtValueWrite(&host, 1, 0, s), ACL_ERROR_INVALID_PARAM, "host memory");
  CHECK_ACL(aclrtValueWrite((char *)d + PAGE - 4, 1, 0, s), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtValueWrite(d, 1, 0, (aclrtStream)&host), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtValueWait(NULL, 1, 0, s), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtValueWait(d, 1, 4, s), ACL_ERROR_RT_PARAM_INVALID, "ACL_STREAM_WAIT_VALUE_GEQ");
  CHECK_ACL(aclrtValueWait(&host, 1, 0, s), ACL_ERROR_INVALID_PARAM);
  /* memory freed before the task runs: an error of the task */
  aclrtNotify g = gate_new(s);
  void *v = dmalloc(PAGE);
  CHECK_OK(aclrtValueWrite(v, 1, 0, s));
  CHECK_OK(aclrtFree(v));
  CHECK_OK(aclrtRecordNotify(g, NULL));
  CHECK_MSG(aclrtSynchronizeStream(s), ACL_ERROR_INVALID_PARAM, "aclrtValueWrite");
  CHECK_OK(aclrtDestroyNotify(g));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

TEST(value_wait_conditions) {
  aclrtStream s = stream_new();
  uint64_t *d = dmalloc(PAGE);
  struct {
    uint64_t cur, value;
    uint32_t flag;
  } met[] = {
      {5, 5, ACL_STREAM_WAIT_VALUE_EQ},    {6, 5, ACL_STREAM_WAIT_VALUE_GEQ},
      {5, 5, ACL_STREAM_WAIT_VALUE_GEQ},   {0, UINT64_MAX, ACL_STREAM_WAIT_VALUE_GEQ}, /* wraps: 0 - max = 1 */
      {6, 2, ACL_STREAM_WAIT_VALUE_AND},   {1, 2, ACL_STREAM_WAIT_VALUE_NOR},
  };
  for (size_t i = 0; i < sizeof met / sizeof *met; i++) {
    CHECK_OK(aclrtValueWrite(d, met[i].cur, 0, s));
    CHECK_OK(aclrtValueWait(d, met[i].value, met[i].flag, s));
    CHECK_OK(aclrtSynchronizeStream(s));
  }
  /* unmet: each blocks until aborted */
  struct {
    uint64_t cur, value;
    uint32_t flag;
  } unmet[] = {
      {4, 5, ACL_STREAM_WAIT_VALUE_EQ},
      {4, 5, ACL_STREAM_WAIT_VALUE_GEQ},
      {4, 2, ACL_STREAM_WAIT_VALUE_AND},
      {UINT64_MAX, 0, ACL_STREAM_WAIT_VALUE_NOR},
  };
  for (size_t i = 0; i < sizeof unmet / sizeof *unmet; i++) {
    CHECK_OK(aclrtValueWrite(d, unmet[i].cur, 0, s));
    CHECK_OK(aclrtValueWait(d, unmet[i].value, unmet[i].flag, s));
    aclError rc = aclrtSynchronizeStreamWithTimeout(s, 30);
    CHECK_EQ(rc, ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    CHECK_OK(aclrtStreamAbort(s));
    CHECK_OK(aclrtSynchronizeStream(s));
  }
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

typedef struct writer_arg {
  void *d;
  int rounds;
} writer_arg;

/* Another thread, another stream: writes 1..rounds, each after the reader's ack. */
static void *writer_thread(void *p) {
  writer_arg *a = p;
  aclrtStream s = stream_new();
  for (int i = 1; i <= a->rounds; i++) {
    CHECK_OK(aclrtValueWait((uint64_t *)a->d + 1, (uint64_t)i - 1, ACL_STREAM_WAIT_VALUE_GEQ, s));
    CHECK_OK(aclrtValueWrite(a->d, (uint64_t)i, 0, s));
  }
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtDestroyStream(s));
  return NULL;
}

TEST(value_ping_pong_across_threads_and_streams) {
  int rounds = under_valgrind() ? 50 : 500;
  void *d = dmalloc(PAGE);
  CHECK_OK(aclrtMemset(d, PAGE, 0, PAGE));
  writer_arg a = {d, rounds};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, writer_thread, &a) == 0);
  aclrtStream s = stream_new();
  for (int i = 1; i <= rounds; i++) {
    CHECK_OK(aclrtValueWait(d, (uint64_t)i, ACL_STREAM_WAIT_VALUE_EQ, s));
    CHECK_OK(aclrtValueWrite((uint64_t *)d + 1, (uint64_t)i, 0, s)); /* ack */
  }
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_EQ(read_word(d), rounds);
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

static int value_child(chan *c, void *arg) {
  (void)arg;
  char key[KEYLEN];
  from_parent(c, key, KEYLEN);
  void *p = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  aclrtStream s = stream_new();
  CHECK_OK(aclrtValueWait(p, 0xabcdef0123ull, ACL_STREAM_WAIT_VALUE_EQ, s)); /* the parent's stream writes it */
  CHECK_OK(aclrtValueWrite((uint64_t *)p + 1, 1, 0, s));                      /* and then this answers */
  send_int(c->up[1], 1); /* queued */
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtIpcMemClose(key));
  return 0;
}

TEST(value_wait_on_a_word_another_process_writes) {
  char key[KEYLEN];
  void *d = export_new(PAGE, EXPORT_ANY, key);
  CHECK_OK(aclrtMemset(d, PAGE, 0, PAGE));
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, value_child, NULL);
  to_child(&c, key, KEYLEN);
  CHECK_EQ(recv_int(c.up[0]), 1);
  usleep(20000);
  CHECK_EQ(read_word((uint64_t *)d + 1), 0); /* still waiting */
  aclrtStream s = stream_new();
  CHECK_OK(aclrtValueWrite(d, 0xabcdef0123ull, 0, s));
  CHECK_OK(aclrtValueWait((uint64_t *)d + 1, 1, ACL_STREAM_WAIT_VALUE_EQ, s)); /* the child's answer */
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

TEST(destroy_force_cancels_a_value_wait) {
  aclrtStream s = stream_new();
  void *d = dmalloc(PAGE);
  CHECK_OK(aclrtValueWait(d, 1, ACL_STREAM_WAIT_VALUE_EQ, s));
  usleep(10000);
  CHECK_OK(aclrtDestroyStreamForce(s)); /* does not hang */
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

/* ---- reduce --------------------------------------------------------------------------- */

static uint16_t f2h(float f) { /* exact for the small values used below */
  uint32_t x;
  memcpy(&x, &f, 4);
  if (f == 0) return 0;
  return (uint16_t)(((x >> 16) & 0x8000) | ((((x >> 23) & 0xff) - 112) << 10) | ((x >> 13) & 0x3ff));
}

TEST(reduce_sum_max_min) {
  aclrtStream s = stream_new();
  void *dst = dmalloc(PAGE), *src = dmalloc(PAGE);
  float a[4] = {1, -2, 3, 4.5f}, b[4] = {1, 5, -3, 0.25f}, out[4];
  CHECK_OK(aclrtMemcpy(dst, 16, a, 16, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_OK(aclrtMemcpy(src, 16, b, 16, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_OK(aclrtReduceAsync(dst, src, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_FLOAT, s, NULL));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtMemcpy(out, 16, dst, 16, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK(out[0] == 2 && out[1] == 3 && out[2] == 0 && out[3] == 4.75f);
  CHECK_OK(aclrtReduceAsync(dst, src, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_MAX, ACL_FLOAT, s, NULL));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtMemcpy(out, 16, dst, 16, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK(out[0] == 2 && out[1] == 5 && out[2] == 0 && out[3] == 4.75f);
  CHECK_OK(aclrtReduceAsync(dst, src, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_MIN, ACL_FLOAT, NULL, NULL));
  CHECK_OK(aclrtSynchronizeStream(NULL));
  CHECK_OK(aclrtMemcpy(out, 16, dst, 16, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK(out[0] == 1 && out[1] == 5 && out[2] == -3 && out[3] == 0.25f);
  /* integers wrap */
  int32_t ia[2] = {INT32_MAX, -7}, ib[2] = {1, 3}, io[2];
  CHECK_OK(aclrtMemcpy(dst, 8, ia, 8, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_OK(aclrtMemcpy(src, 8, ib, 8, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_OK(aclrtReduceAsync(dst, src, 8, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_INT32, s, NULL));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtMemcpy(io, 8, dst, 8, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK(io[0] == INT32_MIN && io[1] == -4);
  int8_t ca[2] = {-5, 100}, cb[2] = {3, 100}, co[2];
  CHECK_OK(aclrtMemcpy(dst, 2, ca, 2, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_OK(aclrtMemcpy(src, 2, cb, 2, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_OK(aclrtReduceAsync(dst, src, 2, ACL_RT_MEMCPY_SDMA_AUTOMATIC_MIN, ACL_INT8, s, NULL));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtMemcpy(co, 2, dst, 2, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK(co[0] == -5 && co[1] == 100);
  /* 16-bit floats: computed in float, rounded once */
  uint16_t ha[3] = {f2h(1.5f), f2h(-2), f2h(0.5f)}, hb[3] = {f2h(2.25f), f2h(1), f2h(0.5f)}, ho[3];
  CHECK_OK(aclrtMemcpy(dst, 6, ha, 6, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_OK(aclrtMemcpy(src, 6, hb, 6, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_OK(aclrtReduceAsync(dst, src, 6, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_FLOAT16, s, NULL));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtMemcpy(ho, 6, dst, 6, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK(ho[0] == f2h(3.75f) && ho[1] == f2h(-1) && ho[2] == f2h(1));
  uint16_t ba[2] = {0x3F80 /* 1 */, 0x4000 /* 2 */}, bb[2] = {0x4000, 0x3F80}, bo[2];
  CHECK_OK(aclrtMemcpy(dst, 4, ba, 4, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_OK(aclrtMemcpy(src, 4, bb, 4, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_OK(aclrtReduceAsync(dst, src, 4, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_BF16, s, NULL));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtMemcpy(bo, 4, dst, 4, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK(bo[0] == 0x4040 && bo[1] == 0x4040); /* 3 */
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(dst));
  CHECK_OK(aclrtFree(src));
  CHECK_OK(aclFinalize());
}

TEST(reduce_refusals) {
  aclrtStream s = stream_new();
  void *dst = dmalloc(PAGE), *src = dmalloc(PAGE);
  float host[4];
  CHECK_ACL(aclrtReduceAsync(NULL, src, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_FLOAT, s, NULL),
            ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtReduceAsync(dst, NULL, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_FLOAT, s, NULL),
            ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtReduceAsync(dst, src, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_FLOAT, s, dst),
            ACL_ERROR_INVALID_PARAM, "reserve");
  CHECK_MSG(aclrtReduceAsync(dst, src, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_EQUAL, ACL_FLOAT, s, NULL),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "EQUAL");
  CHECK_ACL(aclrtReduceAsync(dst, src, 16, (aclrtReduceKind)3, ACL_FLOAT, s, NULL), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_MSG(aclrtReduceAsync(dst, src, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_DOUBLE, s, NULL),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "cannot be reduced");
  CHECK_MSG(aclrtReduceAsync(dst, src, 6, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_FLOAT, s, NULL),
            ACL_ERROR_RT_PARAM_INVALID, "whole number");
  CHECK_MSG(aclrtReduceAsync(dst, host, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_FLOAT, s, NULL),
            ACL_ERROR_INVALID_PARAM, "host memory");
  CHECK_ACL(aclrtReduceAsync(dst, src, 2 * PAGE, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_FLOAT, s, NULL),
            ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtReduceAsync(dst, src, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_FLOAT, (aclrtStream)host, NULL),
            ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtReduceAsync(dst, src, 0, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_FLOAT, s, NULL)); /* nothing */
  /* the stream's device only */
  CHECK_OK(aclrtSetDevice(1));
  aclrtStream s1 = stream_new();
  CHECK_MSG(aclrtReduceAsync(dst, src, 16, ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, ACL_FLOAT, s1, NULL),
            ACL_ERROR_RT_PARAM_INVALID, "device 0");
  CHECK_OK(aclrtDestroyStream(s1));
  CHECK_OK(aclrtSetDevice(0));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(dst));
  CHECK_OK(aclrtFree(src));
  CHECK_OK(aclFinalize());
}

/* ---- random numbers ------------------------------------------------------------------ */

static void para_set(aclrtRandomParaInfo *p, const void *v, uint8_t size) {
  memset(p, 0, sizeof *p);
  memcpy(p->valueOrAddr, v, size);
  p->size = size;
}

static aclrtRandomNumTaskInfo rnd_info(aclDataType t, aclrtRandomNumFuncType f, const void *a, const void *b,
                                       uint8_t size, uint64_t seed, uint64_t num, void *counter, void *out) {
  aclrtRandomNumTaskInfo in;
  memset(&in, 0, sizeof in);
  in.dataType = t;
  in.randomNumFuncParaInfo.funcType = f;
  para_set(&in.randomNumFuncParaInfo.paramInfo.uniformDisInfo.min, a, size);
  if (b) para_set(&in.randomNumFuncParaInfo.paramInfo.uniformDisInfo.max, b, size);
  para_set(&in.randomSeed, &seed, 8);
  para_set(&in.randomNum, &num, 8);
  in.randomCounterAddr = counter;
  in.randomResultAddr = out;
  return in;
}

static void rnd_run(const aclrtRandomNumTaskInfo *in, void *host, size_t n) {
  CHECK_OK(aclrtRandomNumAsync(in, NULL, NULL));
  CHECK_OK(aclrtSynchronizeStream(NULL));
  CHECK_OK(aclrtMemcpy(host, n, in->randomResultAddr, n, ACL_MEMCPY_DEVICE_TO_HOST));
}

TEST(random_numbers_follow_their_distribution_and_seed) {
  enum { N = 20000 };
  void *out = dmalloc(N * 8), *ctr = dmalloc(PAGE);
  CHECK_OK(aclrtMemset(ctr, PAGE, 0, PAGE));
  static float f1[N], f2[N];
  float mean = 3, sd = 2;
  aclrtRandomNumTaskInfo in = rnd_info(ACL_FLOAT, ACL_RT_RANDOM_NUM_FUNC_TYPE_NORMAL_DIS, &mean, &sd, 4, 7, N, ctr, out);
  rnd_run(&in, f1, sizeof f1);
  double m = 0, v = 0;
  for (int i = 0; i < N; i++) m += f1[i];
  m /= N;
  for (int i = 0; i < N; i++) v += (f1[i] - m) * (f1[i] - m);
  v /= N;
  CHECK(fabs(m - 3) < 0.1 && fabs(sqrt(v) - 2) < 0.1);
  rnd_run(&in, f2, sizeof f2); /* same seed and offset: same numbers */
  CHECK(memcmp(f1, f2, sizeof f1) == 0);
  uint64_t off = 1;
  CHECK_OK(aclrtMemcpy(ctr, 8, &off, 8, ACL_MEMCPY_HOST_TO_DEVICE));
  rnd_run(&in, f2, sizeof f2); /* offset 1: the same stream, one block on */
  CHECK(memcmp(f1 + 1, f2, sizeof f1 - sizeof *f1) == 0);
  off = 0;
  CHECK_OK(aclrtMemcpy(ctr, 8, &off, 8, ACL_MEMCPY_HOST_TO_DEVICE));
  in = rnd_info(ACL_FLOAT, ACL_RT_RANDOM_NUM_FUNC_TYPE_NORMAL_DIS, &mean, &sd, 4, 8, N, ctr, out);
  rnd_run(&in, f2, sizeof f2); /* another seed: other numbers */
  CHECK(memcmp(f1, f2, sizeof f1) != 0);
  /* truncated: within two standard deviations */
  in = rnd_info(ACL_FLOAT, ACL_RT_RANDOM_NUM_FUNC_TYPE_TRUNCATED_NORMAL_DIS, &mean, &sd, 4, 7, N, ctr, out);
  rnd_run(&in, f1, sizeof f1);
  for (int i = 0; i < N; i++) CHECK(f1[i] >= -1.0001f && f1[i] <= 7.0001f);
  /* uniform floats in [min, max) */
  float lo = -1, hi = 2;
  in = rnd_info(ACL_FLOAT, ACL_RT_RANDOM_NUM_FUNC_TYPE_UNIFORM_DIS, &lo, &hi, 4, 1, N, ctr, out);
  rnd_run(&in, f1, sizeof f1);
  m = 0;
  for (int i = 0; i < N; i++) {
    CHECK(f1[i] >= -1 && f1[i] < 2);
    m += f1[i];
  }
  CHECK(fabs(m / N - 0.5) < 0.05);
  /* uniform integers in [min, max), every value seen */
  int32_t ilo = 1, ihi = 100;
  static int32_t iv[N];
  in = rnd_info(ACL_INT32, ACL_RT_RANDOM_NUM_FUNC_TYPE_UNIFORM_DIS, &ilo, &ihi, 4, 2, N, ctr, out);
  rnd_run(&in, iv, sizeof iv);
  int seen[100] = {0};
  for (int i = 0; i < N; i++) {
    CHECK(iv[i] >= 1 && iv[i] < 100);
    seen[iv[i]] = 1;
  }
  for (int k = 1; k < 100; k++) CHECK(seen[k]);
  int64_t llo = -5, lhi = 5;
  static int64_t lv[N];
  in = rnd_info(ACL_INT64, ACL_RT_RANDOM_NUM_FUNC_TYPE_UNIFORM_DIS, &llo, &lhi, 8, 2, N, ctr, out);
  rnd_run(&in, lv, sizeof lv);
  for (int i = 0; i < N; i++) CHECK(lv[i] >= -5 && lv[i] < 5);
  uint64_t ulo = 10, uhi = 12;
  in = rnd_info(ACL_UINT64, ACL_RT_RANDOM_NUM_FUNC_TYPE_UNIFORM_DIS, &ulo, &uhi, 8, 2, N, ctr, out);
  rnd_run(&in, lv, sizeof lv);
  for (int i = 0; i < N; i++) CHECK((uint64_t)lv[i] == 10 || (uint64_t)lv[i] == 11);
  /* 16-bit floats: fp16 uniform in [1, 2], bf16 normal */
  uint16_t hlo = 0x3C00, hhi = 0x4000, hv[N];
  in = rnd_info(ACL_FLOAT16, ACL_RT_RANDOM_NUM_FUNC_TYPE_UNIFORM_DIS, &hlo, &hhi, 2, 3, N, ctr, out);
  rnd_run(&in, hv, sizeof hv);
  for (int i = 0; i < N; i++) CHECK(hv[i] >= 0x3C00 && hv[i] <= 0x4000);
  uint16_t bmean = 0x3F80, bsd = 0x4000;
  in = rnd_info(ACL_BF16, ACL_RT_RANDOM_NUM_FUNC_TYPE_TRUNCATED_NORMAL_DIS, &bmean, &bsd, 2, 3, N, ctr, out);
  rnd_run(&in, hv, sizeof hv);
  for (int i = 0; i < N; i++) {
    uint32_t bits = (uint32_t)hv[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    CHECK(f >= -3.05f && f <= 5.05f);
  }
  /* dropout bitmask: a bit per element, 1 (kept) with probability 1 - ratio */
  float ratio = 0.25f;
  uint8_t bits[N / 8];
  in = rnd_info(ACL_FLOAT, ACL_RT_RANDOM_NUM_FUNC_TYPE_DROPOUT_BITMASK, &ratio, NULL, 4, 4, N, ctr, out);
  rnd_run(&in, bits, sizeof bits);
  int kept = 0;
  for (int i = 0; i < N; i++) kept += (bits[i / 8] >> (i % 8)) & 1;
  CHECK(fabs((double)kept / N - 0.75) < 0.02);
  CHECK_OK(aclrtFree(out));
  CHECK_OK(aclrtFree(ctr));
  CHECK_OK(aclFinalize());
}

TEST(random_parameters_by_address) {
  void *out = dmalloc(PAGE), *ctr = dmalloc(PAGE), *par = dmalloc(PAGE);
  CHECK_OK(aclrtMemset(ctr, PAGE, 0, PAGE));
  int32_t vals[2] = {10, 20};
  uint64_t seed = 9, num = 64;
  CHECK_OK(aclrtMemcpy(par, 8, vals, 8, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_OK(aclrtMemcpy((char *)par + 8, 8, &seed, 8, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_OK(aclrtMemcpy((char *)par + 16, 8, &num, 8, ACL_MEMCPY_HOST_TO_DEVICE));
  aclrtRandomNumTaskInfo byval = rnd_info(ACL_INT32, ACL_RT_RANDOM_NUM_FUNC_TYPE_UNIFORM_DIS, &vals[0], &vals[1], 4,
                                          seed, num, ctr, out);
  int32_t a[64], b[64];
  rnd_run(&byval, a, sizeof a);
  aclrtRandomNumTaskInfo byaddr = byval;
  aclrtRandomParaInfo *ps[4] = {&byaddr.randomNumFuncParaInfo.paramInfo.uniformDisInfo.min,
                                &byaddr.randomNumFuncParaInfo.paramInfo.uniformDisInfo.max, &byaddr.randomSeed,
                                &byaddr.randomNum};
  size_t offs[4] = {0, 4, 8, 16};
  for (int i = 0; i < 4; i++) {
    uint64_t addr = (uint64_t)(uintptr_t)((char *)par + offs[i]);
    memset(ps[i], 0, sizeof *ps[i]);
    ps[i]->isAddr = 1;
    memcpy(ps[i]->valueOrAddr, &addr, 8);
    ps[i]->size = 8;
  }
  CHECK_OK(aclrtMemset(out, PAGE, 0, PAGE));
  rnd_run(&byaddr, b, sizeof b);
  CHECK(memcmp(a, b, sizeof a) == 0);
  CHECK_OK(aclrtFree(out));
  CHECK_OK(aclrtFree(ctr));
  CHECK_OK(aclrtFree(par));
  CHECK_OK(aclFinalize());
}

TEST(random_refusals) {
  void *out = dmalloc(PAGE), *ctr = dmalloc(PAGE);
  float mean = 0, sd = 1;
  int32_t ilo = 5, ihi = 5;
  aclrtRandomNumTaskInfo in = rnd_info(ACL_FLOAT, ACL_RT_RANDOM_NUM_FUNC_TYPE_NORMAL_DIS, &mean, &sd, 4, 1, 16, ctr, out);
  CHECK_ACL(aclrtRandomNumAsync(NULL, NULL, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtRandomNumAsync(&in, NULL, out), ACL_ERROR_INVALID_PARAM, "reserve");
  aclrtRandomNumTaskInfo bad = in;
  bad.dataType = ACL_DOUBLE;
  CHECK_MSG(aclrtRandomNumAsync(&bad, NULL, NULL), ACL_ERROR_RT_PARAM_INVALID, "dataType");
  bad = in;
  bad.dataType = ACL_INT32;
  CHECK_MSG(aclrtRandomNumAsync(&bad, NULL, NULL), ACL_ERROR_RT_PARAM_INVALID, "floating-point");
  bad = in;
  bad.randomNumFuncParaInfo.funcType = (aclrtRandomNumFuncType)4;
  CHECK_ACL(aclrtRandomNumAsync(&bad, NULL, NULL), ACL_ERROR_RT_PARAM_INVALID);
  bad = in;
  bad.randomResultAddr = NULL;
  CHECK_ACL(aclrtRandomNumAsync(&bad, NULL, NULL), ACL_ERROR_INVALID_PARAM);
  bad = in;
  bad.randomCounterAddr = NULL;
  CHECK_ACL(aclrtRandomNumAsync(&bad, NULL, NULL), ACL_ERROR_INVALID_PARAM);
  bad = in;
  bad.randomNumFuncParaInfo.paramInfo.normalDisInfo.stddev.size = 2;
  CHECK_MSG(aclrtRandomNumAsync(&bad, NULL, NULL), ACL_ERROR_RT_PARAM_INVALID, "size");
  bad = in;
  bad.randomSeed.isAddr = 2;
  CHECK_MSG(aclrtRandomNumAsync(&bad, NULL, NULL), ACL_ERROR_RT_PARAM_INVALID, "isAddr");
  bad = in;
  float host[16];
  bad.randomResultAddr = host;
  CHECK_MSG(aclrtRandomNumAsync(&bad, NULL, NULL), ACL_ERROR_INVALID_PARAM, "host memory");
  uint64_t big = PAGE; /* PAGE floats do not fit in a page */
  para_set(&bad.randomNum, &big, 8);
  bad.randomResultAddr = out;
  CHECK_ACL(aclrtRandomNumAsync(&bad, NULL, NULL), ACL_ERROR_INVALID_PARAM);
  bad = rnd_info(ACL_INT32, ACL_RT_RANDOM_NUM_FUNC_TYPE_UNIFORM_DIS, &ilo, &ihi, 4, 1, 16, ctr, out);
  CHECK_MSG(aclrtRandomNumAsync(&bad, NULL, NULL), ACL_ERROR_RT_PARAM_INVALID, "min");
  CHECK_OK(aclrtFree(out));
  CHECK_OK(aclrtFree(ctr));
  CHECK_OK(aclFinalize());
}

/* ---- threads, fork, finalize ------------------------------------------------------------ */

static void *config_churn(void *p) {
  (void)p;
  for (int i = 0; i < 50; i++) {
    aclrtStream s;
    CHECK_OK(aclrtCreateStreamWithConfig(&s, (uint32_t)i, ACL_STREAM_FAST_LAUNCH));
    CHECK_OK(aclrtSetStreamFailureMode(s, (uint64_t)(i & 1)));
    void *d = dmalloc(PAGE);
    CHECK_OK(aclrtValueWrite(d, (uint64_t)i, 0, s));
    CHECK_OK(aclrtValueWait(d, (uint64_t)i, ACL_STREAM_WAIT_VALUE_EQ, s));
    if (i % 3 == 0) CHECK_OK(aclrtStreamAbort(s));
    aclrtStreamStatus st;
    CHECK_OK(aclrtStreamQuery(s, &st));
    CHECK_OK(aclrtSynchronizeStream(s));
    CHECK_OK(aclrtDestroyStream(s));
    CHECK_OK(aclrtFree(d));
  }
  return NULL;
}

TEST(many_threads_configure_and_abort_at_once) {
  pthread_t t[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, config_churn, NULL) == 0);
  for (int i = 0; i < 4; i++) CHECK(pthread_join(t[i], NULL) == 0);
  CHECK_OK(aclFinalize());
}

static int fork_child(void *arg) {
  aclrtStream parent = *(aclrtStream *)arg;
  uint32_t f;
  CHECK_ACL(aclrtStreamGetFlags(parent, &f), ACL_ERROR_INVALID_PARAM); /* the parent's streams are not ours */
  CHECK_OK(aclrtRegStreamStateCallback("a", state_cb, NULL)); /* the parent's registrations did not come along */
  CHECK_OK(aclrtRegStreamStateCallback("a", NULL, NULL));
  aclrtStream s = stream_new();
  void *d = dmalloc(PAGE);
  CHECK_OK(aclrtValueWrite(d, 3, 0, s));
  CHECK_OK(aclrtValueWait(d, 3, ACL_STREAM_WAIT_VALUE_EQ, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(a_forked_child_starts_clean) {
  int one = 1;
  CHECK_OK(aclrtRegStreamStateCallback("a", state_cb, &one));
  aclrtStream s;
  CHECK_OK(aclrtCreateStreamWithConfig(&s, 1, ACL_STREAM_FAST_SYNC));
  void *d = dmalloc(PAGE);
  CHECK_OK(aclrtValueWait(d, 1, ACL_STREAM_WAIT_VALUE_EQ, s)); /* blocked while the child is made */
  CHECK_EQ(th_wait(th_spawn(fork_child, &s)), 0);
  CHECK_OK(aclrtValueWrite(d, 1, 0, NULL));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

TEST(finalize_releases_everything) {
  int one = 1;
  CHECK_OK(aclrtRegStreamStateCallback("a", state_cb, &one));
  aclrtStream s;
  CHECK_OK(aclrtCreateStreamWithConfig(&s, 1, 0));
  CHECK_OK(aclrtSetStreamFailureMode(s, ACL_STOP_ON_FAILURE));
  void *d = dmalloc(PAGE);
  CHECK_OK(aclrtValueWait(d, 1, ACL_STREAM_WAIT_VALUE_EQ, s));
  CHECK_OK(aclrtValueWrite(d, 1, 0, NULL)); /* lets the wait go, so finalize drains */
  CHECK_OK(aclFinalize());
  uint32_t f;
  CHECK_ACL(aclrtStreamGetFlags(s, &f), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtRegStreamStateCallback("a", state_cb, &one)); /* gone with the rest */
  CHECK_OK(aclFinalize());
}

TEST(finalize_never_hangs_on_a_wait_nothing_satisfies) {
  aclrtStream s = stream_new(), t = stream_new();
  void *d = dmalloc(PAGE);
  CHECK_OK(aclrtValueWait(d, 1, ACL_STREAM_WAIT_VALUE_EQ, s));
  CHECK_OK(aclrtMemsetAsync(d, PAGE, 1, PAGE, s)); /* queued work behind it still runs */
  aclrtNotify n;
  CHECK_OK(aclrtCreateNotify(&n, 0));
  CHECK_OK(aclrtWaitAndResetNotify(n, t, 0));
  CHECK_OK(aclrtValueWait(d, 7, ACL_STREAM_WAIT_VALUE_EQ, t)); /* queued behind a blocked wait */
  double t0 = now_s();
  CHECK_OK(aclFinalize());
  CHECK(now_s() - t0 < 5);
}
