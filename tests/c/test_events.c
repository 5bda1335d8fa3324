/* Events and IPC events: CANN's rules for each call, stream order proven
 * with work long enough that a missing wait would be seen, and IPC events
 * between real processes (waits both ways, a recorder that dies, forged and
 * damaged handles, many live events). */
#include "ipc_util.h"

/* Big enough that queued work takes tens of ms (a missing wait reads old
 * bytes); smaller under valgrind, where everything is slow anyway. */
static size_t big(void) { return under_valgrind() ? 16 * MiB : 256 * MiB; }

static aclrtEvent ev_new(uint32_t flag) {
  aclrtEvent e = NULL;
  CHECK_OK(aclrtCreateEventExWithFlag(&e, flag));
  CHECK(e != NULL);
  return e;
}

/* ---- creation rules ------------------------------------------------------------ */

TEST(create_flags_follow_cann) {
  aclrtEvent e;
  CHECK_ACL(aclrtCreateEvent(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtCreateEventWithFlag(NULL, ACL_EVENT_SYNC), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtCreateEventExWithFlag(NULL, ACL_EVENT_SYNC), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtCreateEventWithFlag(&e, ACL_EVENT_IPC), ACL_ERROR_RT_PARAM_INVALID, "aclrtCreateEventExWithFlag");
  CHECK_ACL(aclrtCreateEventWithFlag(&e, 0), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtCreateEventWithFlag(&e, 0x80), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_MSG(aclrtCreateEventWithFlag(&e, ACL_EVENT_DEVICE_USE_ONLY | ACL_EVENT_SYNC), ACL_ERROR_RT_PARAM_INVALID,
            "cannot be combined");
  CHECK_ACL(aclrtCreateEventWithFlag(&e, ACL_EVENT_EXTERNAL | ACL_EVENT_TIME_LINE), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_MSG(aclrtCreateEventExWithFlag(&e, ACL_EVENT_IPC | ACL_EVENT_SYNC), ACL_ERROR_RT_PARAM_INVALID, "alone");
  CHECK_ACL(aclrtCreateEventExWithFlag(&e, 0), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtCreateEventExWithFlag(&e, ACL_EVENT_DEVICE_USE_ONLY), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtCreateEventExWithFlag(&e, ACL_EVENT_EXTERNAL), ACL_ERROR_RT_PARAM_INVALID);
  uint32_t ok_with[] = {ACL_EVENT_SYNC, ACL_EVENT_TIME_LINE, ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE,
                        ACL_EVENT_SYNC | ACL_EVENT_CAPTURE_STREAM_PROGRESS, ACL_EVENT_DEVICE_USE_ONLY,
                        ACL_EVENT_EXTERNAL};
  for (size_t i = 0; i < sizeof ok_with / sizeof *ok_with; i++) {
    CHECK_OK(aclrtCreateEventWithFlag(&e, ok_with[i]));
    CHECK_OK(aclrtDestroyEvent(e));
  }
  uint32_t ok_ex[] = {ACL_EVENT_SYNC, ACL_EVENT_TIME_LINE, ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE,
                      ACL_EVENT_CAPTURE_STREAM_PROGRESS, ACL_EVENT_IPC};
  for (size_t i = 0; i < sizeof ok_ex / sizeof *ok_ex; i++) CHECK_OK(aclrtDestroyEvent(ev_new(ok_ex[i])));
  CHECK_OK(aclFinalize());
}

TEST(handles_are_checked) {
  int not_an_event = 0;
  aclrtEventRecordedStatus st;
  aclrtEvent e = ev_new(ACL_EVENT_SYNC);
  CHECK_OK(aclrtDestroyEvent(e));
  CHECK_MSG(aclrtDestroyEvent(e), ACL_ERROR_INVALID_PARAM, "not a live event");
  CHECK_ACL(aclrtDestroyEvent(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtRecordEvent(&not_an_event, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtRecordEvent(NULL, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtQueryEventStatus(e, &st), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtSynchronizeEvent((aclrtEvent)(uintptr_t)0xdeadbeef), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtStreamWaitEvent(NULL, &not_an_event), ACL_ERROR_INVALID_PARAM);
  aclrtEvent live = ev_new(ACL_EVENT_SYNC);
  CHECK_ACL(aclrtQueryEventStatus(live, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtRecordEvent(live, &not_an_event), ACL_ERROR_INVALID_PARAM); /* a made-up stream */
  CHECK_ACL(aclrtStreamWaitEvent(&not_an_event, live), ACL_ERROR_INVALID_PARAM);
  float ms;
  CHECK_ACL(aclrtEventElapsedTime(NULL, live, live), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtEventElapsedTime(&ms, NULL, live), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtEventElapsedTime(&ms, live, &not_an_event), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtDestroyEvent(live));
  CHECK_OK(aclFinalize());
}

/* ---- status ---------------------------------------------------------------------- */

TEST(status_before_and_after_a_record) {
  aclrtEventRecordedStatus st;
  aclrtEvent legacy, ex = ev_new(ACL_EVENT_SYNC);
  CHECK_OK(aclrtCreateEvent(&legacy));
  CHECK_OK(aclrtQueryEventStatus(legacy, &st));
  CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_NOT_READY); /* CANN: a legacy event is not ready until recorded */
  CHECK_OK(aclrtQueryEventStatus(ex, &st));
  CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_COMPLETE); /* an Ex event holds no work until recorded */
  CHECK_OK(aclrtSynchronizeEvent(legacy));          /* never recorded: nothing to wait for */
  size_t n = big();
  void *a = dmalloc(n);
  aclrtStream s = stream_new();
  aclrtNotify gate = gate_new(s);
  CHECK_OK(aclrtMemsetAsync(a, n, 1, n, s));
  CHECK_OK(aclrtMemsetAsync(a, n, 2, n, s));
  CHECK_OK(aclrtRecordEvent(legacy, s));
  CHECK_OK(aclrtRecordEvent(ex, s));
  CHECK_OK(aclrtQueryEventStatus(ex, &st));
  CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_NOT_READY); /* the memsets wait behind the gate */
  CHECK_OK(aclrtRecordNotify(gate, NULL));
  CHECK_OK(aclrtSynchronizeEvent(ex));
  CHECK_EQ(((unsigned char *)a)[n - 1], 2);
  CHECK_OK(aclrtQueryEventStatus(ex, &st));
  CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_COMPLETE);
  CHECK_OK(aclrtSynchronizeEvent(legacy));
  CHECK_OK(aclrtQueryEventStatus(legacy, &st));
  CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_COMPLETE);
  CHECK_OK(aclrtDestroyNotify(gate));
  CHECK_OK(aclrtDestroyEvent(legacy));
  CHECK_OK(aclrtDestroyEvent(ex));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(a));
  CHECK_OK(aclFinalize());
}

/* ---- stream order ------------------------------------------------------------------- */

TEST(stream_wait_holds_back_later_work) {
  size_t n = big();
  unsigned char *a = dmalloc(n);
  unsigned char host[PAGE];
  CHECK_OK(aclrtMemset(a, n, 0, n));
  aclrtStream producer = stream_new(), consumer = stream_new();
  aclrtEvent e = ev_new(ACL_EVENT_SYNC);
  for (int round = 1; round <= 3; round++) {
    memset(host, 0xff, sizeof host);
    CHECK_OK(aclrtMemsetAsync(a, n, round, n, producer)); /* tens of ms of work */
    CHECK_OK(aclrtRecordEvent(e, producer));
    CHECK_OK(aclrtStreamWaitEvent(consumer, e));
    /* the last page, the last one the memset writes */
    CHECK_OK(aclrtMemcpyAsync(host, PAGE, a + n - PAGE, PAGE, ACL_MEMCPY_DEVICE_TO_HOST, consumer));
    CHECK_OK(aclrtSynchronizeStream(consumer));
    for (size_t i = 0; i < PAGE; i++) CHECK_EQ(host[i], round);
  }
  CHECK_OK(aclrtDestroyEvent(e));
  CHECK_OK(aclrtDestroyStream(producer));
  CHECK_OK(aclrtDestroyStream(consumer));
  CHECK_OK(aclrtFree(a));
  CHECK_OK(aclFinalize());
}

TEST(a_wait_keeps_the_record_it_saw) {
  /* CANN: a later record does not move a wait already issued */
  size_t n = big();
  unsigned char *a = dmalloc(n), *b = dmalloc(PAGE);
  aclrtStream s1 = stream_new(), s2 = stream_new(), s3 = stream_new();
  aclrtEvent e = ev_new(ACL_EVENT_SYNC);
  CHECK_OK(aclrtRecordEvent(e, s1)); /* completes at once: s1 is idle */
  CHECK_OK(aclrtSynchronizeEvent(e));
  CHECK_OK(aclrtStreamWaitEvent(s2, e)); /* sees the completed record: nothing to hold */
  CHECK_OK(aclrtMemsetAsync(a, n, 9, n, s1));
  CHECK_OK(aclrtRecordEvent(e, s1)); /* a new record, after a long memset */
  CHECK_OK(aclrtMemsetAsync(b, PAGE, 4, PAGE, s2));
  CHECK_OK(aclrtSynchronizeStream(s2)); /* not held back by the later record */
  CHECK_EQ(b[0], 4);
  CHECK_OK(aclrtStreamWaitEvent(s3, e)); /* this one waits for the memset */
  unsigned char host;
  CHECK_OK(aclrtMemcpyAsync(&host, 1, a + n - 1, 1, ACL_MEMCPY_DEVICE_TO_HOST, s3));
  CHECK_OK(aclrtSynchronizeStream(s3));
  CHECK_EQ(host, 9);
  CHECK_OK(aclrtDestroyEvent(e));
  CHECK_OK(aclrtDestroyStream(s1));
  CHECK_OK(aclrtDestroyStream(s2));
  CHECK_OK(aclrtDestroyStream(s3));
  CHECK_OK(aclrtFree(a));
  CHECK_OK(aclrtFree(b));
  CHECK_OK(aclFinalize());
}

TEST(stream_wait_rules) {
  aclrtStream s = stream_new();
  aclrtEvent timing = ev_new(ACL_EVENT_TIME_LINE), legacy, dev_only, external;
  CHECK_MSG(aclrtStreamWaitEvent(s, timing), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "ACL_EVENT_SYNC");
  CHECK_OK(aclrtCreateEventWithFlag(&legacy, ACL_EVENT_SYNC));
  CHECK_MSG(aclrtStreamWaitEvent(s, legacy), ACL_ERROR_RT_PARAM_INVALID, "not been recorded");
  CHECK_OK(aclrtStreamWaitEvent(s, ev_new(ACL_EVENT_SYNC))); /* Ex, never recorded: no wait (leaked on purpose: finalize frees it) */
  CHECK_ACL(aclrtStreamWaitEventWithTimeout(s, legacy, -1), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_OK(aclrtCreateEventWithFlag(&dev_only, ACL_EVENT_DEVICE_USE_ONLY));
  CHECK_MSG(aclrtRecordEvent(dev_only, s), ACL_ERROR_RT_PARAM_INVALID, "DEVICE_USE_ONLY");
  CHECK_OK(aclrtCreateEventWithFlag(&external, ACL_EVENT_EXTERNAL));
  CHECK_MSG(aclrtRecordEvent(external, s), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "capture");
  /* an event belongs to its device: streams of other devices neither record nor wait on it */
  aclrtEvent on0 = ev_new(ACL_EVENT_SYNC);
  CHECK_OK(aclrtRecordEvent(on0, NULL));
  CHECK_OK(aclrtSetDevice(1));
  aclrtStream s1 = stream_new();
  CHECK_MSG(aclrtRecordEvent(on0, s1), ACL_ERROR_RT_STREAM_CONTEXT, "device 0");
  CHECK_MSG(aclrtStreamWaitEvent(s1, on0), ACL_ERROR_RT_STREAM_CONTEXT, "IPC event");
  CHECK_OK(aclrtSynchronizeEvent(on0)); /* the host may wait on any device's event */
  CHECK_OK(aclrtDestroyStream(s1));
  CHECK_OK(aclrtSetDevice(0));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclFinalize()); /* every event left is released */
}

TEST(failed_work_fails_the_event) {
  void *victim = dmalloc(PAGE);
  char h[16];
  size_t n = big();
  void *a = dmalloc(n);
  aclrtStream s = stream_new();
  aclrtEvent e = ev_new(ACL_EVENT_SYNC);
  CHECK_OK(aclrtMemsetAsync(a, n, 1, n, s));
  CHECK_OK(aclrtMemcpyAsync(h, sizeof h, victim, sizeof h, ACL_MEMCPY_DEVICE_TO_HOST, s));
  CHECK_OK(aclrtFree(victim)); /* before the queued copy runs */
  CHECK_OK(aclrtRecordEvent(e, s));
  CHECK_MSG(aclrtSynchronizeEvent(e), ACL_ERROR_INVALID_PARAM, "never written");
  aclrtEventRecordedStatus st;
  CHECK_OK(aclrtQueryEventStatus(e, &st));
  CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_NOT_READY); /* CANN: "its execution failed" reads as not ready */
  CHECK_MSG(aclrtSynchronizeStream(s), ACL_ERROR_INVALID_PARAM, "not allocated");
  CHECK_OK(aclrtRecordEvent(e, s)); /* reported: the stream works again */
  CHECK_OK(aclrtSynchronizeEvent(e));
  CHECK_OK(aclrtDestroyEvent(e));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(a));
  CHECK_OK(aclFinalize());
}

TEST(synchronize_with_timeout) {
  size_t n = big();
  void *a = dmalloc(n);
  aclrtStream s = stream_new();
  aclrtEvent e = ev_new(ACL_EVENT_SYNC);
  CHECK_ACL(aclrtSynchronizeEventWithTimeout(e, 0), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtSynchronizeEventWithTimeout(e, -2), ACL_ERROR_RT_PARAM_INVALID);
  aclrtNotify gate = gate_new(s);
  for (int i = 0; i < 8; i++) CHECK_OK(aclrtMemsetAsync(a, n, i, n, s));
  CHECK_OK(aclrtRecordEvent(e, s));
  CHECK_MSG(aclrtSynchronizeEventWithTimeout(e, 1), ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, "1 ms");
  CHECK_OK(aclrtRecordNotify(gate, NULL));
  CHECK_OK(aclrtSynchronizeEventWithTimeout(e, -1));
  CHECK_OK(aclrtSynchronizeEventWithTimeout(e, 1)); /* complete now */
  CHECK_OK(aclrtWaitAndResetNotify(gate, s, 0));
  for (int i = 0; i < 8; i++) CHECK_OK(aclrtMemsetAsync(a, n, i, n, s));
  CHECK_MSG(aclrtSynchronizeStreamWithTimeout(s, 1), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, "1 ms");
  CHECK_ACL(aclrtSynchronizeStreamWithTimeout(s, -2), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtRecordNotify(gate, NULL));
  CHECK_OK(aclrtSynchronizeStreamWithTimeout(s, -1));
  CHECK_OK(aclrtDestroyNotify(gate));
  CHECK_OK(aclrtDestroyEvent(e));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(a));
  CHECK_OK(aclFinalize());
}

TEST(elapsed_time) {
  size_t n = big();
  void *a = dmalloc(n);
  aclrtStream s = stream_new();
  aclrtEvent t0 = ev_new(ACL_EVENT_TIME_LINE), t1 = ev_new(ACL_EVENT_TIME_LINE | ACL_EVENT_SYNC);
  aclrtEvent plain = ev_new(ACL_EVENT_SYNC), ipc = ev_new(ACL_EVENT_IPC), legacy;
  CHECK_OK(aclrtCreateEvent(&legacy)); /* CANN's default event keeps time */
  float ms = -1;
  CHECK_MSG(aclrtEventElapsedTime(&ms, t0, t1), ACL_ERROR_RT_INTERNAL_ERROR, "never recorded");
  CHECK_OK(aclrtRecordEvent(t0, s));
  CHECK_OK(aclrtMemsetAsync(a, n, 3, n, s));
  CHECK_OK(aclrtRecordEvent(t1, s));
  CHECK_OK(aclrtRecordEvent(legacy, s));
  CHECK_OK(aclrtRecordEvent(plain, s));
  CHECK_OK(aclrtRecordEvent(ipc, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtEventElapsedTime(&ms, t0, t1));
  CHECK(ms > 0.0f && ms < 60000.0f);
  float ms2 = -1;
  CHECK_OK(aclrtEventElapsedTime(&ms2, t0, legacy));
  CHECK(ms2 >= ms);
  CHECK_MSG(aclrtEventElapsedTime(&ms, t0, plain), ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, "TIME_LINE");
  CHECK_MSG(aclrtEventElapsedTime(&ms, ipc, t1), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "IPC event");
  CHECK_OK(aclFinalize());
}

TEST(destroy_with_work_pending_is_safe) {
  size_t n = big();
  void *a = dmalloc(n);
  aclrtStream s1 = stream_new(), s2 = stream_new();
  for (int i = 0; i < 50; i++) {
    aclrtEvent e = ev_new(i % 2 ? ACL_EVENT_SYNC : ACL_EVENT_IPC);
    CHECK_OK(aclrtMemsetAsync(a, n / 16, i, n / 16, s1));
    CHECK_OK(aclrtRecordEvent(e, s1));
    CHECK_OK(aclrtStreamWaitEvent(s2, e));
    CHECK_OK(aclrtDestroyEvent(e)); /* CANN: does not block; the queued work keeps it */
  }
  CHECK_OK(aclrtSynchronizeStream(s2));
  CHECK_OK(aclrtSynchronizeStream(s1));
  CHECK_OK(aclrtDestroyStream(s1));
  CHECK_OK(aclrtDestroyStream(s2));
  CHECK_OK(aclrtFree(a));
  CHECK_OK(aclFinalize());
}

/* ---- IPC events -------------------------------------------------------------------- */

TEST(ipc_handle_rules) {
  aclrtIpcEventHandle h, h2;
  aclrtEvent plain = ev_new(ACL_EVENT_SYNC), ipc = ev_new(ACL_EVENT_IPC), opened;
  CHECK_MSG(aclrtIpcGetEventHandle(plain, &h), ACL_ERROR_RT_PARAM_INVALID, "ACL_EVENT_IPC");
  CHECK_ACL(aclrtIpcGetEventHandle(ipc, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtIpcGetEventHandle(ipc, &h));
  CHECK_OK(aclrtIpcGetEventHandle(ipc, &h2));
  CHECK(memcmp(&h, &h2, sizeof h) == 0); /* one handle per event */
  CHECK_ACL(aclrtIpcOpenEventHandle(h, NULL), ACL_ERROR_INVALID_PARAM);
  /* damaged handles */
  aclrtIpcEventHandle bad = h;
  bad.reserved[63] = 1;
  CHECK_MSG(aclrtIpcOpenEventHandle(bad, &opened), ACL_ERROR_INVALID_PARAM, "byte 63");
  bad = h;
  bad.reserved[0] = 'x';
  CHECK_ACL(aclrtIpcOpenEventHandle(bad, &opened), ACL_ERROR_INVALID_PARAM);
  memset(&bad, 0, sizeof bad);
  CHECK_ACL(aclrtIpcOpenEventHandle(bad, &opened), ACL_ERROR_INVALID_PARAM);
  /* a memory key is not an event handle, nor the other way round */
  char key[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  memset(&bad, 0, sizeof bad);
  memcpy(bad.reserved, key, strlen(key));
  CHECK_MSG(aclrtIpcOpenEventHandle(bad, &opened), ACL_ERROR_INVALID_PARAM, "IPC memory key");
  char hkey[KEYLEN] = {0};
  memcpy(hkey, h.reserved, KEY_CHARS);
  void *q;
  CHECK_MSG(aclrtIpcMemImportByKey(&q, hkey, 0), ACL_ERROR_INVALID_PARAM, "IPC event handle");
  CHECK_MSG(aclrtIpcMemClose(hkey), ACL_ERROR_INVALID_PARAM, "IPC event handle");
  /* its own handle, opened in the same process: one state */
  CHECK_OK(aclrtIpcOpenEventHandle(h, &opened));
  CHECK_MSG(aclrtIpcGetEventHandle(opened, &h2), ACL_ERROR_RT_PARAM_INVALID, "creator");
  CHECK_OK(aclrtRecordEvent(opened, NULL));
  CHECK_OK(aclrtSynchronizeEvent(ipc));
  aclrtEventRecordedStatus st;
  CHECK_OK(aclrtQueryEventStatus(ipc, &st));
  CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_COMPLETE);
  float ms;
  CHECK_ACL(aclrtEventElapsedTime(&ms, opened, opened), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  CHECK_OK(aclrtDestroyEvent(opened));
  CHECK_OK(aclrtDestroyEvent(ipc));
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

/* Consumer: opens the memory and the event, waits on a stream, copies the
 * last page out, and checks that the producer's queued memset is all there. */
static int consumer_child(chan *c, void *arg) {
  size_t n = *(size_t *)arg;
  char key[KEYLEN];
  aclrtIpcEventHandle h;
  from_parent(c, key, KEYLEN);
  from_parent(c, &h, sizeof h);
  unsigned char *p;
  aclrtEvent e;
  CHECK_OK(aclrtIpcMemImportByKey((void **)&p, key, 0));
  CHECK_OK(aclrtIpcOpenEventHandle(h, &e));
  aclrtStream s = stream_new();
  for (int round = 1; round <= 3; round++) {
    CHECK_EQ(recv_int(c->down[0]), round); /* the producer queued its work and recorded */
    unsigned char host[PAGE];
    CHECK_OK(aclrtStreamWaitEvent(s, e));
    CHECK_OK(aclrtMemcpyAsync(host, PAGE, p + n - PAGE, PAGE, ACL_MEMCPY_DEVICE_TO_HOST, s));
    CHECK_OK(aclrtSynchronizeStream(s));
    for (size_t i = 0; i < PAGE; i++) CHECK_EQ(host[i], 0x40 + round);
    /* and the other way: we record, the producer waits */
    CHECK_OK(aclrtMemsetAsync(p, n, 0x50 + round, n, s));
    CHECK_OK(aclrtRecordEvent(e, s));
    send_int(c->up[1], round);
    CHECK_EQ(recv_int(c->down[0]), -round); /* the producer saw our bytes */
  }
  CHECK_OK(aclrtDestroyEvent(e));
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(ipc_event_orders_two_processes_both_ways) {
  size_t n = big();
  char key[KEYLEN];
  unsigned char *p = export_new(n, EXPORT_ANY, key);
  CHECK_OK(aclrtMemset(p, n, 0, n));
  aclrtEvent e = ev_new(ACL_EVENT_IPC);
  aclrtIpcEventHandle h;
  CHECK_OK(aclrtIpcGetEventHandle(e, &h));
  aclrtStream s = stream_new();
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, consumer_child, &n);
  to_child(&c, key, KEYLEN);
  to_child(&c, &h, sizeof h);
  for (int round = 1; round <= 3; round++) {
    CHECK_OK(aclrtMemsetAsync(p, n, 0x40 + round, n, s)); /* tens of ms, queued */
    CHECK_OK(aclrtRecordEvent(e, s));
    send_int(c.down[1], round); /* at once: the consumer's wait must do the waiting */
    CHECK_EQ(recv_int(c.up[0]), round);
    unsigned char host;
    CHECK_OK(aclrtStreamWaitEvent(s, e));
    CHECK_OK(aclrtMemcpyAsync(&host, 1, p + n - 1, 1, ACL_MEMCPY_DEVICE_TO_HOST, s));
    CHECK_OK(aclrtSynchronizeStream(s));
    CHECK_EQ(host, 0x50 + round);
    send_int(c.down[1], -round);
  }
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclrtDestroyEvent(e));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

/* Queues on s a wait that nothing will release: work queued behind it never
 * runs, however the threads are scheduled (valgrind runs one at a time). */
static void hold_back(aclrtStream s) {
  aclrtNotify gate;
  CHECK_OK(aclrtCreateNotify(&gate, ACL_NOTIFY_DEFAULT));
  CHECK_OK(aclrtWaitAndResetNotify(gate, s, 0));
}

/* Records behind work that never runs, and dies before the record does. */
static int dying_recorder(chan *c, void *arg) {
  (void)arg;
  aclrtIpcEventHandle h;
  from_parent(c, &h, sizeof h);
  aclrtEvent e;
  CHECK_OK(aclrtIpcOpenEventHandle(h, &e));
  aclrtStream s = stream_new();
  hold_back(s);
  CHECK_OK(aclrtRecordEvent(e, s));
  send_int(c->up[1], 1);
  _exit(0); /* no finalize: the record never runs */
}

TEST(a_dead_recorder_fails_the_wait) {
  aclrtEvent e = ev_new(ACL_EVENT_IPC);
  aclrtIpcEventHandle h;
  CHECK_OK(aclrtIpcGetEventHandle(e, &h));
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, dying_recorder, NULL);
  to_child(&c, &h, sizeof h);
  CHECK_EQ(recv_int(c.up[0]), 1);
  aclrtStream s = stream_new();
  CHECK_OK(aclrtStreamWaitEvent(s, e));
  /* the wait has no limit: only the recorder's death ends it (a hang would
   * run into the harness's time limit), and the message says so */
  CHECK_MSG(aclrtSynchronizeEvent(e), ACL_ERROR_RT_IPC_ERROR, "ended before its record ran");
  CHECK_MSG(aclrtSynchronizeStream(s), ACL_ERROR_RT_IPC_ERROR, "ended before its record ran");
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclrtRecordEvent(e, s)); /* a record of our own completes it again */
  CHECK_OK(aclrtSynchronizeEvent(e));
  CHECK_OK(aclrtDestroyEvent(e));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclFinalize());
}

static int open_expect(chan *c, void *arg) {
  aclError want = *(aclError *)arg;
  aclrtIpcEventHandle h;
  from_parent(c, &h, sizeof h);
  aclrtEvent e;
  CHECK_ACL(aclrtIpcOpenEventHandle(h, &e), want);
  if (want == ACL_SUCCESS) CHECK_OK(aclrtDestroyEvent(e));
  CHECK_OK(aclFinalize());
  return 0;
}

static void open_in_child(const aclrtIpcEventHandle *h, aclError want) {
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, open_expect, &want);
  to_child(&c, h, sizeof *h);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
}

TEST(forged_and_stale_handles_are_refused) {
  aclrtEvent e = ev_new(ACL_EVENT_IPC);
  aclrtIpcEventHandle h;
  CHECK_OK(aclrtIpcGetEventHandle(e, &h));
  open_in_child(&h, ACL_SUCCESS);
  /* another secret: the exporter refuses it */
  aclrtIpcEventHandle forged = h;
  forged.reserved[40] = forged.reserved[40] == 'A' ? 'B' : 'A';
  open_in_child(&forged, ACL_ERROR_RT_IPC_ERROR);
  /* the creator destroyed its event: no new opens (CANN: open before the creator destroys) */
  CHECK_OK(aclrtDestroyEvent(e));
  open_in_child(&h, ACL_ERROR_RT_IPC_ERROR);
  CHECK_OK(aclFinalize());
}

static int many_opener(chan *c, void *arg) {
  int n = *(int *)arg;
  aclrtIpcEventHandle *h = calloc((size_t)n, sizeof *h);
  aclrtEvent *e = calloc((size_t)n, sizeof *e);
  CHECK(h && e);
  from_parent(c, h, (size_t)n * sizeof *h);
  aclrtStream s = stream_new();
  for (int i = 0; i < n; i++) {
    CHECK_OK(aclrtIpcOpenEventHandle(h[i], &e[i]));
    CHECK_OK(aclrtStreamWaitEvent(s, e[i]));
  }
  CHECK_OK(aclrtSynchronizeStream(s));
  for (int i = 0; i < n; i++) CHECK_OK(aclrtRecordEvent(e[i], s));
  CHECK_OK(aclrtSynchronizeStream(s));
  send_int(c->up[1], 1);
  for (int i = 0; i < n; i++) CHECK_OK(aclrtDestroyEvent(e[i]));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclFinalize());
  free(h);
  free(e);
  return 0;
}

TEST(thousands_of_live_ipc_events) {
  int n = under_valgrind() ? 200 : 2000;
  int fds0 = fd_count();
  aclrtIpcEventHandle *h = calloc((size_t)n, sizeof *h);
  aclrtEvent *e = calloc((size_t)n, sizeof *e);
  CHECK(h && e);
  aclrtStream s = stream_new();
  for (int i = 0; i < n; i++) {
    e[i] = ev_new(ACL_EVENT_IPC);
    CHECK_OK(aclrtIpcGetEventHandle(e[i], &h[i]));
    CHECK_OK(aclrtRecordEvent(e[i], s));
  }
  CHECK_OK(aclrtSynchronizeStream(s)); /* no thread busy when we fork (sanitizer locks) */
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, many_opener, &n);
  to_child(&c, h, (size_t)n * sizeof *h);
  CHECK_EQ(recv_int(c.up[0]), 1);
  for (int i = 0; i < n; i++) {
    aclrtEventRecordedStatus st;
    CHECK_OK(aclrtQueryEventStatus(e[i], &st)); /* the child's records, seen here */
    CHECK_EQ(st, ACL_EVENT_RECORDED_STATUS_COMPLETE);
  }
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  for (int i = 0; i < n; i++) CHECK_OK(aclrtDestroyEvent(e[i]));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclFinalize());
  CHECK(fd_count() <= fds0 + 1); /* one page and one descriptor per event, all gone */
  free(h);
  free(e);
}

/* A wait on a recorder that is alive but stopped does not end by itself;
 * destroying the waiting stream by force ends it. */
static int stopped_recorder(chan *c, void *arg) {
  (void)arg;
  aclrtIpcEventHandle h;
  from_parent(c, &h, sizeof h);
  aclrtEvent e;
  CHECK_OK(aclrtIpcOpenEventHandle(h, &e));
  aclrtStream s = stream_new();
  hold_back(s);
  CHECK_OK(aclrtRecordEvent(e, s));
  send_int(c->up[1], 1);
  pause();
  return 0;
}

TEST(force_destroy_ends_a_blocked_wait) {
  aclrtEvent e = ev_new(ACL_EVENT_IPC);
  aclrtIpcEventHandle h;
  CHECK_OK(aclrtIpcGetEventHandle(e, &h));
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, stopped_recorder, NULL);
  to_child(&c, &h, sizeof h);
  CHECK_EQ(recv_int(c.up[0]), 1);
  kill(pid, SIGSTOP);
  aclrtStream s = stream_new();
  CHECK_OK(aclrtStreamWaitEvent(s, e));
  CHECK_MSG(aclrtSynchronizeStreamWithTimeout(s, 200), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, "200 ms");
  /* the blocked wait has no limit: only the forced destroy can end it (were
   * it not to, the harness's time limit would) */
  CHECK_OK(aclrtDestroyStreamForce(s));
  kill(pid, SIGKILL);
  CHECK_EQ(th_wait(pid), 128 + SIGKILL);
  chan_close(&c);
  CHECK_OK(aclrtDestroyEvent(e));
  CHECK_OK(aclFinalize());
}
