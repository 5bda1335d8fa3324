/*
 * What the IPC layer offers the rest of the runtime besides the
 * aclrtIpcMem* calls: sharing the state page of an event or a notify
 * (aipc__mem_sync_alloc) under a key of its kind, with the same exporter
 * service, whitelist and isolation as memory. event.c and notify.c use it.
 */
#ifndef ASCEND_IPC_EMU_IPC_IPC_H_
#define ASCEND_IPC_EMU_IPC_IPC_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acl/acl.h"
#include "emu/ipc/key.h"

/* Exports page as kind and writes its key. check_pids: only whitelisted
 * processes may open it (else any process of this user holding the key). */
aclError aipc__ipc_share(const char *call, aipc__object_kind kind, void *page, bool check_pids,
                         char key[AIPC_KEY_CHARS + 1]);
/* Whitelists pids (or per-server entries) for a key of this process. */
aclError aipc__ipc_share_allow(const char *call, const char *key, const int32_t *pids, size_t num);
aclError aipc__ipc_share_allow_servers(const char *call, const char *key, const aclrtServerPid *servers, size_t num);
/* Maps the page a key of kind names (this process's own page for its own
 * key) and writes its address and the pid of the process that shared it. */
aclError aipc__ipc_open(const char *call, aipc__object_kind kind, const char *key, void **page, uint32_t *owner);
/* Ends what aipc__ipc_open or aipc__ipc_share began for key: an open is
 * unmapped, a share ends (the page lives on for those who opened it). */
void aipc__ipc_release(const char *call, const char *key);

/*
 * Physical memory (vmm.c): shares the allocation behind fd (a sealed memfd
 * of size bytes on device) under a 64-bit shareable handle; check_pids as
 * above. The export keeps a descriptor of its own until released.
 */
aclError aipc__ipc_share_physical(const char *call, int fd, uint64_t size, int32_t device, bool check_pids,
                                  uint64_t *handle);
/* Whitelists pids for a shareable handle of this process. */
aclError aipc__ipc_share_physical_allow(const char *call, uint64_t handle, const int32_t *pids, size_t num);
/* Another process's shareable handle: its allocation's memfd (the caller's
 * to close), size and device. */
aclError aipc__ipc_open_physical(const char *call, uint64_t handle, int *fd, uint64_t *size, int32_t *device);
/* Ends a share of this process: no new imports; importers keep theirs. */
void aipc__ipc_release_physical(const char *call, uint64_t handle);

/* The same for ACL_MEM_SHARE_HANDLE_TYPE_FABRIC: the handle is an
 * aclrtMemFabricHandle (key.h, fabric handles), importable from every
 * server of this super-node. */
aclError aipc__ipc_share_fabric(const char *call, int fd, uint64_t size, int32_t device, bool check_pids,
                                uint8_t handle[AIPC_FABRIC_LEN]);
aclError aipc__ipc_fabric_allow(const char *call, const uint8_t handle[AIPC_FABRIC_LEN], const int32_t *pids,
                                size_t num);
aclError aipc__ipc_open_fabric(const char *call, const uint8_t handle[AIPC_FABRIC_LEN], int *fd, uint64_t *size,
                               int32_t *device);
void aipc__ipc_release_fabric(const char *call, const uint8_t handle[AIPC_FABRIC_LEN]);

#endif
