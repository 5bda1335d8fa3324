/*
 * The IPC entry points of the emulator (aclrtIpcMem*): each checks its
 * arguments, parses the key, and hands the call to the side that owns the
 * state: the exporter (exporter.h) for keys of this process, the importer
 * (importer.h) for keys of others. Also the IPC layer's part of fork and
 * aclFinalize. Design: docs/design-ipc.md.
 */
#include <stdbool.h>
#include <string.h>

#include "emu/emu.h"
#include "emu/ipc/exporter.h"
#include "emu/ipc/identity.h"
#include "emu/ipc/importer.h"
#include "emu/ipc/ipc.h"
#include "emu/ipc/key.h"
#include "emu/ipc/supernode.h"

aclError aipc__emu_ipc_get_export_key(void *devPtr, size_t size, char *key, size_t len, uint64_t flags) {
  const char *call = AIPC_CALL_NAME(ipc_get_export_key);
  if (!devPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: devPtr is NULL", call);
  if (!key) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: key is NULL", call);
  if (len < ACL_IPC_MEM_KEY_LEN)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: len is %zu; the key buffer needs at least %d bytes", call, len,
                      ACL_IPC_MEM_KEY_LEN);
  if (flags > ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION)
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      "%s: unknown flags 0x%llx (ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT or _DISABLE_PID_VALIDATION)", call,
                      (unsigned long long)flags);
  if (size == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: size is 0", call);
  if (!AIPC_IS_PAGE_ALIGNED(devPtr))
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: devPtr %p is not aligned to the 4096-byte page", call, devPtr);
  if (!AIPC_IS_PAGE_ALIGNED(size))
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: size %zu is not a multiple of the 4096-byte page", call, size);
  char text[AIPC_KEY_CHARS + 1];
  aclError rc = aipc__exporter_export(call, AIPC_OBJECT_MEMORY, devPtr, size, flags, text);
  if (rc == ACL_SUCCESS) memcpy(key, text, sizeof text); /* the caller's buffer only on success */
  return rc;
}

aclError aipc__emu_ipc_set_import_pid(const char *key, int32_t *pid, size_t num) {
  const char *call = AIPC_CALL_NAME(ipc_set_import_pid);
  aipc__key k;
  aclError rc = aipc__key_parse_kind(call, key, AIPC_OBJECT_MEMORY, &k);
  if (rc != ACL_SUCCESS) return rc;
  if (!pid) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: pid is NULL", call);
  if (num == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: num is 0", call);
  for (size_t i = 0; i < num; i++)
    if (pid[i] <= 0)
      return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: pid[%zu] = %d is not a process id", call, i, (int)pid[i]);
  return aipc__exporter_allow(call, &k, pid, num);
}

aclError aipc__emu_ipc_import_pid_inter_server(const char *key, aclrtServerPid *serverPids, size_t num) {
  const char *call = AIPC_CALL_NAME(ipc_import_pid_inter_server);
  aipc__key k;
  aclError rc = aipc__key_parse_kind(call, key, AIPC_OBJECT_MEMORY, &k);
  if (rc != ACL_SUCCESS) return rc;
  if (!serverPids) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: serverPids is NULL", call);
  if (num == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: num is 0", call);
  for (size_t i = 0; i < num; i++) {
    if (!serverPids[i].pid) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: serverPids[%zu].pid is NULL", call, i);
    if (serverPids[i].num == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: serverPids[%zu].num is 0", call, i);
    for (size_t j = 0; j < serverPids[i].num; j++)
      if (serverPids[i].pid[j] <= 0)
        return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: serverPids[%zu].pid[%zu] = %d is not a process id", call, i, j,
                          (int)serverPids[i].pid[j]);
  }
  return aipc__exporter_allow_servers(call, &k, serverPids, num, aipc__server_sdid());
}

aclError aipc__emu_ipc_set_attr(const char *key, aclrtIpcMemAttrType type, uint64_t attr) {
  const char *call = AIPC_CALL_NAME(ipc_set_attr);
  aipc__key k;
  aclError rc = aipc__key_parse_kind(call, key, AIPC_OBJECT_MEMORY, &k);
  if (rc != ACL_SUCCESS) return rc;
  if (type != ACL_RT_IPC_MEM_ATTR_ACCESS_LINK)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: unknown attribute type %d (ACL_RT_IPC_MEM_ATTR_ACCESS_LINK)", call,
                      (int)type);
  if (attr == ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_UB_ONE_PORT_PATH ||
      attr == ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_UB_MULTI_PORT_PATH)
    return aipc__fail(ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED,
                      "%s: access link %llu (UB) is not supported by the emulated device; use SIO (0) or HCCS (1)",
                      call, (unsigned long long)attr);
  if (attr > ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_HCCS)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: unknown access link %llu (SIO 0, HCCS 1, UB 2 or 3)", call,
                      (unsigned long long)attr);
  return aipc__exporter_set_attr(call, &k, (uint32_t)attr);
}

void aipc__emu_ipc_expect_request(void) { aipc__exporter_expect_request(); }

aclError aipc__emu_ipc_get_attr(const char *key, aclrtIpcMemAttrType type, uint64_t *attr) {
  const char *call = "ipc_get_attr";
  aipc__key k;
  aclError rc = aipc__key_parse_kind(call, key, AIPC_OBJECT_MEMORY, &k);
  if (rc != ACL_SUCCESS) return rc;
  if (type != ACL_RT_IPC_MEM_ATTR_ACCESS_LINK)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: unknown attribute type %d", call, (int)type);
  if (!attr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: attr is NULL", call);
  if (aipc__importer_get_attr(&k, attr) || aipc__exporter_get_attr(&k, attr)) return ACL_SUCCESS;
  return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: key is neither an export nor an import of this process", call);
}

/* An import of a key of another server: through the super-node directory.
 * A key that names this process with another sdid is none it issued. */
static aclError foreign_server(const char *call, const aipc__key *k, uint64_t flags, void **devPtr) {
  if (aipc__exporter_owns(k))
    return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      "%s: the key names this process but server %u, and this process is server %u of its super-node: "
                      "damaged or forged",
                      call, k->sdid, aipc__server_sdid());
  if (k->kind == AIPC_OBJECT_EVENT)
    return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      "%s: the IPC event was created on server %u, in another network namespace, and this is server "
                      "%u: IPC events are shared within one server only (CANN has no inter-server whitelist for them); use an IPC notify across servers",
                      call, k->sdid, aipc__server_sdid());
  return aipc__importer_import(call, k, flags, devPtr);
}

aclError aipc__emu_ipc_import_by_key(void **devPtr, const char *key, uint64_t flags) {
  const char *call = AIPC_CALL_NAME(ipc_import_by_key);
  if (!devPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: devPtr is NULL", call);
  aipc__key k;
  aclError rc = aipc__key_parse_kind(call, key, AIPC_OBJECT_MEMORY, &k);
  if (rc != ACL_SUCCESS) return rc;
  if (flags > ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS)
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      "%s: unknown flags 0x%llx (ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT or _ENABLE_PEER_ACCESS)", call,
                      (unsigned long long)flags);
  if (k.sdid != aipc__server_sdid()) return foreign_server(call, &k, flags, devPtr);
  /* One's own key: no socket, the exporter's own pointer. */
  if (aipc__exporter_owns(&k)) return aipc__exporter_import_own(call, &k, devPtr);
  return aipc__importer_import(call, &k, flags, devPtr);
}

aclError aipc__emu_ipc_close(const char *key) {
  const char *call = AIPC_CALL_NAME(ipc_close);
  aipc__key k;
  aclError rc = aipc__key_parse_kind(call, key, AIPC_OBJECT_MEMORY, &k);
  if (rc != ACL_SUCCESS) return rc;
  bool found;
  /* A process that both imported and exported a key closes the import first. */
  rc = aipc__importer_close(&k, &found);
  if (found) return rc;
  rc = aipc__exporter_close(call, &k, false, &found);
  if (found) return rc;
  return aipc__fail(ACL_ERROR_INVALID_PARAM,
                    "%s: key is neither an export nor an import of this process (already closed, or forged?)", call);
}

/* ---- shared state pages of events and notifies (ipc.h) ------------------------------ */

aclError aipc__ipc_share(const char *call, aipc__object_kind kind, void *page, bool check_pids,
                         char key[AIPC_KEY_CHARS + 1]) {
  return aipc__exporter_export(call, kind, page, AIPC_PAGE_SIZE,
                               check_pids ? ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT
                                          : ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION,
                               key);
}

aclError aipc__ipc_share_allow(const char *call, const char *key, const int32_t *pids, size_t num) {
  aipc__key k;
  aclError rc = aipc__key_parse(call, key, &k);
  return rc ? rc : aipc__exporter_allow(call, &k, pids, num);
}

aclError aipc__ipc_share_allow_servers(const char *call, const char *key, const aclrtServerPid *servers, size_t num) {
  aipc__key k;
  aclError rc = aipc__key_parse(call, key, &k);
  return rc ? rc : aipc__exporter_allow_servers(call, &k, servers, num, aipc__server_sdid());
}

aclError aipc__ipc_open(const char *call, aipc__object_kind kind, const char *key, void **page, uint32_t *owner) {
  aipc__key k;
  aclError rc = aipc__key_parse_kind(call, key, kind, &k);
  if (rc != ACL_SUCCESS) return rc;
  if (k.sdid != aipc__server_sdid())
    rc = foreign_server(call, &k, 0, page);
  else
    rc = aipc__exporter_owns(&k) ? aipc__exporter_import_own(call, &k, page) : aipc__importer_import(call, &k, 0, page);
  if (rc == ACL_SUCCESS) *owner = k.pid;
  memset(k.secret, 0, sizeof k.secret);
  return rc;
}

void aipc__ipc_release(const char *call, const char *key) {
  aipc__key k;
  if (aipc__key_parse(call, key, &k) != ACL_SUCCESS) return;
  bool found;
  if (aipc__importer_close(&k, &found) != ACL_SUCCESS || !found) aipc__exporter_close(call, &k, true, &found);
  memset(k.secret, 0, sizeof k.secret);
}

/* ---- physical memory (ipc.h) ----------------------------------------------------- */

aclError aipc__ipc_share_physical(const char *call, int fd, uint64_t size, int32_t device, bool check_pids,
                                  uint64_t *handle) {
  return aipc__exporter_export_physical(call, fd, size, device,
                                        check_pids ? ACL_RT_VMM_EXPORT_FLAG_DEFAULT
                                                   : ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION,
                                        handle);
}

static aclError physical_key(const char *call, uint64_t handle, aipc__key *k) {
  aclError rc = aipc__shareable_parse(call, handle, k);
  k->sdid = aipc__server_sdid();
  return rc;
}

aclError aipc__ipc_share_physical_allow(const char *call, uint64_t handle, const int32_t *pids, size_t num) {
  aipc__key k;
  aclError rc = physical_key(call, handle, &k);
  return rc ? rc : aipc__exporter_allow(call, &k, pids, num);
}

aclError aipc__ipc_open_physical(const char *call, uint64_t handle, int *fd, uint64_t *size, int32_t *device) {
  aipc__key k;
  aclError rc = physical_key(call, handle, &k);
  if (rc != ACL_SUCCESS) return rc;
  if (aipc__exporter_owns(&k))
    return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      "%s: the handle was exported by this process; CANN imports shareable handles in other processes "
                      "only (use the aclrtDrvMemHandle you exported)",
                      call);
  return aipc__importer_fetch(call, &k, fd, size, device);
}

void aipc__ipc_release_physical(const char *call, uint64_t handle) {
  aipc__key k;
  bool found;
  if (physical_key(call, handle, &k) == ACL_SUCCESS) aipc__exporter_close(call, &k, true, &found);
}

/* ---- fabric handles (ipc.h) ------------------------------------------------------ */

aclError aipc__ipc_share_fabric(const char *call, int fd, uint64_t size, int32_t device, bool check_pids,
                                uint8_t handle[AIPC_FABRIC_LEN]) {
  aipc__key k;
  aclError rc = aipc__exporter_export_fabric(call, fd, size, device,
                                             check_pids ? ACL_RT_VMM_EXPORT_FLAG_DEFAULT
                                                        : ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION,
                                             &k);
  if (rc == ACL_SUCCESS) aipc__fabric_write(&k, aipc__supernode_id(), handle);
  memset(k.secret, 0, sizeof k.secret);
  return rc;
}

/* The key of a fabric handle issued in this super-node, or a recorded error. */
static aclError fabric_key(const char *call, const uint8_t handle[AIPC_FABRIC_LEN], aipc__key *k) {
  uint64_t issued;
  aclError rc = aipc__fabric_parse(call, handle, k, &issued);
  if (rc != ACL_SUCCESS) return rc;
  if ((rc = aipc__supernode_join(call)) != ACL_SUCCESS) return rc;
  uint64_t here = aipc__supernode_id();
  if (issued != here)
    return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      "%s: the fabric handle was issued in super-node %016llx, and this process is in super-node "
                      "%016llx (directory %s): servers share memory only within one super-node "
                      "(ASCEND_IPC_SUPERNODE_DIR names it)",
                      call, (unsigned long long)issued, (unsigned long long)here, aipc__config_get()->supernode_dir);
  return ACL_SUCCESS;
}

aclError aipc__ipc_fabric_allow(const char *call, const uint8_t handle[AIPC_FABRIC_LEN], const int32_t *pids,
                                size_t num) {
  aipc__key k;
  aclError rc = fabric_key(call, handle, &k);
  if (rc == ACL_SUCCESS) rc = aipc__exporter_allow(call, &k, pids, num);
  memset(k.secret, 0, sizeof k.secret);
  return rc;
}

aclError aipc__ipc_open_fabric(const char *call, const uint8_t handle[AIPC_FABRIC_LEN], int *fd, uint64_t *size,
                               int32_t *device) {
  aipc__key k;
  aclError rc = fabric_key(call, handle, &k);
  if (rc == ACL_SUCCESS && aipc__exporter_owns(&k))
    rc = aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                    "%s: the handle was exported by this process; CANN imports shareable handles in other processes "
                    "only (use the aclrtDrvMemHandle you exported)",
                    call);
  if (rc == ACL_SUCCESS) rc = aipc__importer_fetch(call, &k, fd, size, device);
  memset(k.secret, 0, sizeof k.secret);
  return rc;
}

void aipc__ipc_release_fabric(const char *call, const uint8_t handle[AIPC_FABRIC_LEN]) {
  aipc__key k;
  uint64_t issued;
  bool found;
  if (aipc__fabric_parse(call, handle, &k, &issued) == ACL_SUCCESS) aipc__exporter_close(call, &k, true, &found);
  memset(k.secret, 0, sizeof k.secret);
}

/* ---- fork, finalize --------------------------------------------------------------- */

/* Outermost first: the exporter and the importer take the identity and the
 * random pool under their locks. */
void aipc__ipc_atfork_prepare(void) {
  aipc__exporter_atfork_prepare();
  aipc__importer_atfork_prepare();
  aipc__self_atfork_prepare();
  aipc__supernode_atfork_prepare();
  aipc__random_atfork_prepare();
}

void aipc__ipc_atfork_parent(void) {
  aipc__random_atfork_parent();
  aipc__supernode_atfork_parent();
  aipc__self_atfork_parent();
  aipc__importer_atfork_parent();
  aipc__exporter_atfork_parent();
}

void aipc__ipc_atfork_child(void) {
  aipc__random_atfork_child();
  aipc__supernode_atfork_child(); /* it may enter another network namespace: another server */
  aipc__self_atfork_child(); /* a new process, a new name */
  aipc__exporter_atfork_child();
  aipc__importer_atfork_child();
}

void aipc__ipc_finalize(void) {
  aipc__exporter_finalize();
  aipc__importer_finalize();
}
