/* Labels and model runtime instances: building (bound streams, labels,
 * switches), capturing, replaying, and CANN's rules and codes for each
 * call; threads, fork and aclFinalize. Each test runs in its own process
 * (harness.h). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ipc_util.h"

#define N 64

static void put_u32(void *d, uint32_t v) { CHECK_OK(aclrtMemcpy(d, 4, &v, 4, ACL_MEMCPY_HOST_TO_DEVICE)); }

static aclrtLabel label_new(void) {
  aclrtLabel l = NULL;
  CHECK_OK(aclrtCreateLabel(&l));
  return l;
}

/* ---- labels ------------------------------------------------------------------ */

TEST(label_rules) {
  aclrtLabel a = label_new(), b = label_new();
  aclrtLabelList list = NULL;
  aclrtLabel two[2] = {a, b};
  CHECK_ACL(aclrtCreateLabel(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtCreateLabelList(NULL, 2, &list), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtCreateLabelList(two, 2, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtCreateLabelList(two, 0, &list), ACL_ERROR_RT_PARAM_INVALID, "out of range");
  CHECK_MSG(aclrtCreateLabelList(two, 65536, &list), ACL_ERROR_RT_PARAM_INVALID, "out of range");
  aclrtLabel bad[2] = {a, &list};
  CHECK_MSG(aclrtCreateLabelList(bad, 2, &list), ACL_ERROR_INVALID_PARAM, "labels[1]");
  CHECK_OK(aclrtCreateLabelList(two, 2, &list));
  aclrtStream s = stream_new();
  void *idx = dmalloc(4);
  /* only streams bound to a model being built take labels and switches */
  CHECK_MSG(aclrtSetLabel(a, s), ACL_ERROR_RT_STREAM_MODEL, "aclmdlRIBindStream");
  CHECK_MSG(aclrtSetLabel(a, NULL), ACL_ERROR_INVALID_PARAM, "stream is NULL");
  CHECK_MSG(aclrtSwitchLabelByIndex(idx, 2, list, NULL), ACL_ERROR_INVALID_PARAM, "stream is NULL");
  CHECK_MSG(aclrtSwitchLabelByIndex(idx, 2, list, s), ACL_ERROR_RT_STREAM_MODEL, "aclmdlRIBindStream");
  CHECK_ACL(aclrtSetLabel(NULL, s), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtSetLabel(&s, s), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtSwitchLabelByIndex(NULL, 2, list, s), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtSwitchLabelByIndex(idx, 2, a, s), ACL_ERROR_INVALID_PARAM); /* a label, not a list */
  CHECK_MSG(aclrtSwitchLabelByIndex(idx, 3, list, s), ACL_ERROR_RT_PARAM_INVALID, "maxValue");
  CHECK_MSG(aclrtSwitchLabelByIndex(idx, 0, list, s), ACL_ERROR_RT_PARAM_INVALID, "maxValue");
  uint32_t host_idx = 0;
  CHECK_MSG(aclrtSwitchLabelByIndex(&host_idx, 2, list, s), ACL_ERROR_INVALID_PARAM, "device memory");
  CHECK_OK(aclrtDestroyLabelList(list));
  CHECK_ACL(aclrtDestroyLabelList(list), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtDestroyLabel(list), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtDestroyLabel(a));
  CHECK_ACL(aclrtDestroyLabel(a), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtDestroyLabel(b));
  CHECK_OK(aclrtFree(idx));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclFinalize());
}

/* ---- building --------------------------------------------------------------------- */

TEST(build_records_and_replays) {
  unsigned char *d = dmalloc(N), *e = dmalloc(N), h[N];
  aclrtStream bound = stream_new(), exec = stream_new();
  aclmdlRI m = NULL;
  CHECK_OK(aclmdlRIBuildBegin(&m, 0));
  CHECK_OK(aclmdlRIBindStream(m, bound, ACL_MODEL_STREAM_FLAG_HEAD));
  memset(d, 1, N);
  CHECK_OK(aclrtMemsetAsync(d, N, 9, N / 2, bound));
  CHECK_OK(aclrtMemcpyAsync(e, N, d, N, ACL_MEMCPY_DEVICE_TO_DEVICE, bound));
  CHECK_OK(aclrtSynchronizeStream(bound));
  CHECK(d[0] == 1); /* recorded, not run */
  CHECK_OK(aclmdlRIEndTask(m, bound));
  CHECK_MSG(aclrtMemsetAsync(d, N, 0, N, bound), ACL_ERROR_INVALID_PARAM, "aclmdlRIEndTask");
  CHECK_MSG(aclmdlRIExecuteAsync(m, exec), ACL_ERROR_RT_PARAM_INVALID, "not built");
  CHECK_MSG(aclmdlRIExecuteAsync(m, bound), ACL_ERROR_RT_PARAM_INVALID, "bound to a model");
  CHECK_OK(aclmdlRIBuildEnd(m, NULL));
  CHECK_MSG(aclrtMemsetAsync(d, N, 0, N, bound), ACL_ERROR_INVALID_PARAM, "built");
  for (int run = 0; run < 3; run++) {
    memset(d, 2 + run, N);
    memset(e, 0, N);
    CHECK_OK(aclmdlRIExecuteAsync(m, exec));
    CHECK_OK(aclrtSynchronizeStream(exec));
    CHECK_OK(aclrtMemcpy(h, N, e, N, ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(h[0] == 9 && h[N / 2 - 1] == 9 && h[N / 2] == 2 + run && h[N - 1] == 2 + run);
  }
  /* the default stream executes too */
  memset(e, 0, N);
  CHECK_OK(aclmdlRIExecuteAsync(m, NULL));
  CHECK_OK(aclrtSynchronizeStream(NULL));
  CHECK(e[0] == 9);
  CHECK_OK(aclmdlRIUnbindStream(m, bound));
  CHECK_MSG(aclmdlRIUnbindStream(m, bound), ACL_ERROR_RT_STREAM_MODEL, "not bound");
  /* unbound: the stream runs its own work again, the model keeps its tasks */
  CHECK_OK(aclrtMemsetAsync(d, N, 5, N, bound));
  CHECK_OK(aclrtSynchronizeStream(bound));
  CHECK(d[N - 1] == 5);
  CHECK_OK(aclmdlRIExecuteAsync(m, exec));
  CHECK_OK(aclrtSynchronizeStream(exec));
  CHECK(e[N - 1] == 5 && e[0] == 9);
  CHECK_OK(aclmdlRIDestroy(m));
  CHECK_ACL(aclmdlRIDestroy(m), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclmdlRIExecuteAsync(m, exec), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclrtFree(e));
  CHECK_OK(aclFinalize());
}

TEST(build_rules) {
  aclrtStream s = stream_new(), t = stream_new();
  aclmdlRI m = NULL, other = NULL;
  CHECK_ACL(aclmdlRIBuildBegin(NULL, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclmdlRIBuildBegin(&m, 1), ACL_ERROR_RT_PARAM_INVALID, "reserved");
  CHECK_OK(aclmdlRIBuildBegin(&m, 0));
  CHECK_OK(aclmdlRIBuildBegin(&other, 0));
  CHECK_ACL(aclmdlRIBindStream(NULL, s, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclmdlRIBindStream(&s, s, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclmdlRIBindStream(m, NULL, 0), ACL_ERROR_RT_PARAM_INVALID, "default stream");
  CHECK_ACL(aclmdlRIBindStream(m, &m, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclmdlRIBindStream(m, s, 1), ACL_ERROR_RT_PARAM_INVALID, "ACL_MODEL_STREAM_FLAG_HEAD");
  CHECK_MSG(aclmdlRIBuildEnd(m, NULL), ACL_ERROR_RT_STREAM_MODEL, "ACL_MODEL_STREAM_FLAG_HEAD");
  CHECK_OK(aclmdlRIBindStream(m, s, ACL_MODEL_STREAM_FLAG_DEFAULT));
  CHECK_MSG(aclmdlRIBindStream(m, s, 0), ACL_ERROR_RT_PARAM_INVALID, "already bound");
  CHECK_MSG(aclmdlRIBindStream(other, s, 0), ACL_ERROR_RT_PARAM_INVALID, "already bound");
  CHECK_MSG(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_RELAXED), ACL_ERROR_RT_PARAM_INVALID, "already bound");
  CHECK_MSG(aclmdlRIBuildEnd(m, NULL), ACL_ERROR_RT_STREAM_MODEL, "ACL_MODEL_STREAM_FLAG_HEAD");
  CHECK_OK(aclmdlRIBindStream(m, t, ACL_MODEL_STREAM_FLAG_HEAD));
  CHECK_MSG(aclmdlRIEndTask(m, NULL), ACL_ERROR_RT_STREAM_MODEL, "not bound");
  CHECK_MSG(aclmdlRIEndTask(other, s), ACL_ERROR_RT_STREAM_MODEL, "not bound");
  CHECK_MSG(aclmdlRIBuildEnd(m, &m), ACL_ERROR_INVALID_PARAM, "reserve");
  /* a switch to a label never set in this model */
  aclrtLabel l = label_new();
  aclrtLabelList list;
  CHECK_OK(aclrtCreateLabelList(&l, 1, &list));
  void *idx = dmalloc(4);
  CHECK_OK(aclrtSwitchLabelByIndex(idx, 1, list, t));
  CHECK_MSG(aclmdlRIBuildEnd(m, NULL), ACL_ERROR_RT_INTERNAL_ERROR, "not set on any stream");
  CHECK_OK(aclrtSetLabel(l, s));
  CHECK_MSG(aclrtSetLabel(l, t), ACL_ERROR_RT_INTERNAL_ERROR, "already set");
  CHECK_OK(aclmdlRIBuildEnd(m, NULL));
  CHECK_MSG(aclmdlRIBuildEnd(m, NULL), ACL_ERROR_RT_PARAM_INVALID, "built already");
  CHECK_MSG(aclmdlRIBindStream(m, stream_new(), 0), ACL_ERROR_RT_PARAM_INVALID, "built already");
  CHECK_MSG(aclmdlRIEndTask(m, t), ACL_ERROR_RT_PARAM_INVALID, "not being built");
  /* destroying a model unbinds its streams */
  CHECK_OK(aclmdlRIDestroy(m));
  CHECK_OK(aclmdlRIBindStream(other, s, ACL_MODEL_STREAM_FLAG_HEAD));
  CHECK_OK(aclmdlRIDestroy(other));
  CHECK_OK(aclrtMemsetAsync(idx, 4, 0, 4, s)); /* runs again */
  CHECK_OK(aclrtSynchronizeStream(s));
  /* a stream destroyed while bound: the model lets go of it */
  CHECK_OK(aclmdlRIBuildBegin(&m, 0));
  aclrtStream gone = stream_new();
  CHECK_OK(aclmdlRIBindStream(m, gone, 0));
  CHECK_OK(aclrtDestroyStream(gone)); /* its end ends the binding */
  CHECK_MSG(aclmdlRIUnbindStream(m, gone), ACL_ERROR_RT_STREAM_MODEL, "not bound");
  aclrtStream again = stream_new(); /* a new stream, whatever its address, is free to bind */
  CHECK_OK(aclmdlRIBindStream(m, again, 0));
  CHECK_OK(aclrtDestroyStream(again));
  CHECK_OK(aclmdlRIDestroy(m));
  CHECK_OK(aclrtDestroyLabelList(list));
  CHECK_OK(aclrtDestroyLabel(l));
  CHECK_OK(aclrtFree(idx));
  CHECK_OK(aclFinalize());
}

/* Several head streams run side by side in one execution. */
TEST(several_head_streams) {
  enum { H = 4 };
  unsigned char *d = dmalloc(H * N);
  aclrtStream s[H], exec = stream_new();
  aclmdlRI m;
  CHECK_OK(aclmdlRIBuildBegin(&m, 0));
  for (int i = 0; i < H; i++) {
    s[i] = stream_new();
    CHECK_OK(aclmdlRIBindStream(m, s[i], ACL_MODEL_STREAM_FLAG_HEAD));
    CHECK_OK(aclrtMemsetAsync(d + i * N, N, 0x10 + i, N, s[i]));
    CHECK_OK(aclmdlRIEndTask(m, s[i]));
  }
  CHECK_OK(aclmdlRIBuildEnd(m, NULL));
  for (int run = 0; run < 3; run++) {
    memset(d, 0, H * N);
    CHECK_OK(aclmdlRIExecuteAsync(m, exec));
    CHECK_OK(aclrtSynchronizeStream(exec));
    for (int i = 0; i < H; i++) CHECK(d[i * N] == 0x10 + i && d[i * N + N - 1] == 0x10 + i);
  }
  /* one head's failure is the run's */
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclmdlRIExecuteAsync(m, exec));
  CHECK_MSG(aclrtSynchronizeStream(exec), ACL_ERROR_INVALID_PARAM, "");
  CHECK_OK(aclmdlRIDestroy(m));
  CHECK_OK(aclFinalize());
}

/* The sample's program and more: a switch by index picks one of two
 * branches; an unconditional jump (a one-label list) skips the other. */
typedef struct branchy {
  aclmdlRI m;
  unsigned char *d;
  uint32_t *idx, *zero;
  aclrtLabel l[4];
  aclrtLabelList pick, skip;
} branchy;

static void branchy_build(branchy *b, aclrtStream s, aclrtStream side) {
  b->d = dmalloc(N);
  b->idx = dmalloc(4);
  b->zero = dmalloc(4);
  put_u32(b->zero, 0);
  for (int i = 0; i < 4; i++) b->l[i] = label_new();
  aclrtLabel pick[3] = {b->l[0], b->l[1], b->l[3]};
  CHECK_OK(aclrtCreateLabelList(pick, 3, &b->pick));
  CHECK_OK(aclrtCreateLabelList(&b->l[2], 1, &b->skip));
  CHECK_OK(aclmdlRIBuildBegin(&b->m, 0));
  CHECK_OK(aclmdlRIBindStream(b->m, s, ACL_MODEL_STREAM_FLAG_HEAD));
  CHECK_OK(aclmdlRIBindStream(b->m, side, ACL_MODEL_STREAM_FLAG_DEFAULT));
  CHECK_OK(aclrtMemsetAsync(b->d, N, 0, N, s));
  CHECK_OK(aclrtSwitchLabelByIndex(b->idx, 3, b->pick, s));
  CHECK_OK(aclrtSetLabel(b->l[0], s));
  CHECK_OK(aclrtMemsetAsync(b->d, N, 0xa0, 1, s));
  CHECK_OK(aclrtSwitchLabelByIndex(b->zero, 1, b->skip, s));
  CHECK_OK(aclrtSetLabel(b->l[1], s));
  CHECK_OK(aclrtMemsetAsync(b->d, N, 0xb1, 1, s));
  CHECK_OK(aclrtSetLabel(b->l[2], s));
  CHECK_OK(aclrtMemsetAsync(b->d + 1, N - 1, 0xcc, 1, s)); /* after both branches */
  /* index 2: on the side stream, which runs only when jumped to */
  CHECK_OK(aclrtSetLabel(b->l[3], side));
  CHECK_OK(aclrtMemsetAsync(b->d, N, 0x33, 2, side));
  CHECK_OK(aclmdlRIEndTask(b->m, s));
  CHECK_OK(aclmdlRIEndTask(b->m, side));
  CHECK_OK(aclmdlRIBuildEnd(b->m, NULL));
}

static void branchy_free(branchy *b) {
  CHECK_OK(aclmdlRIDestroy(b->m));
  CHECK_OK(aclrtDestroyLabelList(b->pick));
  CHECK_OK(aclrtDestroyLabelList(b->skip));
  for (int i = 0; i < 4; i++) CHECK_OK(aclrtDestroyLabel(b->l[i]));
  CHECK_OK(aclrtFree(b->d));
  CHECK_OK(aclrtFree(b->idx));
  CHECK_OK(aclrtFree(b->zero));
}

TEST(switch_label_by_index) {
  aclrtStream s = stream_new(), side = stream_new(), exec = stream_new();
  branchy b;
  branchy_build(&b, s, side);
  static const struct {
    uint32_t idx;
    unsigned char d0, d1;
  } cases[] = {{0, 0xa0, 0xcc}, {1, 0xb1, 0xcc}, {2, 0x33, 0x33}, {7, 0x33, 0x33}, {0, 0xa0, 0xcc}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    put_u32(b.idx, cases[i].idx);
    CHECK_OK(aclmdlRIExecuteAsync(b.m, exec));
    CHECK_OK(aclrtSynchronizeStream(exec));
    CHECK_EQ(b.d[0], cases[i].d0);
    CHECK_EQ(b.d[1], cases[i].d1);
    CHECK_EQ(b.d[2], 0);
  }
  /* labels and lists may go once built: the model resolved them */
  CHECK_OK(aclrtDestroyLabelList(b.pick));
  CHECK_OK(aclrtCreateLabelList(b.l, 1, &b.pick));
  put_u32(b.idx, 1);
  CHECK_OK(aclmdlRIExecuteAsync(b.m, exec));
  CHECK_OK(aclrtSynchronizeStream(exec));
  CHECK_EQ(b.d[0], 0xb1);
  /* an index that can no longer be read fails the run, reported by the stream */
  uint32_t *keep = b.idx;
  CHECK_OK(aclrtFree(keep));
  CHECK_OK(aclmdlRIExecuteAsync(b.m, exec));
  CHECK_MSG(aclrtSynchronizeStream(exec), ACL_ERROR_INVALID_PARAM, "not allocated");
  b.idx = dmalloc(4);
  CHECK_OK(aclmdlRIUnbindStream(b.m, s));
  CHECK_OK(aclmdlRIUnbindStream(b.m, side));
  branchy_free(&b);
  CHECK_OK(aclFinalize());
}

/* ---- capture ------------------------------------------------------------------------- */

TEST(capture_records_and_replays) {
  unsigned char *src = dmalloc(N), *dst = dmalloc(N);
  aclrtStream s = stream_new();
  aclmdlRI m = NULL, got = &m;
  aclmdlRICaptureStatus st = ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE;
  CHECK_OK(aclmdlRICaptureGetInfo(s, &st, &got));
  CHECK(st == ACL_MODEL_RI_CAPTURE_STATUS_NONE && got == NULL);
  CHECK_OK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
  CHECK_OK(aclmdlRICaptureGetInfo(s, &st, &got));
  CHECK(st == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE && got != NULL);
  memset(src, 4, N);
  memset(dst, 0, N);
  CHECK_OK(aclrtMemcpyAsync(dst, N, src, N, ACL_MEMCPY_DEVICE_TO_DEVICE, s));
  CHECK_OK(aclrtMemsetAsync(dst, N, 8, 1, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK(dst[0] == 0 && dst[1] == 0); /* captured, not run */
  CHECK_MSG(aclmdlRIExecuteAsync(got, s), ACL_ERROR_RT_STREAM_CAPTURED, "being captured");
  CHECK_MSG(aclmdlRIExecuteAsync(got, NULL), ACL_ERROR_RT_PARAM_INVALID, "not built");
  CHECK_MSG(aclmdlRIBindStream(got, stream_new(), 0), ACL_ERROR_RT_PARAM_INVALID, "a capture's");
  CHECK_MSG(aclmdlRIBuildEnd(got, NULL), ACL_ERROR_RT_PARAM_INVALID, "a capture");
  CHECK_OK(aclmdlRICaptureEnd(s, &m));
  CHECK(m == got);
  CHECK_OK(aclmdlRICaptureGetInfo(s, &st, &got));
  CHECK(st == ACL_MODEL_RI_CAPTURE_STATUS_NONE);
  for (int run = 0; run < 3; run++) {
    memset(src, 10 + run, N);
    CHECK_OK(aclmdlRIExecuteAsync(m, s));
    CHECK_OK(aclrtSynchronizeStream(s));
    CHECK(dst[0] == 8 && dst[1] == 10 + run && dst[N - 1] == 10 + run);
  }
  CHECK_OK(aclmdlRIDestroy(m));
  CHECK_OK(aclrtFree(src));
  CHECK_OK(aclrtFree(dst));
  CHECK_OK(aclFinalize());
}

TEST(capture_rules) {
  aclrtStream s = stream_new();
  aclmdlRI m = NULL;
  aclmdlRICaptureStatus st;
  CHECK_MSG(aclmdlRICaptureBegin(NULL, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_ERROR_INVALID_PARAM, "default stream");
  CHECK_ACL(aclmdlRICaptureBegin(&m, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclmdlRICaptureBegin(s, (aclmdlRICaptureMode)3), ACL_ERROR_RT_PARAM_INVALID, "aclmdlRICaptureMode");
  CHECK_MSG(aclmdlRICaptureEnd(s, &m), ACL_ERROR_RT_STREAM_NOT_CAPTURED, "not being captured");
  CHECK_ACL(aclmdlRICaptureEnd(s, NULL), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclmdlRICaptureEnd(NULL, &m), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclmdlRICaptureGetInfo(s, NULL, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclmdlRICaptureGetInfo(NULL, &st, &m), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclmdlRICaptureGetInfo(&m, &st, &m), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL));
  CHECK_OK(aclmdlRICaptureGetInfo(s, NULL, &m)); /* status may be NULL (CANN) */
  CHECK(m != NULL);
  CHECK_MSG(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_ERROR_RT_STREAM_CAPTURED, "being captured");
  CHECK_MSG(aclmdlRIBindStream(m, s, 0), ACL_ERROR_RT_STREAM_CAPTURED, "being captured");
  aclrtLabel l = label_new();
  CHECK_MSG(aclrtSetLabel(l, s), ACL_ERROR_RT_STREAM_MODEL, "being captured");
  CHECK_OK(aclmdlRICaptureGetInfo(s, &st, &m));
  CHECK_MSG(aclmdlRIUnbindStream(m, s), ACL_ERROR_RT_STREAM_MODEL, "aclmdlRICaptureEnd");
  /* a task the emulator cannot record invalidates the capture */
  aclrtNotify n;
  CHECK_OK(aclrtCreateNotify(&n, 0));
  CHECK_MSG(aclrtRecordNotify(n, s), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "cannot be recorded");
  CHECK_OK(aclmdlRICaptureGetInfo(s, &st, &m));
  CHECK(st == ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED);
  void *d = dmalloc(N);
  CHECK_MSG(aclrtMemsetAsync(d, N, 0, N, s), ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED, "invalidated");
  aclmdlRI out = NULL;
  CHECK_MSG(aclmdlRICaptureEnd(s, &out), ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED, "cannot be recorded");
  CHECK(out == NULL);
  CHECK_ACL(aclmdlRIDestroy(m), ACL_ERROR_INVALID_PARAM); /* gone with the capture */
  CHECK_OK(aclrtRecordNotify(n, s)); /* the stream runs its work again */
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtDestroyNotify(n));
  CHECK_OK(aclrtDestroyLabel(l));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

typedef struct end_arg {
  aclrtStream s;
  aclError rc;
  aclmdlRI m;
} end_arg;

static void *end_elsewhere(void *p) {
  end_arg *a = p;
  a->rc = aclmdlRICaptureEnd(a->s, &a->m);
  return NULL;
}

TEST(capture_modes_and_threads) {
  aclrtStream s = stream_new();
  static const aclmdlRICaptureMode modes[] = {ACL_MODEL_RI_CAPTURE_MODE_GLOBAL, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL,
                                              ACL_MODEL_RI_CAPTURE_MODE_RELAXED};
  for (int i = 0; i < 3; i++) {
    CHECK_OK(aclmdlRICaptureBegin(s, modes[i]));
    end_arg a = {s, -1, NULL};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, end_elsewhere, &a) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    if (modes[i] == ACL_MODEL_RI_CAPTURE_MODE_RELAXED) {
      CHECK_EQ(a.rc, ACL_SUCCESS); /* relaxed: any thread ends it */
      CHECK_OK(aclmdlRIDestroy(a.m));
    } else {
      CHECK_EQ(a.rc, ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD);
      aclmdlRI m;
      CHECK_OK(aclmdlRICaptureEnd(s, &m));
      CHECK_OK(aclmdlRIDestroy(m));
    }
  }
  CHECK_OK(aclFinalize());
}

/* The event hand-offs of CANN's model_sync_external sample: records and
 * waits are recorded, and replayed as if made at execution. */
/* external: with CANN's ACL_EVENT_*_EXTERNAL flags, which say that the
 * record and the wait cross the model's border (its sample 4). */
static void capture_event_record_and_wait_(int external) {
  enum { M = 4096 };
  unsigned char *src = dmalloc(M), *mid = dmalloc(M), *dst = dmalloc(M);
  aclrtStream g1 = stream_new(), g2 = stream_new();
  aclrtEvent ev;
  CHECK_OK(aclrtCreateEventExWithFlag(&ev, ACL_EVENT_SYNC));
  aclmdlRI m1, m2;
  CHECK_OK(aclmdlRICaptureBegin(g1, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
  CHECK_OK(aclrtMemcpyAsync(mid, M, src, M, ACL_MEMCPY_DEVICE_TO_DEVICE, g1));
  if (external)
    CHECK_OK(aclrtRecordEventWithFlag(ev, g1, ACL_EVENT_RECORD_EXTERNAL));
  else
    CHECK_OK(aclrtRecordEvent(ev, g1));
  CHECK_OK(aclmdlRICaptureEnd(g1, &m1));
  CHECK_OK(aclrtSynchronizeEvent(ev)); /* nothing recorded yet: no wait, no hang */
  CHECK_OK(aclmdlRICaptureBegin(g2, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
  if (external)
    CHECK_OK(aclrtStreamWaitEventWithFlag(g2, ev, 0, ACL_EVENT_WAIT_EXTERNAL));
  else
    CHECK_OK(aclrtStreamWaitEvent(g2, ev));
  CHECK_OK(aclrtMemcpyAsync(dst, M, mid, M, ACL_MEMCPY_DEVICE_TO_DEVICE, g2));
  CHECK_OK(aclmdlRICaptureEnd(g2, &m2));
  for (int run = 0; run < 5; run++) {
    memset(src, 20 + run, M);
    /* hold g1 back so g2's replayed wait must really wait */
    aclrtNotify gate;
    CHECK_OK(aclrtCreateNotify(&gate, 0));
    aclrtStream holder = stream_new();
    CHECK_OK(aclrtWaitAndResetNotify(gate, g1, 0));
    CHECK_OK(aclmdlRIExecuteAsync(m1, g1));
    CHECK_OK(aclmdlRIExecuteAsync(m2, g2));
    CHECK_OK(aclrtRecordNotify(gate, holder));
    CHECK_OK(aclrtSynchronizeStream(g2));
    CHECK(dst[0] == 20 + run && dst[M - 1] == 20 + run);
    CHECK_OK(aclrtSynchronizeStream(g1));
    CHECK_OK(aclrtDestroyStream(holder));
    CHECK_OK(aclrtDestroyNotify(gate));
  }
  CHECK_OK(aclmdlRIDestroy(m1));
  CHECK_OK(aclmdlRIDestroy(m2));
  CHECK_OK(aclrtDestroyEvent(ev));
  CHECK_OK(aclFinalize());
}

TEST(capture_event_record_and_wait) { capture_event_record_and_wait_(0); }

TEST(capture_event_record_and_wait_external) {
  /* outside a capture CANN refuses the flags */
  aclrtStream s = stream_new();
  aclrtEvent ev;
  CHECK_OK(aclrtCreateEventExWithFlag(&ev, ACL_EVENT_SYNC));
  CHECK_MSG(aclrtRecordEventWithFlag(ev, s, ACL_EVENT_RECORD_EXTERNAL), ACL_ERROR_RT_STREAM_NOT_CAPTURED,
            "being captured");
  CHECK_MSG(aclrtStreamWaitEventWithFlag(s, ev, 0, ACL_EVENT_WAIT_EXTERNAL), ACL_ERROR_RT_STREAM_NOT_CAPTURED,
            "being captured");
  CHECK_OK(aclrtDestroyEvent(ev));
  CHECK_OK(aclrtDestroyStream(s));
  capture_event_record_and_wait_(1);
}

/* CANN refuses to run a model on a stream being captured; the capture stays whole. */
TEST(execute_on_a_capturing_stream_is_refused) {
  unsigned char *d = dmalloc(N);
  aclrtStream s = stream_new(), outer = stream_new();
  aclmdlRI inner, whole;
  CHECK_OK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
  CHECK_OK(aclrtMemsetAsync(d, N, 6, N, s));
  CHECK_OK(aclmdlRICaptureEnd(s, &inner));
  CHECK_OK(aclmdlRICaptureBegin(outer, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
  CHECK_MSG(aclmdlRIExecuteAsync(inner, outer), ACL_ERROR_RT_STREAM_CAPTURED, "being captured");
  CHECK_OK(aclmdlRICaptureEnd(outer, &whole));
  memset(d, 0, N);
  CHECK_OK(aclmdlRIExecuteAsync(whole, s)); /* empty: runs nothing */
  CHECK_OK(aclmdlRIExecuteAsync(inner, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK(d[N - 1] == 6);
  CHECK_OK(aclmdlRIDestroy(inner));
  CHECK_OK(aclmdlRIDestroy(whole));
  CHECK_OK(aclFinalize());
}

/* ---- threads, destroy while queued, fork, aclFinalize --------------------------------- */

typedef struct th_arg {
  int failures;
} th_arg;

static void *capture_loop(void *p) {
  th_arg *a = p;
  aclrtStream s = NULL;
  unsigned char *d = NULL;
  if (aclrtCreateStream(&s) || aclrtMalloc((void **)&d, N, ACL_MEM_MALLOC_HUGE_FIRST)) {
    a->failures++;
    return NULL;
  }
  for (int i = 0; i < 100; i++) {
    aclmdlRI m = NULL;
    if (aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL) ||
        aclrtMemsetAsync(d, N, i & 0xff, N, s) || aclmdlRICaptureEnd(s, &m) || aclmdlRIExecuteAsync(m, s) ||
        aclmdlRIDestroy(m) /* while queued: the queued run keeps it */ || aclrtSynchronizeStream(s) ||
        d[N - 1] != (i & 0xff))
      a->failures++;
  }
  if (aclrtFree(d) || aclrtDestroyStream(s)) a->failures++;
  return NULL;
}

TEST(threads_capture_and_replay_at_once) {
  enum { T = 6 };
  pthread_t th[T];
  th_arg a[T];
  for (int i = 0; i < T; i++) {
    a[i].failures = 0;
    CHECK(pthread_create(&th[i], NULL, capture_loop, &a[i]) == 0);
  }
  for (int i = 0; i < T; i++) {
    CHECK(pthread_join(th[i], NULL) == 0);
    CHECK_EQ(a[i].failures, 0);
  }
  CHECK_OK(aclFinalize());
}

TEST(destroy_while_a_branchy_run_is_queued) {
  aclrtStream s = stream_new(), side = stream_new(), exec = stream_new();
  branchy b;
  branchy_build(&b, s, side);
  put_u32(b.idx, 1);
  aclrtNotify gate;
  CHECK_OK(aclrtCreateNotify(&gate, 0));
  aclrtStream holder = stream_new();
  CHECK_OK(aclrtWaitAndResetNotify(gate, exec, 0));
  CHECK_OK(aclmdlRIExecuteAsync(b.m, exec));
  aclmdlRI m = b.m;
  CHECK_OK(aclmdlRIDestroy(m));
  CHECK_OK(aclmdlRIBuildBegin(&b.m, 0)); /* for branchy_free */
  CHECK_OK(aclrtRecordNotify(gate, holder));
  CHECK_OK(aclrtSynchronizeStream(exec));
  CHECK_EQ(b.d[0], 0xb1); /* the destroyed model still ran */
  CHECK_OK(aclrtDestroyNotify(gate));
  branchy_free(&b);
  CHECK_OK(aclFinalize());
}

static int model_child(void *p) {
  aclmdlRI *m = p;
  /* the parent's models, labels and bindings are not the child's */
  CHECK_ACL(aclmdlRIExecuteAsync(m[0], NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclmdlRIDestroy(m[0]), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtDestroyLabel(m[1]), ACL_ERROR_INVALID_PARAM);
  aclrtStream s = stream_new();
  aclmdlRI mine;
  CHECK_OK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
  CHECK_OK(aclmdlRICaptureEnd(s, &mine));
  CHECK_OK(aclmdlRIExecuteAsync(mine, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(fork_and_finalize_leave_nothing_behind) {
  unsigned char *d = dmalloc(N);
  aclrtStream s = stream_new(), c = stream_new();
  aclmdlRI m[2];
  m[1] = label_new();
  CHECK_OK(aclmdlRIBuildBegin(&m[0], 0));
  CHECK_OK(aclmdlRIBindStream(m[0], s, 0));
  CHECK_OK(aclrtMemsetAsync(d, N, 3, N, s));
  CHECK_OK(aclmdlRIBuildEnd(m[0], NULL));
  CHECK_OK(aclmdlRICaptureBegin(c, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL)); /* left open */
  CHECK_OK(aclrtMemsetAsync(d, N, 4, N, c));
  CHECK_EQ(th_wait(th_spawn(model_child, m)), 0);
  CHECK_OK(aclmdlRIExecuteAsync(m[0], NULL));
  CHECK_OK(aclrtSynchronizeStream(NULL));
  CHECK(d[0] == 3);
  CHECK_OK(aclFinalize()); /* models, open captures, labels: all gone */
  CHECK_ACL(aclmdlRIDestroy(m[0]), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtDestroyLabel(m[1]), ACL_ERROR_INVALID_PARAM);
  s = stream_new();
  d = dmalloc(N);
  CHECK_OK(aclrtMemsetAsync(d, N, 5, N, s)); /* a fresh stream runs its work */
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK(d[0] == 5);
  CHECK_OK(aclFinalize());
}

/* Streams and models destroyed in every order while other threads queue
 * work on the streams: no recorder outlives its model, nothing leaks. */
typedef struct churn {
  aclrtStream s;
  unsigned char *d;
  _Atomic int stop;
  _Atomic int bad;
} churn;

static void *queue_loop(void *p) {
  churn *c = p;
  while (!atomic_load(&c->stop)) {
    aclError rc = aclrtMemsetAsync(c->d, N, 1, N, c->s);
    /* recorded, refused by a built model, or run: never anything else */
    if (rc != ACL_SUCCESS && rc != ACL_ERROR_INVALID_PARAM && rc != ACL_ERROR_RT_STREAM_MODEL) c->bad++;
  }
  return NULL;
}

TEST(bind_destroy_and_capture_while_other_threads_queue) {
  churn c = {stream_new(), dmalloc(N), 0, 0};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, queue_loop, &c) == 0);
  for (int i = 0; i < 200; i++) {
    aclmdlRI m;
    CHECK_OK(aclmdlRIBuildBegin(&m, 0));
    CHECK_OK(aclmdlRIBindStream(m, c.s, ACL_MODEL_STREAM_FLAG_HEAD));
    if (i % 3 == 0) CHECK_OK(aclmdlRIBuildEnd(m, NULL));
    if (i % 2) CHECK_OK(aclmdlRIUnbindStream(m, c.s));
    CHECK_OK(aclmdlRIDestroy(m));
    CHECK_OK(aclmdlRICaptureBegin(c.s, ACL_MODEL_RI_CAPTURE_MODE_RELAXED));
    CHECK_OK(aclmdlRICaptureEnd(c.s, &m));
    /* replayed on c.s, behind its queued work: on another stream the replay's
     * memsets and c.s's would write c.d at once */
    CHECK_OK(aclmdlRIExecuteAsync(m, c.s));
    CHECK_OK(aclmdlRIDestroy(m));
  }
  atomic_store(&c.stop, 1);
  for (int i = 0; i < 2; i++) CHECK(pthread_join(th[i], NULL) == 0);
  CHECK_EQ(c.bad, 0);
  /* c.s too: its last memsets of 1 must not land after the 3 checked below */
  CHECK_OK(aclrtSynchronizeStream(c.s));
  CHECK_OK(aclrtSynchronizeStream(NULL));
  /* a stream destroyed while it is captured, then its model */
  aclrtStream s = stream_new();
  aclmdlRI m;
  CHECK_OK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
  CHECK_OK(aclmdlRICaptureGetInfo(s, NULL, &m));
  CHECK_OK(aclrtMemsetAsync(c.d, N, 2, N, s));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclmdlRIDestroy(m));
  /* and the other way round */
  s = stream_new();
  CHECK_OK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
  CHECK_OK(aclmdlRICaptureGetInfo(s, NULL, &m));
  CHECK_OK(aclmdlRIDestroy(m));
  CHECK_MSG(aclmdlRICaptureEnd(s, &m), ACL_ERROR_RT_STREAM_NOT_CAPTURED, "");
  CHECK_OK(aclrtMemsetAsync(c.d, N, 3, N, s)); /* runs again */
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK(c.d[0] == 3);
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtDestroyStream(c.s));
  CHECK_OK(aclFinalize());
}
