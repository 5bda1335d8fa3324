/*
 * Kernels: device binaries, their functions, argument lists and launches.
 *
 * The emulator's device binary is a host shared object whose kernels follow
 * <ascend_ipc/kernel.h> (the header says the ABI). aclrtBinaryLoadFromFile
 * dlopens it; aclrtBinaryGetFunction finds the descriptor
 * aipc_kernel__<name> that the object itself defines (not one of its
 * dependencies: any other symbol is refused, never called);
 * aclrtLaunchKernelWithConfig copies the finalized argument list and queues
 * a task that runs the kernel once per block on the stream's worker. A
 * kernel's fault fails the task with its device exception code and reaches
 * the exception callback (callback.c).
 *
 * Binaries, functions and argument lists are handles checked against
 * registries (handles.c). A function and an argument list belong to their
 * binary: aclrtBinaryUnLoad takes them out of their registries. A queued
 * launch holds a reference on its function, and the function one on its
 * binary, so the library stays loaded until every launch of it has run.
 *
 * Lock order: the registries' locks, then g_args_mu (an argument list's
 * contents); none is held while calling the streams.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ascend_ipc/kernel.h"
#include "emu_internal.h"
#include "handles.h"

#define MAX_BLOCKS 65535u /* CANN's limit on numBlocks */
#define MAX_ARGS_SIZE (64u * 1024u)

typedef struct bin {
  aipc__handle h; /* first: the registry's head */
  void *dl;
  char path[256];
} bin;

typedef struct func {
  aipc__handle h;
  bin *b; /* a reference */
  const aipc_kernel_desc *desc;
} func;

typedef struct param {
  size_t offset;
  bool placeholder;
  size_t data_size; /* placeholder: its buffer's size (0: none yet) */
  void *data;
} param;

typedef struct args {
  aipc__handle h;
  func *f; /* a reference */
  unsigned char *buf;
  size_t size, cap;
  param *params;
  uint32_t count, pcap;
  bool finalized;
} args;

_Static_assert(offsetof(bin, h) == 0 && offsetof(func, h) == 0 && offsetof(args, h) == 0,
               "an object's address is its registry head's");

static void bin_put(bin *b) {
  if (!aipc__handle_unref(&b->h)) return;
  dlclose(b->dl);
  free(b);
}

static void func_put(func *f) {
  if (!aipc__handle_unref(&f->h)) return;
  bin_put(f->b);
  free(f);
}

static void args_put(args *a) {
  if (!aipc__handle_unref(&a->h)) return;
  for (uint32_t i = 0; i < a->count; i++) free(a->params[i].data);
  free(a->params);
  free(a->buf);
  func_put(a->f);
  free(a);
}

static void bin_release(aipc__handle *h) { bin_put((bin *)h); }
static void func_release(aipc__handle *h) { func_put((func *)h); }
static void args_release(aipc__handle *h) { args_put((args *)h); }
/* Fork child: memory only; a library stays loaded (its mappings are the
 * parent's copy). */
static void bin_forget(aipc__handle *h) { free(h); }
static void func_forget(aipc__handle *h) { free(h); }
static void args_forget(aipc__handle *h) {
  args *a = (args *)h;
  for (uint32_t i = 0; i < a->count; i++) free(a->params[i].data);
  free(a->params);
  free(a->buf);
  free(a);
}

static const aipc__handle_ops g_bin_ops = {"binary handle", bin_release, bin_forget, NULL};
static const aipc__handle_ops g_func_ops = {"function handle", func_release, func_forget, NULL};
static const aipc__handle_ops g_args_ops = {"arguments handle", args_release, args_forget, NULL};
static aipc__handles g_bins = AIPC__HANDLES_INIT(&g_bin_ops);
static aipc__handles g_funcs = AIPC__HANDLES_INIT(&g_func_ops);
static aipc__handles g_argss = AIPC__HANDLES_INIT(&g_args_ops);
static pthread_mutex_t g_args_mu = PTHREAD_MUTEX_INITIALIZER; /* every argument list's contents */

/* ---- binaries ----------------------------------------------------------- */

aclError aipc__emu_binary_load_from_file(const char *binPath, aclrtBinaryLoadOptions *options,
                                         aclrtBinHandle *binHandle) {
  const char *call = AIPC_CALL_NAME(binary_load_from_file);
  if (!binPath) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: binPath is NULL", call);
  if (!binHandle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: binHandle is NULL", call);
  if (options) {
    if (options->numOpt > 0 && !options->options)
      return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: options->options is NULL with numOpt %zu", call, options->numOpt);
    for (size_t i = 0; i < options->numOpt; i++) {
      aclrtBinaryLoadOptionType t = options->options[i].type;
      if (t != ACL_RT_BINARY_LOAD_OPT_LAZY_LOAD && t != ACL_RT_BINARY_LOAD_OPT_MAGIC &&
          t != ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE)
        return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: options->options[%zu].type %d is not a load option", call, i,
                          (int)t);
    }
    /* Accepted, and of no consequence here: a host object has one kind of core
     * and is loaded whole. */
  }
  if (access(binPath, R_OK) != 0)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: cannot read %.300s: %s", call, binPath, strerror(errno));
  dlerror();
  void *dl = dlopen(binPath, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char *why = dlerror();
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: %.300s is not a binary the emulator can load (a host shared object of kernels, see "
                      "ascend_ipc/kernel.h): %.300s",
                      call, binPath, why ? why : "dlopen failed");
  }
  bin *b = calloc(1, sizeof *b);
  if (!b) {
    dlclose(dl);
    return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  }
  aipc__handle_init(&b->h);
  b->dl = dl;
  snprintf(b->path, sizeof b->path, "%s", binPath);
  aclError rc = aipc__handles_add(&g_bins, call, &b->h);
  if (rc) return rc;
  *binHandle = b;
  return ACL_SUCCESS;
}

static bool owned_by_bin(aipc__handle *h, void *b) { return ((func *)h)->b == b; }
static bool args_of_bin(aipc__handle *h, void *b) { return ((args *)h)->f->b == b; }

aclError aipc__emu_binary_unload(aclrtBinHandle binHandle) {
  const char *call = AIPC_CALL_NAME(binary_unload);
  aipc__handle *o;
  aclError rc = aipc__handles_remove(&g_bins, call, binHandle, &o);
  if (rc) return rc;
  for (aipc__handle *h; (h = aipc__handles_take_if(&g_argss, args_of_bin, o));) args_put((args *)h);
  for (aipc__handle *h; (h = aipc__handles_take_if(&g_funcs, owned_by_bin, o));) func_put((func *)h);
  bin_put((bin *)o); /* the library goes once queued launches have run */
  return ACL_SUCCESS;
}

aclError aipc__emu_binary_get_function(const aclrtBinHandle binHandle, const char *kernelName,
                                       aclrtFuncHandle *funcHandle) {
  const char *call = AIPC_CALL_NAME(binary_get_function);
  if (!kernelName) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: kernelName is NULL", call);
  if (!funcHandle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: funcHandle is NULL", call);
  size_t n = strlen(kernelName);
  if (n == 0 || n > 200) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: kernelName has %zu characters", call, n);
  aipc__handle *o;
  aclError rc = aipc__handles_get(&g_bins, call, "binHandle", binHandle, &o);
  if (rc) return rc;
  bin *b = (bin *)o;
  char sym[256];
  snprintf(sym, sizeof sym, AIPC_KERNEL_SYMBOL_PREFIX "%s", kernelName);
  const aipc_kernel_desc *d = dlsym(b->dl, sym);
  /* Only the object's own definition: dlsym also searches its dependencies. */
  struct link_map *self = NULL, *where = NULL;
  Dl_info info;
  if (d && (dlinfo(b->dl, RTLD_DI_LINKMAP, &self) != 0 ||
            !dladdr1(d, &info, (void **)&where, RTLD_DL_LINKMAP) || where != self))
    d = NULL;
  if (!d) {
    bin_put(b);
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %.300s has no kernel named \"%s\" (symbol %s, see AIPC_KERNEL)",
                      call, b->path, kernelName, sym);
  }
  if (d->magic != AIPC_KERNEL_MAGIC || d->abi != AIPC_KERNEL_ABI || !d->fn) {
    bin_put(b);
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: %s in %.300s is not a kernel of this emulator's ABI (version %u expected)", call, sym,
                      b->path, AIPC_KERNEL_ABI);
  }
  func *f = calloc(1, sizeof *f);
  if (!f) {
    bin_put(b);
    return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  }
  aipc__handle_init(&f->h);
  f->b = b; /* keeps the get's reference */
  f->desc = d;
  if ((rc = aipc__handles_add(&g_funcs, call, &f->h))) return rc;
  *funcHandle = f;
  return ACL_SUCCESS;
}

/* ---- argument lists -------------------------------------------------- */

static aclError get_func(const char *call, aclrtFuncHandle h, func **out) {
  aipc__handle *o;
  aclError rc = aipc__handles_get(&g_funcs, call, "funcHandle", h, &o);
  if (rc == ACL_SUCCESS) *out = (func *)o;
  return rc;
}

static aclError get_args(const char *call, aclrtArgsHandle h, args **out) {
  aipc__handle *o;
  aclError rc = aipc__handles_get(&g_argss, call, "argsHandle", h, &o);
  if (rc == ACL_SUCCESS) *out = (args *)o;
  return rc;
}

aclError aipc__emu_kernel_args_init(aclrtFuncHandle funcHandle, aclrtArgsHandle *argsHandle) {
  const char *call = AIPC_CALL_NAME(kernel_args_init);
  if (!argsHandle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: argsHandle is NULL", call);
  func *f;
  aclError rc = get_func(call, funcHandle, &f);
  if (rc) return rc;
  args *a = calloc(1, sizeof *a);
  if (!a) {
    func_put(f);
    return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  }
  aipc__handle_init(&a->h);
  a->f = f; /* keeps the get's reference */
  if ((rc = aipc__handles_add(&g_argss, call, &a->h))) return rc;
  *argsHandle = a;
  return ACL_SUCCESS;
}

/* Appends an argument of size bytes (data NULL: a placeholder) under
 * g_args_mu; its param record's index in *index. */
static aclError append(const char *call, args *a, const void *data, size_t size, bool placeholder, uint32_t *index) {
  if (a->finalized)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: the arguments were finalized (aclrtKernelArgsFinalize)", call);
  size_t align = (size == 1 || size == 2 || size == 4) ? size : 8;
  size_t off = (a->size + align - 1) & ~(align - 1);
  if (size > MAX_ARGS_SIZE || off + size > MAX_ARGS_SIZE)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: the arguments would take %zu bytes, more than %u", call,
                      off + size, MAX_ARGS_SIZE);
  if (off + size > a->cap) {
    size_t cap = a->cap ? a->cap : 64;
    while (cap < off + size) cap *= 2;
    unsigned char *nb = realloc(a->buf, cap);
    if (!nb) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
    memset(nb + a->cap, 0, cap - a->cap);
    a->buf = nb;
    a->cap = cap;
  }
  if (a->count == a->pcap) {
    uint32_t pcap = a->pcap ? a->pcap * 2 : 8;
    param *np = realloc(a->params, pcap * sizeof *np);
    if (!np) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
    a->params = np;
    a->pcap = pcap;
  }
  if (data) memcpy(a->buf + off, data, size);
  a->params[a->count] = (param){off, placeholder, 0, NULL};
  *index = a->count++;
  a->size = off + size;
  return ACL_SUCCESS;
}

/* A param handle is its index + 1 in its list: checked against the list,
 * never dereferenced. */
static aclrtParamHandle param_handle(uint32_t index) { return (aclrtParamHandle)(uintptr_t)(index + 1); }

aclError aipc__emu_kernel_args_append(aclrtArgsHandle argsHandle, void *param_, size_t paramSize,
                                      aclrtParamHandle *paramHandle) {
  const char *call = AIPC_CALL_NAME(kernel_args_append);
  if (!param_) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: param is NULL", call);
  if (paramSize == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: paramSize is 0", call);
  if (!paramHandle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: paramHandle is NULL", call);
  args *a;
  aclError rc = get_args(call, argsHandle, &a);
  if (rc) return rc;
  uint32_t index = 0;
  pthread_mutex_lock(&g_args_mu);
  rc = append(call, a, param_, paramSize, false, &index);
  pthread_mutex_unlock(&g_args_mu);
  args_put(a);
  if (rc == ACL_SUCCESS) *paramHandle = param_handle(index);
  return rc;
}

aclError aipc__emu_kernel_args_append_place_holder(aclrtArgsHandle argsHandle, aclrtParamHandle *paramHandle) {
  const char *call = AIPC_CALL_NAME(kernel_args_append_place_holder);
  if (!paramHandle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: paramHandle is NULL", call);
  args *a;
  aclError rc = get_args(call, argsHandle, &a);
  if (rc) return rc;
  uint32_t index = 0;
  pthread_mutex_lock(&g_args_mu);
  rc = append(call, a, NULL, sizeof(void *), true, &index);
  pthread_mutex_unlock(&g_args_mu);
  args_put(a);
  if (rc == ACL_SUCCESS) *paramHandle = param_handle(index);
  return rc;
}

aclError aipc__emu_kernel_args_get_place_holder_buffer(aclrtArgsHandle argsHandle, aclrtParamHandle paramHandle,
                                                       size_t dataSize, void **bufferAddr) {
  const char *call = AIPC_CALL_NAME(kernel_args_get_place_holder_buffer);
  if (!paramHandle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: paramHandle is NULL", call);
  if (dataSize == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: dataSize is 0", call);
  if (dataSize > MAX_ARGS_SIZE)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: dataSize %zu is more than %u", call, dataSize, MAX_ARGS_SIZE);
  if (!bufferAddr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: bufferAddr is NULL", call);
  args *a;
  aclError rc = get_args(call, argsHandle, &a);
  if (rc) return rc;
  uintptr_t i = (uintptr_t)paramHandle - 1;
  pthread_mutex_lock(&g_args_mu);
  if (i >= a->count || !a->params[i].placeholder) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: paramHandle %p is not a placeholder of argsHandle %p", call,
                    paramHandle, argsHandle);
  } else {
    param *p = &a->params[i];
    if (dataSize > p->data_size) { /* grows, keeping what was written */
      void *nd = calloc(1, dataSize);
      if (!nd) {
        rc = aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
      } else {
        if (p->data) memcpy(nd, p->data, p->data_size);
        free(p->data);
        p->data = nd;
        p->data_size = dataSize;
      }
    }
    if (!rc) *bufferAddr = p->data;
  }
  pthread_mutex_unlock(&g_args_mu);
  args_put(a);
  return rc;
}

aclError aipc__emu_kernel_args_finalize(aclrtArgsHandle argsHandle) {
  const char *call = AIPC_CALL_NAME(kernel_args_finalize);
  args *a;
  aclError rc = get_args(call, argsHandle, &a);
  if (rc) return rc;
  pthread_mutex_lock(&g_args_mu);
  for (uint32_t i = 0; i < a->count && !rc; i++)
    if (a->params[i].placeholder && !a->params[i].data)
      rc = aipc__fail(ACL_ERROR_INVALID_PARAM,
                      "%s: placeholder %u has no buffer (aclrtKernelArgsGetPlaceHolderBuffer)", call, i);
  if (!rc) a->finalized = true;
  pthread_mutex_unlock(&g_args_mu);
  args_put(a);
  return rc;
}

/* ---- launches ----------------------------------------------------------- */

typedef struct kernel_task {
  aipc__task t;
  func *f; /* a reference */
  uint32_t blocks;
  int32_t device;
  uint32_t stream_id;
  uint32_t thread_id; /* the launching thread's */
  uint32_t task_id;   /* on its stream */
  unsigned char *buf; /* the arguments, then the placeholders' copies */
  size_t args_size;
  uint32_t count;
  size_t *offsets;
} kernel_task;

typedef struct fault_state {
  bool faulted;
  int32_t code;
  char why[256];
  const atomic_bool *cancel; /* the stream's */
} fault_state;

static int kernel_cancelled(const aipc_kernel_ctx *ctx) {
  const fault_state *fs = ctx->runtime_;
  return atomic_load(fs->cancel) ? 1 : 0;
}

static void kernel_fault(const aipc_kernel_ctx *ctx, int32_t code, const char *why) {
  fault_state *fs = ctx->runtime_;
  if (fs->faulted) return;
  fs->faulted = true;
  static const int32_t codes[] = AIPC_KERNEL_FAULT_CODES;
  fs->code = codes[0];
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
    if (code == codes[i]) fs->code = code;
  snprintf(fs->why, sizeof fs->why, "%s", why ? why : "no reason given");
}

/* A kernel's checked access: validated and copied under the memory lock
 * (memory.c), so memory freed meanwhile is refused, never touched. A device
 * kernel reaches any device's memory, imported memory included: the copy is
 * checked as one on the device that holds the memory. (The kernel's side of
 * the copy is its own host memory, which any copy accepts.) */
static int kernel_move(const aipc_kernel_ctx *ctx, void *dst, const void *src, size_t n, bool to_device) {
  if (n == 0) return 0;
  aipc__block b;
  int32_t device = ctx->device;
  if (aipc__mem_lookup(to_device ? dst : src, &b)) device = b.device;
  /* DEFAULT: the direction follows the addresses, so registered host memory
   * (aclrtHostGetDevicePointer) reads as a device kernel reads it. */
  aclError rc = aipc__mem_copy(to_device ? "kernel write" : "kernel read", dst, n, src, n, ACL_MEMCPY_DEFAULT,
                               device, true);
  if (rc == ACL_SUCCESS) return 0;
  kernel_fault(ctx, 0, aipc__recent_err_msg());
  return -1;
}

static int kernel_read(const aipc_kernel_ctx *ctx, void *dst, const void *src, size_t n) {
  return kernel_move(ctx, dst, src, n, false);
}

static int kernel_write(const aipc_kernel_ctx *ctx, void *dst, const void *src, size_t n) {
  return kernel_move(ctx, dst, src, n, true);
}

static void free_kernel(aipc__task *t) {
  kernel_task *k = (kernel_task *)t;
  func_put(k->f);
  free(k->buf);
  free(k->offsets);
  free(k);
}

static aclError run_kernel(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  kernel_task *k = (kernel_task *)t;
  (void)failed; /* runs behind a failed task, as CANN's default failure mode has it; the stream
                 * drops it under ACL_STOP_ON_FAILURE */
  fault_state fs = {false, 0, {0}, cancel};
  aipc_kernel_ctx ctx = {AIPC_KERNEL_ABI, 0, k->blocks, k->device, k->buf, k->args_size, k->count, k->offsets,
                         kernel_fault, kernel_cancelled, kernel_read, kernel_write, &fs};
  uint32_t i = 0;
  for (; i < k->blocks && !fs.faulted && !atomic_load(cancel); i++) {
    ctx.block_idx = i;
    k->f->desc->fn(&ctx);
  }
  if (!fs.faulted) return ACL_SUCCESS;
  aipc__exception e = {k->task_id, k->stream_id, k->thread_id, (uint32_t)k->device, (uint32_t)fs.code, k->f, k->buf,
                       (uint32_t)k->args_size};
  aipc__exception_report(&e);
  return aipc__fail(fs.code, "kernel %s (task %u, stream %u, device %d) faulted in block %u of %u: %s",
                    k->f->desc->name, k->task_id, k->stream_id, (int)k->device, i - 1, k->blocks, fs.why);
}

static aclError check_cfg(const char *call, const aclrtLaunchKernelCfg *cfg) {
  if (!cfg) return ACL_SUCCESS;
  if (cfg->numAttrs > 0 && !cfg->attrs)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: cfg->attrs is NULL with numAttrs %zu", call, cfg->numAttrs);
  bool timeout = false, timeout_us = false;
  for (size_t i = 0; i < cfg->numAttrs; i++) {
    aclrtLaunchKernelAttrId id = cfg->attrs[i].id;
    if (id < ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE || id > ACL_RT_LAUNCH_KERNEL_ATTR_ENABLE_PROFILING)
      return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: cfg->attrs[%zu].id %d is not an aclrtLaunchKernelAttrId", call,
                        i, (int)id);
    if (id == ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE && cfg->attrs[i].value.engineType != ACL_RT_ENGINE_TYPE_AIC &&
        cfg->attrs[i].value.engineType != ACL_RT_ENGINE_TYPE_AIV)
      return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: cfg->attrs[%zu] engineType %d is not AIC or AIV", call, i,
                        (int)cfg->attrs[i].value.engineType);
    timeout |= id == ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT;
    timeout_us |= id == ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US;
  }
  if (timeout && timeout_us)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: cfg has both ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT and _TIMEOUT_US",
                      call);
  return ACL_SUCCESS; /* the attributes tune a device's scheduling: nothing to do on the host */
}

/* Copies a's finalized arguments into k (under g_args_mu): placeholders
 * point to copies of their buffers laid after the arguments. */
static aclError snapshot(const char *call, args *a, kernel_task *k) {
  if (!a->finalized)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: the arguments are not finalized (aclrtKernelArgsFinalize)", call);
  size_t total = (a->size + 7) & ~(size_t)7;
  for (uint32_t i = 0; i < a->count; i++)
    if (a->params[i].placeholder) total += (a->params[i].data_size + 7) & ~(size_t)7;
  k->buf = calloc(1, total ? total : 1);
  k->offsets = calloc(a->count ? a->count : 1, sizeof *k->offsets);
  if (!k->buf || !k->offsets) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  if (a->size) memcpy(k->buf, a->buf, a->size);
  size_t at = (a->size + 7) & ~(size_t)7;
  for (uint32_t i = 0; i < a->count; i++) {
    const param *p = &a->params[i];
    k->offsets[i] = p->offset;
    if (!p->placeholder) continue;
    memcpy(k->buf + at, p->data, p->data_size);
    void *where = k->buf + at;
    memcpy(k->buf + p->offset, &where, sizeof where);
    at += (p->data_size + 7) & ~(size_t)7;
  }
  k->args_size = a->size;
  k->count = a->count;
  return ACL_SUCCESS;
}

aclError aipc__emu_launch_kernel_with_config(aclrtFuncHandle funcHandle, uint32_t numBlocks, aclrtStream stream,
                                             aclrtLaunchKernelCfg *cfg, aclrtArgsHandle argsHandle, void *reserve) {
  const char *call = AIPC_CALL_NAME(launch_kernel_with_config);
  if (numBlocks == 0 || numBlocks > MAX_BLOCKS)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: numBlocks %u is not in 1..%u", call, numBlocks, MAX_BLOCKS);
  if (reserve) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: reserve must be NULL", call);
  aclError rc = check_cfg(call, cfg);
  if (rc) return rc;
  uint32_t stream_id;
  int32_t device;
  if ((rc = aipc__stream_id(call, stream, &stream_id)) || (rc = aipc__stream_device(call, stream, &device))) return rc;
  func *f;
  if ((rc = get_func(call, funcHandle, &f))) return rc;
  args *a;
  if ((rc = get_args(call, argsHandle, &a))) {
    func_put(f);
    return rc;
  }
  kernel_task *k = calloc(1, sizeof *k);
  if (!k) {
    args_put(a);
    func_put(f);
    return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  }
  k->t.run = run_kernel;
  k->t.free = free_kernel;
  k->f = f;
  k->blocks = numBlocks;
  k->device = device;
  k->stream_id = stream_id;
  k->thread_id = (uint32_t)gettid();
  pthread_mutex_lock(&g_args_mu);
  if (a->f != f)
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: argsHandle %p was made for another function (aclrtKernelArgsInit)",
                    call, argsHandle);
  else
    rc = snapshot(call, a, k);
  pthread_mutex_unlock(&g_args_mu);
  args_put(a);
  if (rc) {
    free_kernel(&k->t);
    return rc;
  }
  return aipc__stream_submit_id(call, stream, &k->t, &k->task_id);
}

/* ---- aclFinalize, fork ------------------------------------------------ */

void aipc__kernel_finalize(void) {
  aipc__handles_finalize(&g_argss);
  aipc__handles_finalize(&g_funcs);
  aipc__handles_finalize(&g_bins);
}

void aipc__kernel_atfork_prepare(void) {
  aipc__handles_atfork_prepare(&g_bins);
  aipc__handles_atfork_prepare(&g_funcs);
  aipc__handles_atfork_prepare(&g_argss);
  pthread_mutex_lock(&g_args_mu);
}

void aipc__kernel_atfork_parent(void) {
  pthread_mutex_unlock(&g_args_mu);
  aipc__handles_atfork_parent(&g_argss);
  aipc__handles_atfork_parent(&g_funcs);
  aipc__handles_atfork_parent(&g_bins);
}

void aipc__kernel_atfork_child(void) {
  pthread_mutex_init(&g_args_mu, NULL);
  aipc__handles_atfork_child(&g_argss);
  aipc__handles_atfork_child(&g_funcs);
  aipc__handles_atfork_child(&g_bins);
}
