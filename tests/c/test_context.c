/* Contexts, device queries and limits, versions, the last error, the
 * overflow calls and the data-type helpers. Each test runs in its own
 * process (harness.h). */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* ---- contexts ------------------------------------------------------------ */

TEST(set_device_makes_the_default_context_current) {
  CHECK_OK(aclrtSetDevice(1));
  aclrtContext a = NULL, b = NULL;
  CHECK_OK(aclrtGetCurrentContext(&a));
  CHECK(a != NULL);
  CHECK_OK(aclrtGetCurrentContext(&b));
  CHECK(a == b);
  CHECK_OK(aclrtSetDevice(2));
  CHECK_OK(aclrtGetCurrentContext(&b));
  CHECK(a != b);
  /* Setting device 1's default context switches back to device 1. */
  CHECK_OK(aclrtSetCurrentContext(a));
  int32_t dev = -1;
  CHECK_OK(aclrtGetDevice(&dev));
  CHECK_EQ(dev, 1);
  /* A default context cannot be destroyed. */
  CHECK_MSG(aclrtDestroyContext(a), ACL_ERROR_RT_CONTEXT_NULL, "default context");
  CHECK_OK(aclFinalize());
}

TEST(create_context_makes_it_current_and_switches_device) {
  CHECK_OK(aclrtSetDevice(0));
  aclrtContext c = NULL, cur = NULL;
  CHECK_OK(aclrtCreateContext(&c, 3));
  CHECK(c != NULL);
  CHECK_OK(aclrtGetCurrentContext(&cur));
  CHECK(cur == c);
  int32_t dev = -1;
  CHECK_OK(aclrtGetDevice(&dev));
  CHECK_EQ(dev, 3);
  /* aclrtSetDevice goes back to a default context. */
  CHECK_OK(aclrtSetDevice(0));
  CHECK_OK(aclrtGetCurrentContext(&cur));
  CHECK(cur != c);
  CHECK_OK(aclrtSetCurrentContext(c));
  CHECK_OK(aclrtGetDevice(&dev));
  CHECK_EQ(dev, 3);
  CHECK_OK(aclrtDestroyContext(c));
  /* The destroying thread falls back on its device's default context (told
   * by what it is, not by "!= c": c's memory may hold it now). */
  CHECK_OK(aclrtGetCurrentContext(&cur));
  CHECK_MSG(aclrtDestroyContext(cur), ACL_ERROR_RT_CONTEXT_NULL, "default context");
  CHECK_OK(aclrtGetDevice(&dev));
  CHECK_EQ(dev, 3);
  CHECK_OK(aclFinalize());
}

TEST(context_bad_arguments) {
  aclrtContext c = NULL;
  CHECK_MSG(aclrtCreateContext(NULL, 0), ACL_ERROR_INVALID_PARAM, "context is NULL");
  CHECK_MSG(aclrtCreateContext(&c, -1), ACL_ERROR_RT_INVALID_DEVICEID, "out of range");
  CHECK_MSG(aclrtCreateContext(&c, 8), ACL_ERROR_RT_INVALID_DEVICEID, "out of range");
  CHECK(c == NULL);
  CHECK_MSG(aclrtSetCurrentContext(NULL), ACL_ERROR_INVALID_PARAM, "NULL");
  CHECK_MSG(aclrtDestroyContext(NULL), ACL_ERROR_INVALID_PARAM, "NULL");
  CHECK_MSG(aclrtGetCurrentContext(NULL), ACL_ERROR_INVALID_PARAM, "NULL");
  CHECK_MSG(aclrtCtxGetCurrentDefaultStream(NULL), ACL_ERROR_INVALID_PARAM, "NULL");
  int forged = 0;
  CHECK_MSG(aclrtSetCurrentContext(&forged), ACL_ERROR_RT_PARAM_INVALID, "not a live context");
  CHECK_MSG(aclrtDestroyContext(&forged), ACL_ERROR_RT_CONTEXT_NULL, "not a live context");
  /* A stream handle is not a context. */
  aclrtStream s = NULL;
  CHECK_OK(aclrtCreateStream(&s));
  CHECK_MSG(aclrtSetCurrentContext(s), ACL_ERROR_RT_PARAM_INVALID, "not a live context");
  CHECK_OK(aclrtDestroyStream(s));
  /* Destroyed: twice is an error, and so is using it. */
  CHECK_OK(aclrtCreateContext(&c, 1));
  CHECK_OK(aclrtDestroyContext(c));
  CHECK_MSG(aclrtDestroyContext(c), ACL_ERROR_RT_CONTEXT_NULL, "not a live context");
  CHECK_MSG(aclrtSetCurrentContext(c), ACL_ERROR_RT_PARAM_INVALID, "not a live context");
}

/* The default stream is per context: work on NULL goes to the current
 * context's, and the handle aclrtCtxGetCurrentDefaultStream gives is it. */
TEST(default_stream_is_per_context) {
  CHECK_OK(aclrtSetDevice(0));
  aclrtStream d0 = NULL, d0b = NULL, dc = NULL;
  CHECK_OK(aclrtCtxGetCurrentDefaultStream(&d0));
  CHECK(d0 != NULL);
  CHECK_OK(aclrtCtxGetCurrentDefaultStream(&d0b));
  CHECK(d0 == d0b);
  aclrtContext c = NULL;
  CHECK_OK(aclrtCreateContext(&c, 0));
  CHECK_OK(aclrtCtxGetCurrentDefaultStream(&dc));
  CHECK(dc != NULL && dc != d0);
  /* The handle works wherever a stream does, and cannot be destroyed. */
  void *dev = NULL;
  CHECK_OK(aclrtMalloc(&dev, 4096, ACL_MEM_MALLOC_HUGE_FIRST));
  char host[4096];
  memset(host, 7, sizeof host);
  CHECK_OK(aclrtMemcpyAsync(dev, 4096, host, 4096, ACL_MEMCPY_HOST_TO_DEVICE, dc));
  CHECK_OK(aclrtSynchronizeStream(dc));
  CHECK_OK(aclrtSynchronizeStream(NULL));
  CHECK_MSG(aclrtDestroyStream(dc), ACL_ERROR_INVALID_PARAM, "default stream");
  CHECK_MSG(aclrtDestroyStreamForce(d0), ACL_ERROR_INVALID_PARAM, "default stream");
  /* Destroying the context takes its default stream with it. */
  CHECK_OK(aclrtDestroyContext(c));
  CHECK_MSG(aclrtSynchronizeStream(dc), ACL_ERROR_INVALID_PARAM, "not a live stream");
  CHECK_OK(aclrtSynchronizeStream(d0));
  CHECK_OK(aclrtFree(dev));
  CHECK_OK(aclFinalize());
}

TEST(destroy_context_drains_and_destroys_its_streams) {
  CHECK_OK(aclrtSetDevice(0));
  aclrtStream outside = NULL, inside = NULL;
  CHECK_OK(aclrtCreateStream(&outside));
  aclrtContext c = NULL;
  CHECK_OK(aclrtCreateContext(&c, 0));
  CHECK_OK(aclrtCreateStream(&inside));
  void *dev = NULL;
  const size_t n = 1 << 20;
  CHECK_OK(aclrtMalloc(&dev, n, ACL_MEM_MALLOC_HUGE_FIRST));
  char *host = malloc(n);
  memset(host, 0x5a, n);
  for (int i = 0; i < 16; i++) CHECK_OK(aclrtMemcpyAsync(dev, n, host, n, ACL_MEMCPY_HOST_TO_DEVICE, inside));
  CHECK_OK(aclrtDestroyContext(c));
  /* Its queued work ran before it went. */
  memset(host, 0, n);
  CHECK_OK(aclrtMemcpy(host, n, dev, n, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK_EQ(host[0], 0x5a);
  CHECK_EQ(host[n - 1], 0x5a);
  CHECK_MSG(aclrtSynchronizeStream(inside), ACL_ERROR_INVALID_PARAM, "not a live stream");
  CHECK_MSG(aclrtDestroyStream(inside), ACL_ERROR_INVALID_PARAM, "not a live stream");
  /* A stream of another context stays. */
  CHECK_OK(aclrtSynchronizeStream(outside));
  CHECK_OK(aclrtDestroyStream(outside));
  free(host);
  CHECK_OK(aclrtFree(dev));
  CHECK_OK(aclFinalize());
}

TEST(streams_are_created_in_the_current_context_device) {
  aclrtContext c = NULL;
  CHECK_OK(aclrtCreateContext(&c, 2));
  aclrtEvent e = NULL;
  aclrtStream s = NULL;
  CHECK_OK(aclrtCreateStream(&s));
  CHECK_OK(aclrtCreateEvent(&e));
  CHECK_OK(aclrtRecordEvent(e, s)); /* event and stream both on device 2 */
  CHECK_OK(aclrtSynchronizeEvent(e));
  CHECK_OK(aclrtDestroyEvent(e));
  /* aclrtResetDeviceForce of device 2 takes the context's streams too. */
  CHECK_OK(aclrtSetDevice(2));
  CHECK_OK(aclrtResetDeviceForce(2));
  CHECK_MSG(aclrtDestroyStream(s), ACL_ERROR_INVALID_PARAM, "not a live stream");
  CHECK_OK(aclrtDestroyContext(c));
  CHECK_OK(aclFinalize());
}

static void *use_context(void *arg) {
  aclrtContext c = arg;
  aclrtContext cur = NULL;
  /* A new thread starts on device 0's default context. */
  int32_t dev = -1;
  if (aclrtGetDevice(&dev) != ACL_SUCCESS || dev != 0) return (void *)1;
  if (aclrtSetCurrentContext(c) != ACL_SUCCESS) return (void *)2;
  if (aclrtGetCurrentContext(&cur) != ACL_SUCCESS || cur != c) return (void *)3;
  if (aclrtGetDevice(&dev) != ACL_SUCCESS || dev != 5) return (void *)4;
  for (int i = 0; i < 200; i++) {
    aclrtStream s = NULL;
    if (aclrtCreateStream(&s) != ACL_SUCCESS) return (void *)5;
    if (aclrtSynchronizeStream(NULL) != ACL_SUCCESS) return (void *)6;
    if (aclrtDestroyStream(s) != ACL_SUCCESS) return (void *)7;
  }
  return NULL;
}

TEST(threads_share_a_context) {
  aclrtContext c = NULL;
  CHECK_OK(aclrtCreateContext(&c, 5));
  pthread_t t[4];
  for (int i = 0; i < 4; i++) CHECK_EQ(pthread_create(&t[i], NULL, use_context, c), 0);
  for (int i = 0; i < 4; i++) {
    void *r = (void *)-1;
    pthread_join(t[i], &r);
    CHECK_EQ((intptr_t)r, 0);
  }
  CHECK_OK(aclrtDestroyContext(c));
  CHECK_OK(aclFinalize());
}

static void *default_of_device_6(void *arg) {
  aclrtContext *out = arg;
  if (aclrtSetDevice(6) != ACL_SUCCESS) return (void *)1;
  if (aclrtGetCurrentContext(out) != ACL_SUCCESS) return (void *)2;
  return NULL;
}

/* Threads that first need a device's default context at once all get the
 * same one. */
TEST(default_context_made_once_under_a_race) {
  aclrtContext got[8] = {0};
  pthread_t t[8];
  for (int i = 0; i < 8; i++) CHECK_EQ(pthread_create(&t[i], NULL, default_of_device_6, &got[i]), 0);
  for (int i = 0; i < 8; i++) {
    void *r = (void *)-1;
    pthread_join(t[i], &r);
    CHECK_EQ((intptr_t)r, 0);
  }
  for (int i = 1; i < 8; i++) CHECK(got[i] == got[0]);
  CHECK_OK(aclrtSetCurrentContext(got[0]));
  int32_t dev = -1;
  CHECK_OK(aclrtGetDevice(&dev));
  CHECK_EQ(dev, 6);
  CHECK_OK(aclFinalize());
}

static aclrtContext g_shared;

static void *destroy_it(void *arg) {
  (void)arg;
  return (void *)(intptr_t)aclrtDestroyContext(g_shared);
}

/* A context destroyed by another thread: the thread that had it current gets
 * ACL_ERROR_RT_CONTEXT_NULL, never a crash, until it sets another. */
TEST(context_destroyed_by_another_thread) {
  CHECK_OK(aclrtCreateContext(&g_shared, 1));
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, destroy_it, NULL), 0);
  void *r = NULL;
  pthread_join(t, &r);
  CHECK_EQ((intptr_t)r, ACL_SUCCESS);
  aclrtContext cur = NULL;
  CHECK_MSG(aclrtGetCurrentContext(&cur), ACL_ERROR_RT_CONTEXT_NULL, "was destroyed");
  aclrtStream s = NULL;
  CHECK_MSG(aclrtCreateStream(&s), ACL_ERROR_RT_CONTEXT_NULL, "was destroyed");
  CHECK_MSG(aclrtSynchronizeStream(NULL), ACL_ERROR_RT_CONTEXT_NULL, "was destroyed");
  CHECK_MSG(aclrtSynchronizeDevice(), ACL_ERROR_RT_CONTEXT_NULL, "was destroyed");
  /* A new context at the same address does not revive it. */
  aclrtContext again = NULL;
  CHECK_OK(aclrtSetDevice(1));
  CHECK_OK(aclrtCreateStream(&s));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtCreateContext(&again, 1));
  CHECK_OK(aclrtDestroyContext(again));
  CHECK_OK(aclFinalize());
}

static void *race_destroy(void *arg) {
  return (void *)(intptr_t)aclrtDestroyContext(arg);
}

TEST(racing_destroys_exactly_one_wins) {
  for (int round = 0; round < 50; round++) {
    aclrtContext c = NULL;
    CHECK_OK(aclrtCreateContext(&c, 0));
    pthread_t t[4];
    for (int i = 0; i < 4; i++) CHECK_EQ(pthread_create(&t[i], NULL, race_destroy, c), 0);
    int ok = 0;
    for (int i = 0; i < 4; i++) {
      void *r = NULL;
      pthread_join(t[i], &r);
      if ((intptr_t)r == ACL_SUCCESS)
        ok++;
      else
        CHECK_EQ((intptr_t)r, ACL_ERROR_RT_CONTEXT_NULL);
    }
    CHECK_EQ(ok, 1);
  }
  CHECK_OK(aclFinalize());
}

typedef struct creator {
  aclrtContext ctx;
  aclrtStream made[16];
  int n;
  int bad;
} creator;

static void *create_until_gone(void *arg) {
  creator *c = arg;
  if (aclrtSetCurrentContext(c->ctx) != ACL_SUCCESS) return NULL; /* already destroyed */
  while (c->n < 16) {
    aclrtStream s = NULL;
    aclError rc = aclrtCreateStream(&s);
    if (rc == ACL_ERROR_RT_CONTEXT_NULL) break;
    if (rc != ACL_SUCCESS) {
      c->bad = rc;
      break;
    }
    c->made[c->n++] = s;
    if (aclrtSynchronizeStream(NULL) != ACL_SUCCESS) break; /* its default stream: gone with it */
  }
  return NULL;
}

/* Streams created while their context is destroyed: each either fails or is
 * destroyed with the context, none outlives it. */
TEST(streams_created_during_destroy_go_with_the_context) {
  for (int round = 0; round < 10; round++) {
    aclrtContext ctx = NULL;
    CHECK_OK(aclrtCreateContext(&ctx, 0));
    CHECK_OK(aclrtSetDevice(0));
    creator c[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
      c[i] = (creator){ctx, {0}, 0, 0};
      CHECK_EQ(pthread_create(&t[i], NULL, create_until_gone, &c[i]), 0);
    }
    usleep(1000 * (round % 4));
    CHECK_OK(aclrtDestroyContext(ctx));
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++) {
      CHECK_EQ(c[i].bad, 0);
      for (int k = 0; k < c[i].n; k++) CHECK_ACL(aclrtSynchronizeStream(c[i].made[k]), ACL_ERROR_INVALID_PARAM);
    }
  }
  CHECK_OK(aclFinalize());
}

TEST(fork_child_starts_on_default_contexts) {
  aclrtContext c = NULL;
  CHECK_OK(aclrtCreateContext(&c, 4));
  aclrtStream s = NULL;
  CHECK_OK(aclrtCreateStream(&s));
  CHECK_OK(aclrtSetDeviceResLimit(4, ACL_RT_DEV_RES_CUBE_CORE, 3));
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    int bad = 0;
    aclrtContext cur = NULL;
    int32_t dev = -1;
    /* The parent's context is unknown here; the thread is on device 4's default. */
    if (aclrtGetCurrentContext(&cur) != ACL_SUCCESS || cur == c) bad |= 1;
    if (aclrtGetDevice(&dev) != ACL_SUCCESS || dev != 4) bad |= 2;
    if (aclrtSetCurrentContext(c) != ACL_ERROR_RT_PARAM_INVALID) bad |= 4;
    if (aclrtDestroyContext(c) != ACL_ERROR_RT_CONTEXT_NULL) bad |= 8;
    if (aclrtSynchronizeStream(NULL) != ACL_SUCCESS) bad |= 16;
    if (aclrtDestroyStream(s) != ACL_ERROR_INVALID_PARAM) bad |= 32;
    aclrtContext mine = NULL;
    if (aclrtCreateContext(&mine, 2) != ACL_SUCCESS || aclrtDestroyContext(mine) != ACL_SUCCESS) bad |= 64;
    uint32_t v = 0;
    if (aclrtGetDeviceResLimit(4, ACL_RT_DEV_RES_CUBE_CORE, &v) != ACL_SUCCESS || v != 3) bad |= 128;
    if (aclFinalize() != ACL_SUCCESS) bad |= 256;
    _exit(bad > 255 ? 255 : bad);
  }
  int st = 0;
  CHECK_EQ(waitpid(pid, &st, 0), pid);
  CHECK(WIFEXITED(st));
  CHECK_EQ(WEXITSTATUS(st), 0);
  /* The parent is untouched. */
  aclrtContext cur = NULL;
  CHECK_OK(aclrtGetCurrentContext(&cur));
  CHECK(cur == c);
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtDestroyContext(c));
  CHECK_OK(aclFinalize());
}

TEST(finalize_releases_contexts) {
  aclrtContext c = NULL, d = NULL;
  CHECK_OK(aclrtCreateContext(&c, 1));
  aclrtStream s = NULL;
  CHECK_OK(aclrtCreateStream(&s));
  CHECK_OK(aclrtSynchronizeStream(NULL));
  CHECK_OK(aclrtSetDeviceResLimit(1, ACL_RT_DEV_RES_VECTOR_CORE, 2));
  CHECK_OK(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_SATURATION));
  CHECK_OK(aclFinalize());
  /* Everything is gone; the thread is back on device 0's default context. */
  CHECK_MSG(aclrtSetCurrentContext(c), ACL_ERROR_RT_PARAM_INVALID, "not a live context");
  CHECK_MSG(aclrtDestroyStream(s), ACL_ERROR_INVALID_PARAM, "not a live stream");
  int32_t dev = -1;
  CHECK_OK(aclrtGetDevice(&dev));
  CHECK_EQ(dev, 0);
  CHECK_OK(aclrtGetCurrentContext(&d));
  CHECK(d != NULL);
  uint32_t v = 0;
  CHECK_OK(aclrtGetDeviceResLimit(1, ACL_RT_DEV_RES_VECTOR_CORE, &v));
  CHECK_EQ(v, 48);
  aclrtFloatOverflowMode m = ACL_RT_OVERFLOW_MODE_UNDEF;
  CHECK_OK(aclrtGetDeviceSatMode(&m));
  CHECK_EQ(m, ACL_RT_OVERFLOW_MODE_INFNAN);
  CHECK_OK(aclFinalize());
}

/* ---- synchronize device, peer access -------------------------------------- */

TEST(synchronize_device_waits_for_every_stream_of_the_device) {
  CHECK_OK(aclrtSetDevice(0));
  const size_t n = 1 << 20;
  void *dev = NULL, *dev2 = NULL; /* one per stream: the two run at once */
  CHECK_OK(aclrtMalloc(&dev, n, ACL_MEM_MALLOC_HUGE_FIRST));
  CHECK_OK(aclrtMalloc(&dev2, n, ACL_MEM_MALLOC_HUGE_FIRST));
  char *host = malloc(n);
  memset(host, 0x33, n);
  aclrtStream s = NULL;
  CHECK_OK(aclrtCreateStream(&s));
  for (int i = 0; i < 8; i++) {
    CHECK_OK(aclrtMemcpyAsync(dev, n, host, n, ACL_MEMCPY_HOST_TO_DEVICE, s));
    CHECK_OK(aclrtMemcpyAsync(dev2, n, host, n, ACL_MEMCPY_HOST_TO_DEVICE, NULL));
  }
  CHECK_OK(aclrtSynchronizeDevice());
  /* emulated device memory is host-visible */
  CHECK_EQ(((char *)dev)[n - 1], 0x33);
  CHECK_EQ(((char *)dev2)[n - 1], 0x33);
  /* A failure queued on a stream of the device is reported. */
  void *gone = NULL;
  CHECK_OK(aclrtMalloc(&gone, n, ACL_MEM_MALLOC_HUGE_FIRST));
  aclrtNotify nt = NULL;
  CHECK_OK(aclrtCreateNotify(&nt, 0));
  CHECK_OK(aclrtWaitAndResetNotify(nt, s, 0));
  CHECK_OK(aclrtMemcpyAsync(gone, n, host, n, ACL_MEMCPY_HOST_TO_DEVICE, s));
  CHECK_OK(aclrtFree(gone));
  CHECK_OK(aclrtRecordNotify(nt, NULL));
  CHECK_MSG(aclrtSynchronizeDevice(), ACL_ERROR_INVALID_PARAM, "queued work on device 0 failed");
  CHECK_ACL(aclrtSynchronizeStream(s), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtSynchronizeDevice());
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtDestroyNotify(nt));
  free(host);
  CHECK_OK(aclrtFree(dev));
  CHECK_OK(aclrtFree(dev2));
  CHECK_OK(aclFinalize());
}

TEST(disable_peer_access) {
  CHECK_OK(aclrtSetDevice(0));
  CHECK_OK(aclrtDeviceEnablePeerAccess(1, 0));
  CHECK_OK(aclrtDeviceDisablePeerAccess(1));
  CHECK_MSG(aclrtDeviceDisablePeerAccess(0), ACL_ERROR_INVALID_PARAM, "current device");
  CHECK_MSG(aclrtDeviceDisablePeerAccess(8), ACL_ERROR_RT_INVALID_DEVICEID, "out of range");
  CHECK_MSG(aclrtDeviceDisablePeerAccess(-1), ACL_ERROR_RT_INVALID_DEVICEID, "out of range");
}

/* ---- device queries ----------------------------------------------------- */

TEST(device_queries) {
  aclrtRunMode mode = ACL_DEVICE;
  CHECK_OK(aclrtGetRunMode(&mode));
  CHECK_EQ(mode, ACL_HOST);
  CHECK_MSG(aclrtGetRunMode(NULL), ACL_ERROR_INVALID_PARAM, "runMode is NULL");

  const char *soc = aclrtGetSocName();
  CHECK(soc != NULL);
  CHECK(strcmp(soc, "Ascend910B1") == 0);
  int32_t ok = -1;
  CHECK_OK(aclrtCheckArchCompatibility(soc, &ok));
  CHECK_EQ(ok, 1);
  CHECK_OK(aclrtCheckArchCompatibility("Ascend310P3", &ok)); /* another architecture */
  CHECK_EQ(ok, 0);
  CHECK_OK(aclrtCheckArchCompatibility("Ascend910_9392", &ok)); /* an A3: the same architecture */
  CHECK_EQ(ok, 1);
  CHECK_MSG(aclrtCheckArchCompatibility("NoSuchChip", &ok), ACL_ERROR_RT_PARAM_INVALID, "not a SoC");
  CHECK_ACL(aclrtCheckArchCompatibility(NULL, &ok), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtCheckArchCompatibility(soc, NULL), ACL_ERROR_INVALID_PARAM);

  int64_t v = 0;
  CHECK_OK(aclrtGetDeviceInfo(0, ACL_DEV_ATTR_VECTOR_CORE_NUM, &v));
  CHECK_EQ(v, 48);
  CHECK_OK(aclrtGetDeviceInfo(7, ACL_DEV_ATTR_CUBE_CORE_NUM, &v));
  CHECK_EQ(v, 24);
  CHECK_OK(aclrtGetDeviceInfo(3, ACL_DEV_ATTR_PHY_CHIP_ID, &v));
  CHECK_EQ(v, 3);
  CHECK_OK(aclrtGetDeviceInfo(0, ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE, &v));
  CHECK_EQ(v, 64LL << 30);
  CHECK_OK(aclrtGetDeviceInfo(0, ACL_DEV_ATTR_AICPU_CORE_NUM, &v));
  CHECK_EQ(v, 6);
  CHECK_OK(aclrtGetDeviceInfo(0, ACL_DEV_ATTR_NPU_ARCH, &v));
  CHECK_EQ(v, 2201);
  CHECK_MSG(aclrtGetDeviceInfo(0, ACL_DEV_ATTR_L2_CACHE_SIZE, &v), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "not modelled");
  CHECK_MSG(aclrtGetDeviceInfo(0, (aclrtDevAttr)999, &v), ACL_ERROR_RT_PARAM_INVALID, "not an aclrtDevAttr");
  CHECK_MSG(aclrtGetDeviceInfo(8, ACL_DEV_ATTR_CUBE_CORE_NUM, &v), ACL_ERROR_RT_INVALID_DEVICEID, "out of range");
  CHECK_MSG(aclrtGetDeviceInfo(UINT32_MAX, ACL_DEV_ATTR_CUBE_CORE_NUM, &v), ACL_ERROR_RT_INVALID_DEVICEID, "range");
  CHECK_ACL(aclrtGetDeviceInfo(0, ACL_DEV_ATTR_CUBE_CORE_NUM, NULL), ACL_ERROR_INVALID_PARAM);

  int32_t cap = -1;
  CHECK_OK(aclrtGetDeviceCapability(0, ACL_FEATURE_TSCPU_TASK_UPDATE_SUPPORT_AIC_AIV, &cap));
  CHECK_EQ(cap, ACL_DEV_FEATURE_NOT_SUPPORT);
  CHECK_ACL(aclrtGetDeviceCapability(0, (aclrtDevFeatureType)5, &cap), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtGetDeviceCapability(-1, ACL_FEATURE_SYSTEM_MEMQ_EVENT_CROSS_DEV, &cap), ACL_ERROR_RT_INVALID_DEVICEID);
  CHECK_ACL(aclrtGetDeviceCapability(0, ACL_FEATURE_SYSTEM_MEMQ_EVENT_CROSS_DEV, NULL), ACL_ERROR_INVALID_PARAM);

  aclrtDeviceStatus st = ACL_RT_DEVICE_STATUS_ABNORMAL;
  CHECK_OK(aclrtQueryDeviceStatus(1, &st));
  CHECK_EQ(st, ACL_RT_DEVICE_STATUS_NORMAL);
  CHECK_ACL(aclrtQueryDeviceStatus(9, &st), ACL_ERROR_RT_INVALID_DEVICEID);
  CHECK_ACL(aclrtQueryDeviceStatus(0, NULL), ACL_ERROR_INVALID_PARAM);

  aclrtUtilizationInfo u;
  memset(&u, 0x55, sizeof u);
  u.utilizationExtend = NULL;
  CHECK_OK(aclrtGetDeviceUtilizationRate(0, &u));
  CHECK_EQ(u.cubeUtilization, 0);
  CHECK_EQ(u.memoryUtilization, -1);
  u.utilizationExtend = (aclrtUtilizationExtendInfo *)&u;
  CHECK_MSG(aclrtGetDeviceUtilizationRate(0, &u), ACL_ERROR_INVALID_PARAM, "must be NULL");
  u.utilizationExtend = NULL;
  CHECK_ACL(aclrtGetDeviceUtilizationRate(8, &u), ACL_ERROR_RT_INVALID_DEVICEID);
  CHECK_ACL(aclrtGetDeviceUtilizationRate(0, NULL), ACL_ERROR_INVALID_PARAM);

  int32_t least = -1, greatest = -1;
  CHECK_OK(aclrtDeviceGetStreamPriorityRange(&least, &greatest));
  CHECK_EQ(least, 7);
  CHECK_EQ(greatest, 0);
  CHECK_ACL(aclrtDeviceGetStreamPriorityRange(NULL, &greatest), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtDeviceGetStreamPriorityRange(&least, NULL), ACL_ERROR_INVALID_PARAM);
}

TEST(soc_name_from_the_environment) {
  setenv("ASCEND_IPC_EMU_SOC", "Ascend910B4", 1);
  CHECK(strcmp(aclrtGetSocName(), "Ascend910B4") == 0);
  /* That chip's profile. */
  int64_t v = 0;
  CHECK_OK(aclrtGetDeviceInfo(0, ACL_DEV_ATTR_CUBE_CORE_NUM, &v));
  CHECK_EQ(v, 20);
  uint32_t lim = 0;
  CHECK_OK(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_VECTOR_CORE, &lim));
  CHECK_EQ(lim, 40);
  int32_t ok = -1;
  CHECK_OK(aclrtCheckArchCompatibility("Ascend910B1", &ok));
  CHECK_EQ(ok, 1);
}

TEST(soc_without_vector_cores) {
  setenv("ASCEND_IPC_EMU_SOC", "Ascend910ProA", 1);
  int64_t v = -1;
  CHECK_OK(aclrtGetDeviceInfo(0, ACL_DEV_ATTR_VECTOR_CORE_NUM, &v));
  CHECK_EQ(v, 0);
  CHECK_OK(aclrtGetDeviceInfo(0, ACL_DEV_ATTR_NPU_ARCH, &v));
  CHECK_EQ(v, 1001);
  aclrtUtilizationInfo u = {0, 0, 0, 0, NULL};
  CHECK_OK(aclrtGetDeviceUtilizationRate(0, &u));
  CHECK_EQ(u.vectorUtilization, -1);
  CHECK_ACL(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_VECTOR_CORE, 1), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_OK(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_VECTOR_CORE, 0));
}

TEST(soc_name_unknown_to_the_runtime) {
  setenv("ASCEND_IPC_EMU_SOC", "MyChip_1", 1);
  CHECK(strcmp(aclrtGetSocName(), "MyChip_1") == 0);
  int32_t ok = -1;
  CHECK_OK(aclrtCheckArchCompatibility("MyChip_1", &ok));
  CHECK_EQ(ok, 1);
  CHECK_OK(aclrtCheckArchCompatibility("Ascend910B1", &ok));
  CHECK_EQ(ok, 0);
  int64_t v = 0;
  CHECK_ACL(aclrtGetDeviceInfo(0, ACL_DEV_ATTR_NPU_ARCH, &v), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
}

TEST(soc_name_malformed_falls_back) {
  setenv("ASCEND_IPC_EMU_SOC", "bad name;rm", 1);
  CHECK(strcmp(aclrtGetSocName(), "Ascend910B1") == 0);
}

TEST(res_limits) {
  uint32_t v = 0;
  CHECK_OK(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, &v));
  CHECK_EQ(v, 24);
  CHECK_OK(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, 8));
  CHECK_OK(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_VECTOR_CORE, 1));
  CHECK_OK(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, &v));
  CHECK_EQ(v, 8);
  /* The thread on device 0 sees the process's limit; on device 1, the cores. */
  CHECK_OK(aclrtGetResInCurrentThread(ACL_RT_DEV_RES_VECTOR_CORE, &v));
  CHECK_EQ(v, 1);
  CHECK_OK(aclrtSetDevice(1));
  CHECK_OK(aclrtGetResInCurrentThread(ACL_RT_DEV_RES_VECTOR_CORE, &v));
  CHECK_EQ(v, 48);
  CHECK_OK(aclrtResetDeviceResLimit(0));
  CHECK_OK(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, &v));
  CHECK_EQ(v, 24);
  CHECK_OK(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, 0)); /* CANN allows none */
  CHECK_OK(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, &v));
  CHECK_EQ(v, 0);
  CHECK_OK(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, 24));
  CHECK_MSG(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, 25), ACL_ERROR_RT_PARAM_INVALID, "more than");
  CHECK_MSG(aclrtSetDeviceResLimit(0, (aclrtDevResLimitType)2, 1), ACL_ERROR_RT_PARAM_INVALID, "aclrtDevResLimitType");
  CHECK_ACL(aclrtSetDeviceResLimit(8, ACL_RT_DEV_RES_CUBE_CORE, 1), ACL_ERROR_RT_INVALID_DEVICEID);
  CHECK_ACL(aclrtGetDeviceResLimit(-1, ACL_RT_DEV_RES_CUBE_CORE, &v), ACL_ERROR_RT_INVALID_DEVICEID);
  CHECK_ACL(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtGetDeviceResLimit(0, (aclrtDevResLimitType)-1, &v), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtResetDeviceResLimit(64), ACL_ERROR_RT_INVALID_DEVICEID);
  CHECK_ACL(aclrtGetResInCurrentThread(ACL_RT_DEV_RES_CUBE_CORE, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtGetResInCurrentThread((aclrtDevResLimitType)7, &v), ACL_ERROR_RT_PARAM_INVALID);
}

/* ---- versions and attributes ---------------------------------------------- */

TEST(versions_and_cann_attributes) {
  char pkg[] = "runtime", other[] = "driver";
  char ver[ACL_PKG_VERSION_MAX_SIZE] = {0};
  int32_t num = 0;
  CHECK_OK(aclsysGetVersionStr(pkg, ver));
  CHECK(strcmp(ver, "9.0.0") == 0);
  CHECK_OK(aclsysGetVersionNum(pkg, &num));
  CHECK_EQ(num, 90000000);
  CHECK_MSG(aclsysGetVersionStr(other, ver), ACL_ERROR_INVALID_FILE, "not installed");
  CHECK_MSG(aclsysGetVersionNum(other, &num), ACL_ERROR_INVALID_FILE, "not installed");
  CHECK_ACL(aclsysGetVersionStr(NULL, ver), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclsysGetVersionStr(pkg, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclsysGetVersionNum(NULL, &num), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclsysGetVersionNum(pkg, NULL), ACL_ERROR_INVALID_PARAM);

  const aclCannAttr *list = NULL;
  size_t n = 0;
  CHECK_OK(aclGetCannAttributeList(&list, &n));
  CHECK_EQ(n, 3);
  int32_t v = -1;
  for (size_t i = 0; i < n; i++) CHECK_OK(aclGetCannAttribute(list[i], &v));
  CHECK_OK(aclGetCannAttribute(ACL_CANN_ATTR_JIT_COMPILE, &v));
  CHECK_EQ(v, 0);
  CHECK_OK(aclGetCannAttribute(ACL_CANN_ATTR_INF_NAN, &v));
  CHECK_EQ(v, 1);
  CHECK_ACL(aclGetCannAttribute(ACL_CANN_ATTR_UNDEFINED, &v), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclGetCannAttribute(ACL_CANN_ATTR_BF16, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclGetCannAttributeList(NULL, &n), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclGetCannAttributeList(&list, NULL), ACL_ERROR_INVALID_PARAM);
}

/* ---- the last error ---------------------------------------------------------- */

TEST(last_error_get_clears_peek_does_not) {
  CHECK_EQ(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);
  CHECK_EQ(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);
  CHECK_ACL(aclrtSetDevice(99), ACL_ERROR_RT_INVALID_DEVICEID);
  /* A later success leaves it. */
  CHECK_OK(aclrtSetDevice(0));
  CHECK_EQ(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_INVALID_DEVICEID);
  CHECK_EQ(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_INVALID_DEVICEID);
  /* The latest failure wins. */
  CHECK_ACL(aclrtGetRunMode(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_EQ(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_INVALID_PARAM);
  CHECK_EQ(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);
  CHECK_EQ(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);
  /* A bad level is itself an error, and becomes the last one. */
  CHECK_MSG(aclrtGetLastError((aclrtLastErrLevel)1), ACL_ERROR_INVALID_PARAM, "ACL_RT_THREAD_LEVEL");
  CHECK_MSG(aclrtPeekAtLastError((aclrtLastErrLevel)-1), ACL_ERROR_INVALID_PARAM, "ACL_RT_THREAD_LEVEL");
  CHECK_EQ(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_INVALID_PARAM);
}

static void *fail_in_thread(void *arg) {
  (void)arg;
  if (aclrtGetLastError(ACL_RT_THREAD_LEVEL) != ACL_SUCCESS) return (void *)1; /* another thread's is not mine */
  aclrtSetDevice(-5);
  return (void *)(intptr_t)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
}

TEST(last_error_is_per_thread) {
  CHECK_ACL(aclrtGetRunMode(NULL), ACL_ERROR_INVALID_PARAM);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, fail_in_thread, NULL), 0);
  void *r = NULL;
  pthread_join(t, &r);
  CHECK_EQ((intptr_t)r, ACL_ERROR_RT_INVALID_DEVICEID);
  CHECK_EQ(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_INVALID_PARAM);
}

TEST(last_error_of_a_stream_failure_comes_with_its_synchronize) {
  const size_t n = 4096;
  void *d = NULL;
  CHECK_OK(aclrtMalloc(&d, n, ACL_MEM_MALLOC_HUGE_FIRST));
  char host[4096] = {0};
  aclrtStream s = NULL;
  CHECK_OK(aclrtCreateStream(&s));
  aclrtNotify nt = NULL;
  CHECK_OK(aclrtCreateNotify(&nt, 0));
  CHECK_OK(aclrtWaitAndResetNotify(nt, s, 0));
  CHECK_OK(aclrtMemcpyAsync(d, n, host, n, ACL_MEMCPY_HOST_TO_DEVICE, s));
  CHECK_OK(aclrtFree(d));
  CHECK_EQ(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);
  CHECK_OK(aclrtRecordNotify(nt, NULL));
  CHECK_ACL(aclrtSynchronizeStream(s), ACL_ERROR_INVALID_PARAM);
  CHECK_EQ(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtDestroyNotify(nt));
  CHECK_OK(aclFinalize());
}

TEST(error_verbose) {
  aclrtErrorInfo info;
  memset(&info, 0xff, sizeof info);
  CHECK_OK(aclrtGetErrorVerbose(0, &info));
  CHECK_EQ(info.errorType, ACL_RT_NO_ERROR);
  CHECK_EQ(info.tryRepair, 0);
  CHECK_EQ(info.hasDetail, 0);
  CHECK_ACL(aclrtGetErrorVerbose(0, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtGetErrorVerbose(8, &info), ACL_ERROR_RT_INVALID_DEVICEID);
}

/* ---- overflow ------------------------------------------------------------------ */

TEST(sat_mode_and_overflow_switch) {
  aclrtFloatOverflowMode m = ACL_RT_OVERFLOW_MODE_UNDEF;
  CHECK_OK(aclrtGetDeviceSatMode(&m));
  CHECK_EQ(m, ACL_RT_OVERFLOW_MODE_INFNAN);
  CHECK_OK(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_SATURATION));
  CHECK_OK(aclrtGetDeviceSatMode(&m));
  CHECK_EQ(m, ACL_RT_OVERFLOW_MODE_SATURATION);
  /* The process's, as in CANN: the same on every device. */
  CHECK_OK(aclrtSetDevice(1));
  CHECK_OK(aclrtGetDeviceSatMode(&m));
  CHECK_EQ(m, ACL_RT_OVERFLOW_MODE_SATURATION);
  CHECK_MSG(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_UNDEF), ACL_ERROR_RT_PARAM_INVALID, "mode 2");
  CHECK_ACL(aclrtSetDeviceSatMode((aclrtFloatOverflowMode)-1), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtGetDeviceSatMode(NULL), ACL_ERROR_INVALID_PARAM);

  aclrtStream s = NULL;
  CHECK_OK(aclrtCreateStream(&s));
  uint32_t f = 9;
  CHECK_OK(aclrtGetStreamOverflowSwitch(s, &f));
  CHECK_EQ(f, 0);
  CHECK_OK(aclrtSetStreamOverflowSwitch(s, 1));
  CHECK_OK(aclrtGetStreamOverflowSwitch(s, &f));
  CHECK_EQ(f, 1);
  CHECK_OK(aclrtSetStreamOverflowSwitch(NULL, 1));
  CHECK_OK(aclrtGetStreamOverflowSwitch(NULL, &f));
  CHECK_EQ(f, 1);
  CHECK_MSG(aclrtSetStreamOverflowSwitch(s, 2), ACL_ERROR_RT_PARAM_INVALID, "flag 2");
  /* Only for a stream of the current context. */
  CHECK_OK(aclrtSetDevice(2));
  CHECK_MSG(aclrtSetStreamOverflowSwitch(s, 1), ACL_ERROR_RT_STREAM_CONTEXT, "another context");
  CHECK_MSG(aclrtGetStreamOverflowSwitch(s, &f), ACL_ERROR_RT_STREAM_CONTEXT, "another context");
  CHECK_OK(aclrtSetDevice(1));
  CHECK_ACL(aclrtGetStreamOverflowSwitch(s, NULL), ACL_ERROR_INVALID_PARAM);
  int forged = 0;
  CHECK_MSG(aclrtSetStreamOverflowSwitch(&forged, 1), ACL_ERROR_INVALID_PARAM, "not a live stream");
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_MSG(aclrtGetStreamOverflowSwitch(s, &f), ACL_ERROR_INVALID_PARAM, "not a live stream");
  CHECK_OK(aclFinalize());
}

TEST(overflow_status_is_written_by_the_stream) {
  void *d = NULL;
  CHECK_OK(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST));
  CHECK_OK(aclrtMemset(d, 64, 0xee, 64));
  aclrtStream s = NULL;
  CHECK_OK(aclrtCreateStream(&s));
  CHECK_OK(aclrtGetOverflowStatus(d, 64, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  unsigned char h[64];
  CHECK_OK(aclrtMemcpy(h, 64, d, 64, ACL_MEMCPY_DEVICE_TO_HOST));
  for (int i = 0; i < 64; i++) CHECK_EQ(h[i], 0); /* no overflow: the emulated device computes nothing */
  CHECK_OK(aclrtResetOverflowStatus(s));
  CHECK_OK(aclrtResetOverflowStatus(NULL));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_MSG(aclrtGetOverflowStatus(NULL, 64, s), ACL_ERROR_INVALID_PARAM, "outputAddr is NULL");
  CHECK_MSG(aclrtGetOverflowStatus(d, 32, s), ACL_ERROR_RT_PARAM_INVALID, "must be 64");
  CHECK_ACL(aclrtGetOverflowStatus(h, 64, s), ACL_ERROR_INVALID_PARAM); /* host memory */
  int forged = 0;
  CHECK_ACL(aclrtGetOverflowStatus(d, 64, &forged), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtResetOverflowStatus(&forged), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtFree(d));
  CHECK_OK(aclFinalize());
}

/* ---- data types --------------------------------------------------------------- */

TEST(data_type_sizes) {
  CHECK_EQ(aclDataTypeSize(ACL_FLOAT), 4);
  CHECK_EQ(aclDataTypeSize(ACL_FLOAT16), 2);
  CHECK_EQ(aclDataTypeSize(ACL_BF16), 2);
  CHECK_EQ(aclDataTypeSize(ACL_INT8), 1);
  CHECK_EQ(aclDataTypeSize(ACL_INT4), 1);
  CHECK_EQ(aclDataTypeSize(ACL_INT64), 8);
  CHECK_EQ(aclDataTypeSize(ACL_COMPLEX64), 8);
  CHECK_EQ(aclDataTypeSize(ACL_COMPLEX128), 16);
  CHECK_EQ(aclDataTypeSize(ACL_COMPLEX32), 4);
  CHECK_EQ(aclDataTypeSize(ACL_STRING), 0);
  CHECK_EQ(aclDataTypeSize(ACL_DT_UNDEFINED), 0);
  CHECK_EQ(aclDataTypeSize(ACL_FLOAT8_E4M3FN), 1);
}

TEST(float16_conversions) {
  CHECK_EQ(aclFloatToFloat16(1.0f), 0x3c00);
  CHECK_EQ(aclFloatToFloat16(1.625f), 0x3e80);
  CHECK_EQ(aclFloatToFloat16(-2.0f), 0xc000);
  CHECK_EQ(aclFloatToFloat16(65504.0f), 0x7bff);
  CHECK_EQ(aclFloatToFloat16(65520.0f), 0x7c00); /* rounds up to inf */
  CHECK_EQ(aclFloatToFloat16(1e-8f), 0x0000);
  CHECK_EQ(aclFloatToFloat16(5.9604645e-08f), 0x0001); /* the smallest subnormal */
  CHECK_EQ(aclFloatToFloat16(INFINITY), 0x7c00);
  CHECK_EQ(aclFloatToFloat16(-0.0f), 0x8000);
  CHECK((aclFloatToFloat16(NAN) & 0x7c00) == 0x7c00 && (aclFloatToFloat16(NAN) & 0x3ff) != 0);
  CHECK_EQ(aclFloatToFloat16(1.0f + 1.0f / 2048), 0x3c00); /* a tie rounds to even */
  CHECK_EQ(aclFloatToFloat16(1.0f + 3.0f / 2048), 0x3c02);
  CHECK(aclFloat16ToFloat(0x3e80) == 1.625f);
  CHECK(aclFloat16ToFloat(0x0001) == 5.9604645e-08f);
  CHECK(aclFloat16ToFloat(0x7c00) == INFINITY);
  CHECK(isnan(aclFloat16ToFloat(0x7e00)));
  /* Every finite half survives the round trip. */
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00) continue;
    CHECK_EQ(aclFloatToFloat16(aclFloat16ToFloat((aclFloat16)h)), h);
  }
}

/* ---- aclrtMemset of host memory (2_device_P2P) --------------------------------- */

TEST(memset_sets_host_memory_of_malloc_host_and_plain_host_memory) {
  void *h = NULL;
  CHECK_OK(aclrtMallocHost(&h, 100));
  CHECK_OK(aclrtMemset(h, 100, 0x1ab, 100));
  CHECK_EQ(((unsigned char *)h)[0], 0xab);
  CHECK_EQ(((unsigned char *)h)[99], 0xab);
  CHECK_MSG(aclrtMemset((char *)h + 4090, 100, 0, 100), ACL_ERROR_INVALID_PARAM, "");
  /* Plain host memory too, as CANN's driver sets it (sample 12 clears a
   * sockaddr on the stack): only where every page is writable. */
  char plain[16];
  memset(plain, 1, sizeof plain);
  CHECK_OK(aclrtMemset(plain, 16, 0, 15));
  CHECK_EQ(plain[0], 0);
  CHECK_EQ(plain[14], 0);
  CHECK_EQ(plain[15], 1);
  long pg = sysconf(_SC_PAGESIZE);
  char *two = mmap(NULL, 2 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(two != MAP_FAILED);
  CHECK_OK(aclrtMemset(two, 2 * (size_t)pg, 0x5c, 2 * (size_t)pg));
  CHECK_EQ((unsigned char)two[2 * pg - 1], 0x5c);
  CHECK(mprotect(two + pg, (size_t)pg, PROT_READ) == 0);
  CHECK_MSG(aclrtMemset(two, 2 * (size_t)pg, 0, 2 * (size_t)pg), ACL_ERROR_INVALID_PARAM, "not writable host memory");
  CHECK_EQ((unsigned char)two[pg], 0x5c);
  CHECK(munmap(two + pg, (size_t)pg) == 0);
  CHECK_MSG(aclrtMemset(two + pg, (size_t)pg, 0, (size_t)pg), ACL_ERROR_INVALID_PARAM, "not writable host memory");
  CHECK(munmap(two, (size_t)pg) == 0);
  /* The stream form takes memory of the runtime only: plain memory may be
   * gone when the task runs. */
  CHECK_MSG(aclrtMemsetAsync(plain, 16, 0, 16, NULL), ACL_ERROR_INVALID_PARAM, "aclrtMallocHost");
  /* The stream form too, as CANN documents it. */
  CHECK_OK(aclrtMemsetAsync(h, 100, 0x22, 100, NULL));
  CHECK_OK(aclrtSynchronizeStream(NULL));
  CHECK_EQ(((unsigned char *)h)[99], 0x22);
  CHECK_OK(aclrtFreeHost(h));
  CHECK_ACL(aclrtMemset(h, 100, 0, 100), ACL_ERROR_INVALID_PARAM);
}
