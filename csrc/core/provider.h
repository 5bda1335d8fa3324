/*
 * The provider table: the one seam between callers (the public acl* entry
 * points of the emulator library, the Python extension) and a runtime that
 * implements them (the emulator now; the vendor's libascendcl, loaded with
 * dlopen, later). Entries have the exact CANN signatures, so a provider over
 * the vendor library can fill them straight from dlsym.
 *
 * An entry may be NULL when a provider lacks the call; callers go through
 * aipc__provider_missing() for the error in that case.
 */
#ifndef ASCEND_IPC_CORE_PROVIDER_H_
#define ASCEND_IPC_CORE_PROVIDER_H_

#include "acl/acl.h"

/* DLPack device types the providers report (values of the DLPack ABI). */
#define AIPC_DLPACK_DEVICE_CPU 1
#define AIPC_DLPACK_DEVICE_EXT 12

typedef struct aipc_provider {
  const char *name;          /* "emulated", "cann" */
  const char *library_path;  /* where the runtime came from, or NULL */
  int dlpack_device_type;    /* AIPC_DLPACK_DEVICE_* of device memory */
  int host_visible;          /* device memory is addressable by the CPU */

  aclError (*init)(const char *configPath);
  aclError (*finalize)(void);
  const char *(*get_recent_err_msg)(void);

  aclError (*set_device)(int32_t deviceId);
  aclError (*get_device)(int32_t *deviceId);
  aclError (*get_device_count)(uint32_t *count);
  aclError (*reset_device)(int32_t deviceId);
  aclError (*device_can_access_peer)(int32_t *canAccessPeer, int32_t deviceId, int32_t peerDeviceId);
  aclError (*device_enable_peer_access)(int32_t peerDeviceId, uint32_t flags);
  aclError (*device_get_bare_tgid)(int32_t *pid);
  aclError (*get_mem_info)(aclrtMemAttr attr, size_t *free, size_t *total);

  aclError (*malloc)(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
  aclError (*free)(void *devPtr);
  aclError (*malloc_host)(void **hostPtr, size_t size);
  aclError (*free_host)(void *hostPtr);
  aclError (*memcpy)(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind);
  aclError (*memcpy_async)(void *dst, size_t destMax, const void *src, size_t count,
                           aclrtMemcpyKind kind, aclrtStream stream);
  aclError (*memset)(void *devPtr, size_t maxCount, int32_t value, size_t count);

  aclError (*create_stream)(aclrtStream *stream);
  aclError (*destroy_stream)(aclrtStream stream);
  aclError (*synchronize_stream)(aclrtStream stream);

  aclError (*ipc_get_export_key)(void *devPtr, size_t size, char *key, size_t len, uint64_t flags);
  aclError (*ipc_set_import_pid)(const char *key, int32_t *pid, size_t num);
  aclError (*ipc_import_pid_inter_server)(const char *key, aclrtServerPid *serverPids, size_t num);
  aclError (*ipc_import_by_key)(void **devPtr, const char *key, uint64_t flags);
  aclError (*ipc_set_attr)(const char *key, aclrtIpcMemAttrType type, uint64_t attr);
  aclError (*ipc_close)(const char *key);

  /* Not in CANN: reads back an attribute of a key this process exported or
   * imported (ACCESS_LINK). NULL where the runtime cannot tell. */
  aclError (*ipc_get_attr)(const char *key, aclrtIpcMemAttrType type, uint64_t *attr);

  void *private_data;
} aipc_provider;

/* The emulated runtime's table. Static storage; never NULL. */
const aipc_provider *aipc__emu_provider(void);

#endif
