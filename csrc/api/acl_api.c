/*
 * The public acl* entry points of libascendcl_emu.so. Each one forwards to
 * the provider table; nothing else in the library is visible outside it.
 */
#include "core/provider.h"

#define P (aipc__emu_provider())

const char *aclGetRecentErrMsg(void) { return P->get_recent_err_msg(); }
aclError aclInit(const char *configPath) { return P->init(configPath); }
aclError aclFinalize(void) { return P->finalize(); }

aclError aclrtSetDevice(int32_t deviceId) { return P->set_device(deviceId); }
aclError aclrtGetDevice(int32_t *deviceId) { return P->get_device(deviceId); }
aclError aclrtGetDeviceCount(uint32_t *count) { return P->get_device_count(count); }
aclError aclrtResetDevice(int32_t deviceId) { return P->reset_device(deviceId); }
aclError aclrtDeviceCanAccessPeer(int32_t *canAccessPeer, int32_t deviceId, int32_t peerDeviceId) {
  return P->device_can_access_peer(canAccessPeer, deviceId, peerDeviceId);
}
aclError aclrtDeviceEnablePeerAccess(int32_t peerDeviceId, uint32_t flags) {
  return P->device_enable_peer_access(peerDeviceId, flags);
}
aclError aclrtDeviceGetBareTgid(int32_t *pid) { return P->device_get_bare_tgid(pid); }
aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total) {
  return P->get_mem_info(attr, free, total);
}

aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
  return P->malloc(devPtr, size, policy);
}
aclError aclrtFree(void *devPtr) { return P->free(devPtr); }
aclError aclrtMallocHost(void **hostPtr, size_t size) { return P->malloc_host(hostPtr, size); }
aclError aclrtFreeHost(void *hostPtr) { return P->free_host(hostPtr); }
aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind) {
  return P->memcpy(dst, destMax, src, count, kind);
}
aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
                          aclrtMemcpyKind kind, aclrtStream stream) {
  return P->memcpy_async(dst, destMax, src, count, kind, stream);
}
aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count) {
  return P->memset(devPtr, maxCount, value, count);
}

aclError aclrtCreateStream(aclrtStream *stream) { return P->create_stream(stream); }
aclError aclrtDestroyStream(aclrtStream stream) { return P->destroy_stream(stream); }
aclError aclrtSynchronizeStream(aclrtStream stream) { return P->synchronize_stream(stream); }

aclError aclrtIpcMemGetExportKey(void *devPtr, size_t size, char *key, size_t len, uint64_t flags) {
  return P->ipc_get_export_key(devPtr, size, key, len, flags);
}
aclError aclrtIpcMemSetImportPid(const char *key, int32_t *pid, size_t num) {
  return P->ipc_set_import_pid(key, pid, num);
}
aclError aclrtIpcMemImportPidInterServer(const char *key, aclrtServerPid *serverPids, size_t num) {
  return P->ipc_import_pid_inter_server(key, serverPids, num);
}
aclError aclrtIpcMemImportByKey(void **devPtr, const char *key, uint64_t flags) {
  return P->ipc_import_by_key(devPtr, key, flags);
}
aclError aclrtIpcMemSetAttr(const char *key, aclrtIpcMemAttrType type, uint64_t attr) {
  return P->ipc_set_attr(key, type, attr);
}
aclError aclrtIpcMemClose(const char *key) { return P->ipc_close(key); }
