/* Kernels: device binaries (host shared objects, ascend_ipc/kernel.h),
 * functions, argument lists with placeholders, launches in stream order,
 * faults as device exceptions reaching the exception callback, every error
 * code, threads, fork and aclFinalize. The binary is
 * tests/c/kernels/test_kernels.c, built beside this test. */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "harness.h"

static char g_path[PATH_MAX];
static pthread_once_t g_path_once = PTHREAD_ONCE_INIT; /* threads load too */

static void find_kernels(void) {
  ssize_t n = readlink("/proc/self/exe", g_path, sizeof g_path - 32);
  CHECK(n > 0);
  g_path[n] = 0;
  char *slash = strrchr(g_path, '/');
  CHECK(slash != NULL);
  strcpy(slash + 1, "test_kernels.so");
}

static const char *kernels_path(void) {
  pthread_once(&g_path_once, find_kernels);
  return g_path;
}

static aclrtBinHandle load(void) {
  aclrtBinHandle b = NULL;
  CHECK_OK(aclrtBinaryLoadFromFile(kernels_path(), NULL, &b));
  CHECK(b != NULL);
  return b;
}

static aclrtFuncHandle func(aclrtBinHandle b, const char *name) {
  aclrtFuncHandle f = NULL;
  CHECK_OK(aclrtBinaryGetFunction(b, name, &f));
  return f;
}

static aclrtArgsHandle args_of(aclrtFuncHandle f, const void *const *ptrs, const size_t *sizes, int n) {
  aclrtArgsHandle a = NULL;
  CHECK_OK(aclrtKernelArgsInit(f, &a));
  for (int i = 0; i < n; i++) {
    aclrtParamHandle p = NULL;
    CHECK_OK(aclrtKernelArgsAppend(a, (void *)ptrs[i], sizes[i], &p));
    CHECK(p != NULL);
  }
  CHECK_OK(aclrtKernelArgsFinalize(a));
  return a;
}

static void *dev_alloc(size_t n) {
  void *p = NULL;
  CHECK_OK(aclrtMalloc(&p, n, ACL_MEM_MALLOC_HUGE_FIRST));
  CHECK_OK(aclrtMemset(p, n, 0, n));
  return p;
}

/* ---- launches ----------------------------------------------------------- */

TEST(kernel_runs_every_block_in_order) {
  aclrtStream s;
  CHECK_OK(aclrtCreateStream(&s));
  aclrtBinHandle b = load();
  aclrtFuncHandle f = func(b, "add_one");
  uint32_t *x = dev_alloc(4096), *order = dev_alloc(4096);
  const void *p[] = {&x, &order};
  size_t n[] = {sizeof x, sizeof order};
  aclrtArgsHandle a = args_of(f, p, n, 2);
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 8, s, NULL, a, NULL));
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 3, s, NULL, a, NULL)); /* an argument list launches again */
  CHECK_OK(aclrtSynchronizeStream(s));
  uint32_t hx[8], ho[12];
  CHECK_OK(aclrtMemcpy(hx, sizeof hx, x, sizeof hx, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK_OK(aclrtMemcpy(ho, sizeof ho, order, sizeof ho, ACL_MEMCPY_DEVICE_TO_HOST));
  for (int i = 0; i < 8; i++) CHECK_EQ(hx[i], i < 3 ? 2 : 1);
  CHECK_EQ(ho[0], 11);
  for (int i = 0; i < 11; i++) CHECK_EQ(ho[1 + i], i < 8 ? i : i - 8);
  CHECK_OK(aclrtBinaryUnLoad(b));
  CHECK_OK(aclrtFree(x));
  CHECK_OK(aclrtFree(order));
  CHECK_OK(aclFinalize());
}

TEST(kernel_keeps_stream_order) {
  aclrtStream s;
  CHECK_OK(aclrtCreateStream(&s));
  aclrtBinHandle b = load();
  aclrtFuncHandle f = func(b, "slow_flag");
  uint32_t *flag = dev_alloc(4096), seen = 7;
  const void *p[] = {&flag};
  size_t n[] = {sizeof flag};
  aclrtArgsHandle a = args_of(f, p, n, 1);
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 1, s, NULL, a, NULL));
  CHECK_OK(aclrtMemcpyAsync(&seen, 4, flag, 4, ACL_MEMCPY_DEVICE_TO_HOST, s));
  CHECK_OK(aclrtBinaryUnLoad(b)); /* queued launches keep the binary loaded */
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(seen, 1);
  CHECK_OK(aclFinalize());
}

TEST(argument_layout_and_context) {
  aclrtStream s;
  CHECK_OK(aclrtCreateStream(&s));
  CHECK_OK(aclrtSetDevice(2));
  aclrtStream s2;
  CHECK_OK(aclrtCreateStream(&s2));
  aclrtBinHandle b = load();
  aclrtFuncHandle f = func(b, "record_ctx");
  struct {
    uint32_t abi, block_dim, arg_count;
    int32_t device;
    size_t args_size;
    size_t offsets[8];
  } *out = dev_alloc(4096);
  uint8_t b8 = 1;
  uint16_t h16 = 2;
  uint32_t w32 = 3;
  uint64_t d64 = 4;
  uint8_t tail[3] = {5, 6, 7};
  const void *p[] = {&out, &b8, &h16, &w32, &d64, tail};
  size_t n[] = {sizeof out, 1, 2, 4, 8, 3};
  aclrtArgsHandle a = args_of(f, p, n, 6);
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 5, s2, NULL, a, NULL));
  CHECK_OK(aclrtSynchronizeStream(s2));
  CHECK_EQ(out->abi, 1);
  CHECK_EQ(out->block_dim, 5);
  CHECK_EQ(out->arg_count, 6);
  CHECK_EQ(out->device, 2); /* the stream's device */
  /* the layout of the C struct of the same members */
  size_t want[] = {0, 8, 10, 12, 16, 24};
  for (int i = 0; i < 6; i++) CHECK_EQ(out->offsets[i], want[i]);
  CHECK_EQ(out->args_size, 27);
  CHECK_OK(aclFinalize());
}

TEST(placeholders_point_to_copies_made_at_launch) {
  aclrtStream s;
  CHECK_OK(aclrtCreateStream(&s));
  aclrtBinHandle b = load();
  aclrtFuncHandle f = func(b, "placeholder_sum");
  int32_t *out = dev_alloc(4096);
  aclrtArgsHandle a;
  CHECK_OK(aclrtKernelArgsInit(f, &a));
  aclrtParamHandle p0, p1, p2;
  CHECK_OK(aclrtKernelArgsAppend(a, &out, sizeof out, &p0));
  CHECK_OK(aclrtKernelArgsAppendPlaceHolder(a, &p1));
  CHECK_OK(aclrtKernelArgsAppendPlaceHolder(a, &p2));
  int32_t *x, *y;
  CHECK_MSG(aclrtKernelArgsFinalize(a), ACL_ERROR_INVALID_PARAM, "placeholder");
  CHECK_OK(aclrtKernelArgsGetPlaceHolderBuffer(a, p1, sizeof *x, (void **)&x));
  CHECK_OK(aclrtKernelArgsGetPlaceHolderBuffer(a, p2, sizeof *y, (void **)&y));
  CHECK_MSG(aclrtLaunchKernelWithConfig(f, 1, s, NULL, a, NULL), ACL_ERROR_INVALID_PARAM, "finalized");
  CHECK_OK(aclrtKernelArgsFinalize(a));
  CHECK_MSG(aclrtKernelArgsAppendPlaceHolder(a, &p2), ACL_ERROR_INVALID_PARAM, "finalized");
  *x = 40;
  *y = 2;
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 1, s, NULL, a, NULL));
  *x = 1000; /* after the launch: not what the queued launch sees */
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(*out, 42);
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 1, s, NULL, a, NULL));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(*out, 1002);
  /* a larger buffer keeps what was written */
  int32_t *x2;
  CHECK_OK(aclrtKernelArgsGetPlaceHolderBuffer(a, p1, 64, (void **)&x2));
  CHECK_EQ(*x2, 1000);
  CHECK_MSG(aclrtKernelArgsGetPlaceHolderBuffer(a, p0, 4, (void **)&x2), ACL_ERROR_INVALID_PARAM, "placeholder");
  CHECK_ACL(aclrtKernelArgsGetPlaceHolderBuffer(a, (aclrtParamHandle)(uintptr_t)99, 4, (void **)&x2),
            ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclFinalize());
}

/* ---- faults ------------------------------------------------------------- */

static struct {
  atomic_int calls;
  uint32_t task, stream, thread, device, code, args_len;
  aclError args_rc, func_rc;
  void *args;
  aclrtFuncHandle func;
  uint32_t at_in_args;
} g_exc;

static void on_exception(aclrtExceptionInfo *info) {
  g_exc.task = aclrtGetTaskIdFromExceptionInfo(info);
  g_exc.stream = aclrtGetStreamIdFromExceptionInfo(info);
  g_exc.thread = aclrtGetThreadIdFromExceptionInfo(info);
  g_exc.device = aclrtGetDeviceIdFromExceptionInfo(info);
  g_exc.code = aclrtGetErrorCodeFromExceptionInfo(info);
  g_exc.args_rc = aclrtGetArgsFromExceptionInfo(info, &g_exc.args, &g_exc.args_len);
  if (g_exc.args_rc == ACL_SUCCESS && g_exc.args_len >= 12) memcpy(&g_exc.at_in_args, (char *)g_exc.args + 8, 4);
  g_exc.func_rc = aclrtGetFuncHandleFromExceptionInfo(info, &g_exc.func);
  atomic_fetch_add(&g_exc.calls, 1);
}

TEST(fault_fails_the_task_and_reaches_the_callback) {
  CHECK_OK(aclrtSetDevice(1));
  aclrtStream s;
  CHECK_OK(aclrtCreateStream(&s));
  CHECK_OK(aclrtSetExceptionInfoCallback(on_exception));
  aclrtBinHandle b = load();
  aclrtFuncHandle f = func(b, "fault_at");
  uint32_t *ran = dev_alloc(4096), at = 2;
  int32_t code = 0;
  const void *p[] = {&ran, &at, &code};
  size_t n[] = {sizeof ran, 4, 4};
  aclrtArgsHandle a = args_of(f, p, n, 3);
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 6, s, NULL, a, NULL));
  uint32_t task;
  CHECK_OK(aclrtGetThreadLastTaskId(&task));
  CHECK_MSG(aclrtSynchronizeStream(s), ACL_ERROR_RT_AICORE_EXCEPTION, "fault_at asked for it");
  CHECK_EQ(atomic_load(&g_exc.calls), 1);
  CHECK_EQ(g_exc.task, task);
  CHECK_EQ(g_exc.device, 1);
  CHECK_EQ(g_exc.code, ACL_ERROR_RT_AICORE_EXCEPTION);
  CHECK_EQ(g_exc.thread, (uint32_t)gettid());
  CHECK_OK(g_exc.args_rc);
  CHECK_EQ(g_exc.args_len, 16);
  CHECK_EQ(g_exc.at_in_args, 2);
  CHECK_OK(g_exc.func_rc);
  CHECK(g_exc.func == f);
  uint32_t h[6];
  CHECK_OK(aclrtMemcpy(h, sizeof h, ran, sizeof h, ACL_MEMCPY_DEVICE_TO_HOST));
  for (int i = 0; i < 6; i++) CHECK_EQ(h[i], i <= 2); /* no block after the fault ran */
  /* the error was reported: the stream works again; a trap code is kept */
  code = ACL_ERROR_RT_AICORE_TRAP_EXCEPTION;
  aclrtArgsHandle a2 = args_of(f, p, n, 3);
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 6, s, NULL, a2, NULL));
  CHECK_ACL(aclrtSynchronizeStream(s), ACL_ERROR_RT_AICORE_TRAP_EXCEPTION);
  CHECK_EQ(atomic_load(&g_exc.calls), 2);
  /* any other code is the AI Core exception */
  code = 12345;
  aclrtArgsHandle a3 = args_of(f, p, n, 3);
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 3, s, NULL, a3, NULL));
  CHECK_ACL(aclrtSynchronizeStream(s), ACL_ERROR_RT_AICORE_EXCEPTION);
  CHECK_OK(aclrtSetExceptionInfoCallback(NULL));
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 3, s, NULL, a3, NULL));
  CHECK_ACL(aclrtSynchronizeStream(s), ACL_ERROR_RT_AICORE_EXCEPTION);
  CHECK_EQ(atomic_load(&g_exc.calls), 3);
  CHECK_OK(aclFinalize());
}

/* A kernel behind a faulted one runs (ACL_CONTINUE_ON_FAILURE, CANN's
 * default); the fault is reported by the synchronize. */
TEST(kernels_after_a_fault_still_run) {
  aclrtStream s;
  CHECK_OK(aclrtCreateStream(&s));
  aclrtBinHandle b = load();
  aclrtFuncHandle ff = func(b, "fault_at"), fa = func(b, "checked_inc");
  uint32_t *ran = dev_alloc(4096), *x = dev_alloc(4096), at = 0;
  int32_t code = 0;
  const void *p[] = {&ran, &at, &code};
  size_t n[] = {sizeof ran, 4, 4};
  const void *q[] = {&x};
  size_t m[] = {sizeof x};
  aclrtArgsHandle af = args_of(ff, p, n, 3), aa = args_of(fa, q, m, 1);
  CHECK_OK(aclrtLaunchKernelWithConfig(ff, 1, s, NULL, af, NULL));
  CHECK_OK(aclrtLaunchKernelWithConfig(fa, 1, s, NULL, aa, NULL));
  CHECK_ACL(aclrtSynchronizeStream(s), ACL_ERROR_RT_AICORE_EXCEPTION);
  CHECK_EQ(x[0], 1);
  CHECK_OK(aclrtLaunchKernelWithConfig(fa, 1, s, NULL, aa, NULL));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(x[0], 2);
  CHECK_OK(aclFinalize());
}

/* ---- bad arguments -------------------------------------------------------- */

TEST(binary_bad_arguments) {
  aclrtBinHandle b;
  CHECK_ACL(aclrtBinaryLoadFromFile(NULL, NULL, &b), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtBinaryLoadFromFile(kernels_path(), NULL, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtBinaryLoadFromFile("/nonexistent/k.o", NULL, &b), ACL_ERROR_RT_PARAM_INVALID, "cannot read");
  CHECK_MSG(aclrtBinaryLoadFromFile("/etc/hostname", NULL, &b), ACL_ERROR_RT_PARAM_INVALID, "kernel.h");
  aclrtBinaryLoadOption opt = {ACL_RT_BINARY_LOAD_OPT_LAZY_LOAD, {.isLazyLoad = 1}};
  aclrtBinaryLoadOptions opts = {&opt, 1};
  CHECK_OK(aclrtBinaryLoadFromFile(kernels_path(), &opts, &b));
  opt.type = (aclrtBinaryLoadOptionType)77;
  aclrtBinHandle b2;
  CHECK_MSG(aclrtBinaryLoadFromFile(kernels_path(), &opts, &b2), ACL_ERROR_INVALID_PARAM, "type");
  opts.options = NULL;
  CHECK_ACL(aclrtBinaryLoadFromFile(kernels_path(), &opts, &b2), ACL_ERROR_INVALID_PARAM);
  aclrtFuncHandle f;
  CHECK_ACL(aclrtBinaryGetFunction(NULL, "add_one", &f), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtBinaryGetFunction((aclrtBinHandle)&opt, "add_one", &f), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtBinaryGetFunction(b, NULL, &f), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtBinaryGetFunction(b, "add_one", NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtBinaryGetFunction(b, "", &f), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtBinaryGetFunction(b, "no_such_kernel", &f), ACL_ERROR_RT_PARAM_INVALID, "no kernel named");
  CHECK_MSG(aclrtBinaryGetFunction(b, "not_a_kernel", &f), ACL_ERROR_RT_PARAM_INVALID, "no kernel named");
  CHECK_MSG(aclrtBinaryGetFunction(b, "old_abi", &f), ACL_ERROR_RT_PARAM_INVALID, "ABI");
  /* a symbol of a dependency (the runtime's own) is not the binary's */
  CHECK_ACL(aclrtBinaryGetFunction(b, "aclrtMalloc", &f), ACL_ERROR_RT_PARAM_INVALID);
  f = func(b, "add_one");
  CHECK_OK(aclrtBinaryUnLoad(b));
  CHECK_ACL(aclrtBinaryUnLoad(b), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtBinaryUnLoad(NULL), ACL_ERROR_INVALID_PARAM);
  aclrtArgsHandle a;
  CHECK_ACL(aclrtKernelArgsInit(f, &a), ACL_ERROR_INVALID_PARAM); /* went with its binary */
  CHECK_OK(aclFinalize());
}

TEST(args_and_launch_bad_arguments) {
  aclrtStream s;
  CHECK_OK(aclrtCreateStream(&s));
  aclrtBinHandle b = load();
  aclrtFuncHandle f = func(b, "add_one"), g = func(b, "slow_flag");
  aclrtArgsHandle a, ag;
  aclrtParamHandle p;
  uint64_t v = 0;
  CHECK_ACL(aclrtKernelArgsInit(NULL, &a), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtKernelArgsInit(f, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtKernelArgsInit((aclrtFuncHandle)&v, &a), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtKernelArgsInit(f, &a));
  CHECK_OK(aclrtKernelArgsInit(g, &ag));
  CHECK_ACL(aclrtKernelArgsAppend(NULL, &v, 8, &p), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtKernelArgsAppend(a, NULL, 8, &p), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtKernelArgsAppend(a, &v, 0, &p), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtKernelArgsAppend(a, &v, 8, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtKernelArgsAppend(a, &v, (size_t)1 << 20, &p), ACL_ERROR_INVALID_PARAM, "bytes");
  CHECK_ACL(aclrtKernelArgsAppendPlaceHolder(a, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtKernelArgsAppendPlaceHolder(NULL, &p), ACL_ERROR_INVALID_PARAM);
  void *buf;
  CHECK_ACL(aclrtKernelArgsGetPlaceHolderBuffer(a, NULL, 4, &buf), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtKernelArgsAppendPlaceHolder(a, &p));
  CHECK_ACL(aclrtKernelArgsGetPlaceHolderBuffer(a, p, 0, &buf), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtKernelArgsGetPlaceHolderBuffer(a, p, 4, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtKernelArgsFinalize(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtKernelArgsGetPlaceHolderBuffer(a, p, 4, &buf));
  CHECK_OK(aclrtKernelArgsFinalize(a));
  CHECK_OK(aclrtKernelArgsFinalize(ag));
  CHECK_MSG(aclrtLaunchKernelWithConfig(f, 0, s, NULL, a, NULL), ACL_ERROR_INVALID_PARAM, "numBlocks");
  CHECK_ACL(aclrtLaunchKernelWithConfig(f, 65536, s, NULL, a, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtLaunchKernelWithConfig(f, 1, s, NULL, a, &v), ACL_ERROR_INVALID_PARAM, "reserve");
  CHECK_ACL(aclrtLaunchKernelWithConfig(NULL, 1, s, NULL, a, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtLaunchKernelWithConfig(f, 1, s, NULL, NULL, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtLaunchKernelWithConfig(f, 1, (aclrtStream)&v, NULL, a, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtLaunchKernelWithConfig(f, 1, s, NULL, ag, NULL), ACL_ERROR_INVALID_PARAM, "another function");
  aclrtLaunchKernelAttr attrs[2] = {{ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT, {.timeout = 5}},
                                    {ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US, {.timeoutUs = {5, 0}}}};
  aclrtLaunchKernelCfg cfg = {attrs, 2};
  CHECK_MSG(aclrtLaunchKernelWithConfig(f, 1, s, &cfg, a, NULL), ACL_ERROR_INVALID_PARAM, "TIMEOUT");
  attrs[1].id = (aclrtLaunchKernelAttrId)42;
  CHECK_ACL(aclrtLaunchKernelWithConfig(f, 1, s, &cfg, a, NULL), ACL_ERROR_INVALID_PARAM);
  cfg.attrs = NULL;
  CHECK_ACL(aclrtLaunchKernelWithConfig(f, 1, s, &cfg, a, NULL), ACL_ERROR_INVALID_PARAM);
  attrs[1] = (aclrtLaunchKernelAttr){ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE, {.engineType = ACL_RT_ENGINE_TYPE_AIV}};
  cfg.attrs = attrs;
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclFinalize());
}

/* ---- threads, fork, aclFinalize ----------------------------------------- */

#define N_THREADS 4
#define N_LAUNCHES 100

static void *launch_many(void *arg) {
  uint32_t *x = arg;
  aclrtStream s;
  aclrtBinHandle b;
  aclrtFuncHandle f;
  aclrtArgsHandle a;
  aclrtParamHandle p;
  uint32_t *order = NULL;
  long bad = aclrtCreateStream(&s) || aclrtBinaryLoadFromFile(kernels_path(), NULL, &b) ||
             aclrtBinaryGetFunction(b, "add_one", &f) || aclrtMalloc((void **)&order, 8192, ACL_MEM_MALLOC_HUGE_FIRST);
  for (int i = 0; i < N_LAUNCHES && !bad; i++) {
    uint32_t *zero = order;
    bad |= aclrtMemsetAsync(order, 8192, 0, 8192, s) != 0;
    bad |= aclrtKernelArgsInit(f, &a) || aclrtKernelArgsAppend(a, &x, sizeof x, &p) ||
           aclrtKernelArgsAppend(a, &zero, sizeof zero, &p) || aclrtKernelArgsFinalize(a);
    bad |= aclrtLaunchKernelWithConfig(f, 4, s, NULL, a, NULL) != 0;
  }
  bad |= aclrtSynchronizeStream(s) != 0;
  bad |= aclrtBinaryUnLoad(b) != 0 || aclrtFree(order) != 0 || aclrtDestroyStream(s) != 0;
  return (void *)bad;
}

TEST(threads_launch_into_their_own_memory) {
  uint32_t *x[N_THREADS];
  pthread_t t[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) {
    x[i] = dev_alloc(4096);
    CHECK_EQ(pthread_create(&t[i], NULL, launch_many, x[i]), 0);
  }
  for (int i = 0; i < N_THREADS; i++) {
    void *bad;
    CHECK_EQ(pthread_join(t[i], &bad), 0);
    CHECK(bad == NULL);
    for (int j = 0; j < 4; j++) CHECK_EQ(x[i][j], N_LAUNCHES);
  }
  CHECK_OK(aclFinalize());
}

static int child_forgets_binaries(void *arg) {
  aclrtFuncHandle *parents = arg;
  aclrtArgsHandle a;
  if (aclrtKernelArgsInit(*parents, &a) != ACL_ERROR_INVALID_PARAM) return 1;
  aclrtBinHandle b;
  aclrtFuncHandle f;
  if (aclrtBinaryLoadFromFile(kernels_path(), NULL, &b) || aclrtBinaryGetFunction(b, "slow_flag", &f)) return 2;
  uint32_t *flag = NULL;
  aclrtParamHandle p;
  if (aclrtMalloc((void **)&flag, 4096, ACL_MEM_MALLOC_HUGE_FIRST)) return 3;
  if (aclrtKernelArgsInit(f, &a) || aclrtKernelArgsAppend(a, &flag, sizeof flag, &p) || aclrtKernelArgsFinalize(a))
    return 4;
  if (aclrtLaunchKernelWithConfig(f, 1, NULL, NULL, a, NULL) || aclrtSynchronizeStream(NULL)) return 5;
  if (*flag != 1) return 6;
  return aclFinalize() ? 7 : 0;
}

TEST(fork_child_starts_clean) {
  aclrtBinHandle b = load();
  aclrtFuncHandle f = func(b, "add_one");
  CHECK_EQ(th_wait(th_spawn(child_forgets_binaries, &f)), 0);
  aclrtArgsHandle a;
  CHECK_OK(aclrtKernelArgsInit(f, &a)); /* the parent's are still there */
  CHECK_OK(aclFinalize());
}

TEST(finalize_unloads_everything) {
  aclrtStream s;
  CHECK_OK(aclrtCreateStream(&s));
  aclrtBinHandle b = load();
  aclrtFuncHandle f = func(b, "slow_flag");
  uint32_t *flag = dev_alloc(4096);
  const void *p[] = {&flag};
  size_t n[] = {sizeof flag};
  aclrtArgsHandle a = args_of(f, p, n, 1);
  for (int i = 0; i < 3; i++) CHECK_OK(aclrtLaunchKernelWithConfig(f, 1, s, NULL, a, NULL));
  CHECK_OK(aclFinalize()); /* drains the stream, then unloads */
  CHECK_ACL(aclrtKernelArgsFinalize(a), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtBinaryGetFunction(b, "slow_flag", &f), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtBinaryUnLoad(b), ACL_ERROR_INVALID_PARAM);
  b = load(); /* and loads again */
  CHECK_OK(aclrtBinaryUnLoad(b));
  CHECK_OK(aclFinalize());
}

/* ---- checked access, cancellation --------------------------------------- */

TEST(checked_access_turns_freed_memory_into_a_fault) {
  aclrtStream s;
  CHECK_OK(aclrtCreateStream(&s));
  aclrtBinHandle b = load();
  aclrtFuncHandle f = func(b, "checked_inc");
  uint32_t *x = dev_alloc(4096);
  const void *p[] = {&x};
  size_t n[] = {sizeof x};
  aclrtArgsHandle a = args_of(f, p, n, 1);
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 4, s, NULL, a, NULL));
  CHECK_OK(aclrtSynchronizeStream(s));
  uint32_t h[4];
  CHECK_OK(aclrtMemcpy(h, sizeof h, x, sizeof h, ACL_MEMCPY_DEVICE_TO_HOST));
  for (int i = 0; i < 4; i++) CHECK_EQ(h[i], 1);
  /* imported-like access on another device's memory: allowed to a kernel */
  CHECK_OK(aclrtSetDevice(3));
  aclrtStream s3;
  CHECK_OK(aclrtCreateStream(&s3));
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 1, s3, NULL, a, NULL));
  CHECK_OK(aclrtSynchronizeStream(s3));
  CHECK_OK(aclrtMemcpy(h, 4, x, 4, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK_EQ(h[0], 2);
  CHECK_OK(aclrtFree(x));
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 1, s, NULL, a, NULL));
  CHECK_MSG(aclrtSynchronizeStream(s), ACL_ERROR_RT_AICORE_EXCEPTION, "kernel read");
  CHECK_OK(aclFinalize());
}

TEST(destroy_force_cancels_a_running_kernel) {
  aclrtStream s;
  CHECK_OK(aclrtCreateStream(&s));
  aclrtBinHandle b = load();
  aclrtFuncHandle f = func(b, "until_cancelled");
  aclrtArgsHandle a;
  CHECK_OK(aclrtKernelArgsInit(f, &a));
  CHECK_OK(aclrtKernelArgsFinalize(a));
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 1000, s, NULL, a, NULL));
  CHECK_OK(aclrtLaunchKernelWithConfig(f, 1000, s, NULL, a, NULL));
  CHECK_ACL(aclrtSynchronizeStreamWithTimeout(s, 50), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
  CHECK_OK(aclrtDestroyStreamForce(s)); /* returns within a poll, not after 60 s */
  CHECK_OK(aclFinalize());
}

/* Two loads of one file are two binaries: unloading one leaves the other's
 * functions working; loads and unloads race with launches safely. */
TEST(two_loads_of_one_file) {
  aclrtStream s;
  CHECK_OK(aclrtCreateStream(&s));
  aclrtBinHandle b1 = load(), b2 = load();
  CHECK(b1 != b2);
  aclrtFuncHandle f1 = func(b1, "checked_inc"), f2 = func(b2, "checked_inc");
  uint32_t *x = dev_alloc(4096);
  const void *p[] = {&x};
  size_t n[] = {sizeof x};
  aclrtArgsHandle a2 = args_of(f2, p, n, 1);
  CHECK_OK(aclrtBinaryUnLoad(b1));
  aclrtArgsHandle a1;
  CHECK_ACL(aclrtKernelArgsInit(f1, &a1), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtLaunchKernelWithConfig(f2, 1, s, NULL, a2, NULL));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(x[0], 1);
  CHECK_OK(aclFinalize());
}

static atomic_bool g_stop;
static void *load_unload_loop(void *arg) {
  (void)arg;
  long bad = 0;
  while (!atomic_load(&g_stop) && !bad) {
    aclrtBinHandle b;
    aclrtFuncHandle f;
    bad |= aclrtBinaryLoadFromFile(kernels_path(), NULL, &b) != 0;
    bad |= aclrtBinaryGetFunction(b, "checked_inc", &f) != 0;
    bad |= aclrtBinaryUnLoad(b) != 0;
  }
  return (void *)bad;
}

TEST(loads_race_with_launches) {
  atomic_store(&g_stop, false);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, load_unload_loop, NULL), 0);
  uint32_t *x = dev_alloc(4096);
  aclrtStream s;
  CHECK_OK(aclrtCreateStream(&s));
  int n = 200;
  for (int i = 0; i < n; i++) {
    aclrtBinHandle b = load();
    aclrtFuncHandle f = func(b, "checked_inc");
    const void *p[] = {&x};
    size_t sz[] = {sizeof x};
    aclrtArgsHandle a = args_of(f, p, sz, 1);
    CHECK_OK(aclrtLaunchKernelWithConfig(f, 1, s, NULL, a, NULL));
    CHECK_OK(aclrtBinaryUnLoad(b)); /* the queued launch keeps it loaded */
  }
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_EQ(x[0], (uint32_t)n);
  atomic_store(&g_stop, true);
  void *bad;
  CHECK_EQ(pthread_join(t, &bad), 0);
  CHECK(bad == NULL);
  CHECK_OK(aclFinalize());
}
