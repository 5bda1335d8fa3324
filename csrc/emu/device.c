/* Devices: the per-thread current device, the process-wide set counts, peer
 * access. The lifecycle that spans every module (aclInit, aclFinalize,
 * aclrtResetDeviceForce, fork) is runtime.c's; this file calls nothing above it. */
#include <stdatomic.h>
#include <unistd.h>

#include "emu_internal.h"

/* A thread's current device counts only while its generation is the
 * process's: aclFinalize bumps the generation, which puts every thread back
 * on device 0 without touching other threads' storage. */
static __thread int32_t tl_device;
static __thread uint64_t tl_gen;
static _Atomic uint64_t g_gen = 1;

/* The thread's explicit context (aclrtCreateContext, aclrtSetCurrentContext;
 * context.c's objects, opaque here): none means the current device's default
 * context. It counts only while its generation is g_ctx_gen, which
 * aclFinalize and a fork child bump (their contexts are gone). */
static __thread void *tl_ctx;
static __thread uint64_t tl_ctx_id, tl_ctx_gen;
static _Atomic uint64_t g_ctx_gen = 1;

/* aclrtSetDevice calls per device not yet undone by a reset, process-wide
 * as in CANN: aclrtResetDeviceForce needs the device to be set. */
static _Atomic uint32_t g_set_count[AIPC_MAX_DEVICES];

int32_t aipc__device_current(void) {
  return tl_gen == atomic_load_explicit(&g_gen, memory_order_relaxed) ? tl_device : 0;
}

static aclError check_id(const char *call, const char *what, int32_t id) {
  uint32_t n = aipc__config_get()->devices;
  if (id < 0 || (uint32_t)id >= n)
    return aipc__fail(ACL_ERROR_RT_INVALID_DEVICEID, "%s: %s %d is out of range: %u device%s (0..%u; ASCEND_IPC_EMU_DEVICES)",
                      call, what, (int)id, n, n == 1 ? "" : "s", n - 1);
  return ACL_SUCCESS;
}

aclError aipc__emu_set_device(int32_t deviceId) {
  aclError rc = check_id(AIPC_CALL_NAME(set_device), "deviceId", deviceId);
  if (rc) return rc;
  tl_device = deviceId;
  tl_gen = atomic_load(&g_gen);
  tl_ctx = NULL; /* CANN: the device's default context becomes current */
  uint32_t n = atomic_load(&g_set_count[deviceId]);
  while (n != UINT32_MAX && !atomic_compare_exchange_weak(&g_set_count[deviceId], &n, n + 1)) {
  }
  return ACL_SUCCESS;
}

void aipc__device_set_context(int32_t device, void *ctx, uint64_t id) {
  tl_device = device;
  tl_gen = atomic_load(&g_gen);
  tl_ctx = ctx;
  tl_ctx_id = id;
  tl_ctx_gen = atomic_load(&g_ctx_gen);
}

void *aipc__device_context(uint64_t *id) {
  if (!tl_ctx || tl_ctx_gen != atomic_load_explicit(&g_ctx_gen, memory_order_relaxed)) return NULL;
  *id = tl_ctx_id;
  return tl_ctx;
}

void aipc__device_forget_contexts(void) { atomic_fetch_add(&g_ctx_gen, 1); }

aclError aipc__emu_get_device(int32_t *deviceId) {
  if (!deviceId) return aipc__fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDevice: deviceId is NULL");
  *deviceId = aipc__device_current();
  return ACL_SUCCESS;
}

aclError aipc__emu_get_device_count(uint32_t *count) {
  if (!count) return aipc__fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceCount: count is NULL");
  *count = aipc__config_get()->devices;
  return ACL_SUCCESS;
}

aclError aipc__emu_reset_device(int32_t deviceId) {
  /* The thread's claim ends; its memory stays allocated, as documented. */
  aclError rc = check_id(AIPC_CALL_NAME(reset_device), "deviceId", deviceId);
  if (rc) return rc;
  uint32_t n = atomic_load(&g_set_count[deviceId]);
  while (n > 0 && !atomic_compare_exchange_weak(&g_set_count[deviceId], &n, n - 1)) {
  }
  return ACL_SUCCESS;
}

aclError aipc__device_unset_all(int32_t deviceId) {
  const char *call = AIPC_CALL_NAME(reset_device_force);
  aclError rc = check_id(call, "deviceId", deviceId);
  if (rc) return rc;
  if (atomic_exchange(&g_set_count[deviceId], 0) == 0)
    return aipc__fail(ACL_ERROR_RT_CONTEXT_NULL,
                      "%s: device %d is not set in this process (no aclrtSetDevice since it was last reset)", call,
                      (int)deviceId);
  return ACL_SUCCESS;
}

aclError aipc__emu_device_can_access_peer(int32_t *canAccessPeer, int32_t deviceId, int32_t peerDeviceId) {
  const char *call = AIPC_CALL_NAME(device_can_access_peer);
  if (!canAccessPeer) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: canAccessPeer is NULL", call);
  aclError rc;
  if ((rc = check_id(call, "deviceId", deviceId))) return rc;
  if ((rc = check_id(call, "peerDeviceId", peerDeviceId))) return rc;
  if (deviceId == peerDeviceId)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: deviceId and peerDeviceId are both %d", call, (int)deviceId);
  *canAccessPeer = 1;
  return ACL_SUCCESS;
}

aclError aipc__emu_device_enable_peer_access(int32_t peerDeviceId, uint32_t flags) {
  const char *call = AIPC_CALL_NAME(device_enable_peer_access);
  aclError rc = check_id(call, "peerDeviceId", peerDeviceId);
  if (rc) return rc;
  if (flags != 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: flags must be 0, got 0x%x", call, flags);
  if (peerDeviceId == aipc__device_current())
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: peerDeviceId %d is the current device; a peer is another device",
                      call, (int)peerDeviceId);
  /* Every emulated device reaches every other: nothing to record. */
  return ACL_SUCCESS;
}

aclError aipc__emu_device_get_bare_tgid(int32_t *pid) {
  if (!pid) return aipc__fail(ACL_ERROR_INVALID_PARAM, "aclrtDeviceGetBareTgid: pid is NULL");
  *pid = (int32_t)getpid();
  return ACL_SUCCESS;
}

void aipc__device_finalize(void) {
  atomic_fetch_add(&g_gen, 1);
  atomic_fetch_add(&g_ctx_gen, 1);
  for (int d = 0; d < AIPC_MAX_DEVICES; d++) atomic_store(&g_set_count[d], 0);
}

aipc_cstr aipc__emu_get_recent_err_msg(void) { return aipc__recent_err_msg(); }
