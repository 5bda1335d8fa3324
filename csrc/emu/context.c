/*
 * Contexts: a context belongs to a device and names the streams created in
 * it (stream.c keeps each stream's context id, and a default stream per
 * context). Every device has a default context, created the first time it is
 * needed (CANN creates it at aclrtSetDevice); aclrtCreateContext makes more.
 *
 * A thread's current context is device.c's per-thread state: none means its
 * current device's default context. Handles are checked against a registry
 * (handles.c), so a destroyed or made-up context is an error, never a crash;
 * a context also has an id that is never reused, so a thread whose context
 * was destroyed and whose address was reused by a new one is not fooled.
 *
 * aclrtDestroyContext needs the streams, so it lives above stream.c
 * (context_ops.c); this file only takes the context out of the registry.
 * Lock: the registry's (handles.h), which also guards g_default; nothing
 * here calls out while holding it. In the fork order it comes after the
 * streams' locks and before memory's (runtime.c).
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

#include "emu_internal.h"
#include "handles.h"

typedef struct context {
  aipc__handle h; /* first: the registry's head */
  uint64_t id;
  int32_t device;
  bool is_default;
} context;
_Static_assert(offsetof(context, h) == 0, "a context's address is its registry head's");

static void release(aipc__handle *h);
static void forget(aipc__handle *h);
static const aipc__handle_ops g_ops = {"context", release, forget, NULL};
static aipc__handles g_ctxs = AIPC__HANDLES_INIT(&g_ops);
static context *g_default[AIPC_MAX_DEVICES]; /* under the registry lock */
static _Atomic uint64_t g_next_id = 1;

static void put(context *c) {
  if (aipc__handle_unref(&c->h)) free(c);
}

static void release(aipc__handle *h) { put((context *)h); }

static void forget(aipc__handle *h) { free(h); }

static aclError check_device(const char *call, int32_t id) {
  uint32_t n = aipc__config_get()->devices;
  if (id < 0 || (uint32_t)id >= n)
    return aipc__fail(ACL_ERROR_RT_INVALID_DEVICEID, "%s: deviceId %d is out of range: %u device%s (0..%u)", call,
                      (int)id, n, n == 1 ? "" : "s", n - 1);
  return ACL_SUCCESS;
}

static context *ctx_new(int32_t device, bool is_default) {
  context *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  aipc__handle_init(&c->h);
  c->id = atomic_fetch_add(&g_next_id, 1);
  c->device = device;
  c->is_default = is_default;
  return c;
}

/* The default context of device, created if needed; referenced. */
static aclError default_ctx(const char *call, int32_t device, context **out) {
  for (;;) {
    /* Referenced under the lock: aclFinalize may be taking it out. */
    aipc__handles_lock(&g_ctxs);
    context *c = g_default[device];
    if (c) aipc__handle_ref(&c->h);
    aipc__handles_unlock(&g_ctxs);
    if (c) {
      *out = c;
      return ACL_SUCCESS;
    }
    /* None yet: make one (registered first, outside the lock, since the
     * registry's add takes it), then publish it unless another thread did. */
    context *n = ctx_new(device, true);
    if (!n) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
    aclError rc = aipc__handles_add(&g_ctxs, call, &n->h);
    if (rc) return rc;
    aipc__handles_lock(&g_ctxs);
    bool won = !g_default[device];
    if (won) g_default[device] = n;
    aipc__handles_unlock(&g_ctxs);
    aipc__handle *o;
    if (!won && aipc__handles_remove(&g_ctxs, call, n, &o) == ACL_SUCCESS) put((context *)o);
  }
}

/* The live context for handle h, referenced; code is CANN's for a handle
 * that is not one (aclrtSetCurrentContext's runtime layer says
 * ACL_ERROR_RT_PARAM_INVALID, aclrtDestroyContext's ACL_ERROR_RT_CONTEXT_NULL). */
static aclError lookup(const char *call, const char *what, const void *h, aclError code, context **out) {
  if (!h) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s is NULL", call, what);
  aipc__handle *o;
  if (aipc__handles_get(&g_ctxs, call, what, h, &o) != ACL_SUCCESS)
    return aipc__fail(code, "%s: %s %p is not a live context (never created, or destroyed)", call, what, h);
  *out = (context *)o;
  return ACL_SUCCESS;
}

/* The calling thread's current context, referenced. */
static aclError current(const char *call, context **out) {
  uint64_t id = 0;
  void *mine = aipc__device_context(&id);
  if (!mine) return default_ctx(call, aipc__device_current(), out);
  aipc__handle *o = NULL;
  if (aipc__handles_get(&g_ctxs, call, "context", mine, &o) == ACL_SUCCESS) {
    if (((context *)o)->id == id) {
      *out = (context *)o;
      return ACL_SUCCESS;
    }
    put((context *)o); /* another context at the same address */
  }
  return aipc__fail(ACL_ERROR_RT_CONTEXT_NULL,
                    "%s: the calling thread's current context %p was destroyed; set another "
                    "(aclrtSetCurrentContext or aclrtSetDevice)",
                    call, mine);
}

aclError aipc__ctx_current(const char *call, uint64_t *id, int32_t *device) {
  context *c;
  aclError rc = current(call, &c);
  if (rc) return rc;
  *id = c->id;
  *device = c->device;
  put(c);
  return ACL_SUCCESS;
}

aclError aipc__emu_create_context(aclrtContext *out, int32_t deviceId) {
  const char *call = AIPC_CALL_NAME(create_context);
  if (!out) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: context is NULL", call);
  aclError rc = check_device(call, deviceId);
  if (rc) return rc;
  context *c = ctx_new(deviceId, false);
  if (!c) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  uint64_t id = c->id;
  if ((rc = aipc__handles_add(&g_ctxs, call, &c->h))) return rc;
  /* CANN: the new context becomes the calling thread's. */
  aipc__device_set_context(deviceId, c, id);
  *out = c;
  return ACL_SUCCESS;
}

aclError aipc__emu_set_current_context(aclrtContext h) {
  const char *call = AIPC_CALL_NAME(set_current_context);
  context *c = NULL;
  aclError rc = lookup(call, "context", h, ACL_ERROR_RT_PARAM_INVALID, &c);
  if (rc) return rc;
  if (c->is_default)
    aipc__device_set_context(c->device, NULL, 0);
  else
    aipc__device_set_context(c->device, c, c->id);
  put(c);
  return ACL_SUCCESS;
}

aclError aipc__emu_get_current_context(aclrtContext *out) {
  const char *call = AIPC_CALL_NAME(get_current_context);
  if (!out) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: context is NULL", call);
  context *c;
  aclError rc = current(call, &c);
  if (rc) return rc;
  *out = c;
  put(c);
  return ACL_SUCCESS;
}

aclError aipc__ctx_remove(const char *call, aclrtContext h, uint64_t *id, void **obj) {
  context *c = NULL;
  aclError rc = lookup(call, "context", h, ACL_ERROR_RT_CONTEXT_NULL, &c);
  if (rc) return rc;
  bool is_default = c->is_default;
  put(c);
  if (is_default)
    return aipc__fail(ACL_ERROR_RT_CONTEXT_NULL,
                      "%s: context %p is a device's default context, which cannot be destroyed "
                      "(aclrtResetDevice releases it)",
                      call, h);
  aipc__handle *o;
  if (aipc__handles_remove(&g_ctxs, call, h, &o) != ACL_SUCCESS) /* a racing destroy won */
    return aipc__fail(ACL_ERROR_RT_CONTEXT_NULL, "%s: context %p is not a live context (destroyed meanwhile)", call, h);
  c = (context *)o;
  /* The calling thread falls back on its device's default context, as in
   * CANN; other threads holding it current get ACL_ERROR_RT_CONTEXT_NULL. */
  uint64_t mine_id = 0;
  if (aipc__device_context(&mine_id) == c && mine_id == c->id) aipc__device_set_context(c->device, NULL, 0);
  *id = c->id;
  *obj = c;
  return ACL_SUCCESS;
}

void aipc__ctx_release(void *obj) { put(obj); }

void aipc__ctx_finalize(void) {
  aipc__handles_lock(&g_ctxs);
  for (int d = 0; d < AIPC_MAX_DEVICES; d++) g_default[d] = NULL;
  aipc__handles_unlock(&g_ctxs);
  aipc__handles_finalize(&g_ctxs);
}

void aipc__ctx_atfork_prepare(void) { aipc__handles_atfork_prepare(&g_ctxs); }

void aipc__ctx_atfork_parent(void) { aipc__handles_atfork_parent(&g_ctxs); }

/* The child forgets the parent's contexts (their handles are invalid here)
 * and every thread's choice of one: it starts on default contexts. */
void aipc__ctx_atfork_child(void) {
  aipc__handles_atfork_child(&g_ctxs);
  for (int d = 0; d < AIPC_MAX_DEVICES; d++) g_default[d] = NULL;
  aipc__device_forget_contexts();
}
