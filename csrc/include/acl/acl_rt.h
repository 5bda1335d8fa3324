/*
 * ascend_ipc: the CANN runtime subset (devices, memory, streams, IPC).
 *
 * Every call returns ACL_SUCCESS or an error code; on failure the calling
 * thread's recent error message (aclGetRecentErrMsg) says what went wrong,
 * and output parameters are left untouched. Every call is thread-safe.
 */
#ifndef ASCEND_IPC_ACL_RT_H_
#define ASCEND_IPC_ACL_RT_H_

#include "acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtNotify;

/* Event creation flags */
#define ACL_EVENT_SYNC 0x00000001U
#define ACL_EVENT_CAPTURE_STREAM_PROGRESS 0x00000002U
#define ACL_EVENT_TIME_LINE 0x00000008U
#define ACL_EVENT_DEVICE_USE_ONLY 0x00000010U
#define ACL_EVENT_EXTERNAL 0x00000020U
#define ACL_EVENT_IPC 0x00000040U

/* Notify creation, export and import flags */
#define ACL_NOTIFY_DEFAULT 0x00000000U
#define ACL_NOTIFY_DEVICE_USE_ONLY 0x00000001U
#define ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT 0x0UL
#define ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION 0x02UL
#define ACL_RT_NOTIFY_IMPORT_FLAG_DEFAULT 0x0UL
#define ACL_RT_NOTIFY_IMPORT_FLAG_ENABLE_PEER_ACCESS 0x02UL

#define ACL_IPC_EVENT_HANDLE_SIZE 64U

typedef enum aclrtEventRecordedStatus {
  ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
  ACL_EVENT_RECORDED_STATUS_COMPLETE = 1,
} aclrtEventRecordedStatus;

/* An IPC event's handle: plain bytes, copied to the other process as they are. */
typedef struct aclrtIpcEventHandle {
  char reserved[ACL_IPC_EVENT_HANDLE_SIZE];
} aclrtIpcEventHandle;

typedef enum aclrtMemcpyKind {
  ACL_MEMCPY_HOST_TO_HOST = 0,
  ACL_MEMCPY_HOST_TO_DEVICE = 1,
  ACL_MEMCPY_DEVICE_TO_HOST = 2,
  ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
  ACL_MEMCPY_DEFAULT = 4,
  ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE = 5,
  ACL_MEMCPY_INNER_DEVICE_TO_DEVICE = 6,
  ACL_MEMCPY_INTER_DEVICE_TO_DEVICE = 7,
} aclrtMemcpyKind;

typedef enum aclrtMemMallocPolicy {
  ACL_MEM_MALLOC_HUGE_FIRST = 0,
  ACL_MEM_MALLOC_HUGE_ONLY = 1,
  ACL_MEM_MALLOC_NORMAL_ONLY = 2,
  ACL_MEM_MALLOC_HUGE_FIRST_P2P = 3,
  ACL_MEM_MALLOC_HUGE_ONLY_P2P = 4,
  ACL_MEM_MALLOC_NORMAL_ONLY_P2P = 5,
} aclrtMemMallocPolicy;

typedef enum aclrtMemAttr {
  ACL_DDR_MEM = 0,
  ACL_HBM_MEM = 1,
  ACL_DDR_MEM_HUGE = 2,
  ACL_DDR_MEM_NORMAL = 3,
  ACL_HBM_MEM_HUGE = 4,
  ACL_HBM_MEM_NORMAL = 5,
  ACL_DDR_MEM_P2P_HUGE = 6,
  ACL_DDR_MEM_P2P_NORMAL = 7,
  ACL_HBM_MEM_P2P_HUGE = 8,
  ACL_HBM_MEM_P2P_NORMAL = 9,
  ACL_HBM_MEM_HUGE1G = 10,
  ACL_HBM_MEM_P2P_HUGE1G = 11,
  ACL_MEM_NORMAL = 12,
  ACL_MEM_HUGE = 13,
  ACL_MEM_HUGE1G = 14,
  ACL_MEM_P2P_NORMAL = 15,
  ACL_MEM_P2P_HUGE = 16,
  ACL_MEM_P2P_HUGE1G = 17,
} aclrtMemAttr;

#define ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT 0x0UL
#define ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION 0x1UL
#define ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT 0x0UL
#define ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS 0x1UL

typedef enum aclrtIpcMemAttrType {
  ACL_RT_IPC_MEM_ATTR_ACCESS_LINK = 0,
} aclrtIpcMemAttrType;

#define ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_SIO 0
#define ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_HCCS 1
#define ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_UB_ONE_PORT_PATH 2
#define ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_UB_MULTI_PORT_PATH 3

/* A whitelist entry for one super-node server: num pids on server sdid. */
typedef struct aclrtServerPid {
  uint32_t sdid;
  int32_t *pid;
  size_t num;
} aclrtServerPid;

/* Buffer length an IPC key needs: 64 characters and the terminating NUL. */
#define ACL_IPC_MEM_KEY_LEN 65

/* ---- devices ------------------------------------------------------------ */

/* Makes deviceId the calling thread's current device. */
ACL_FUNC_VISIBILITY aclError aclrtSetDevice(int32_t deviceId);
/* Writes the calling thread's current device (0 until one is set). */
ACL_FUNC_VISIBILITY aclError aclrtGetDevice(int32_t *deviceId);
ACL_FUNC_VISIBILITY aclError aclrtGetDeviceCount(uint32_t *count);
/* Releases the calling thread's claim on deviceId; memory stays allocated. */
ACL_FUNC_VISIBILITY aclError aclrtResetDevice(int32_t deviceId);
/*
 * Ends this process's use of deviceId however many aclrtSetDevice calls
 * preceded it: waits for the default stream's queued work, then destroys
 * every stream created on deviceId without running what is still queued on
 * them. Fails (ACL_ERROR_RT_CONTEXT_NULL) when the device is not set in this
 * process since its last reset.
 */
ACL_FUNC_VISIBILITY aclError aclrtResetDeviceForce(int32_t deviceId);
ACL_FUNC_VISIBILITY aclError aclrtDeviceCanAccessPeer(int32_t *canAccessPeer, int32_t deviceId,
                                                      int32_t peerDeviceId);
/* flags must be 0. */
ACL_FUNC_VISIBILITY aclError aclrtDeviceEnablePeerAccess(int32_t peerDeviceId, uint32_t flags);
/* Writes the process id other processes must whitelist for this process. */
ACL_FUNC_VISIBILITY aclError aclrtDeviceGetBareTgid(int32_t *pid);
/* Free and total bytes of the current device. */
ACL_FUNC_VISIBILITY aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total);

/* ---- memory ------------------------------------------------------------- */

/*
 * Allocates size bytes on the current device. The caller owns *devPtr and
 * releases it with aclrtFree. The block is page-aligned and its usable size is
 * size rounded up to the page size (4 KiB).
 */
ACL_FUNC_VISIBILITY aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
/* Releases memory from aclrtMalloc. Imported memory is released by aclrtIpcMemClose. */
ACL_FUNC_VISIBILITY aclError aclrtFree(void *devPtr);
/* Allocates page-locked host memory; the caller releases it with aclrtFreeHost. */
ACL_FUNC_VISIBILITY aclError aclrtMallocHost(void **hostPtr, size_t size);
ACL_FUNC_VISIBILITY aclError aclrtFreeHost(void *hostPtr);
/* Copies count bytes; fails unless count <= destMax and the pointers match kind. */
ACL_FUNC_VISIBILITY aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count,
                                         aclrtMemcpyKind kind);
/*
 * Queues the copy on stream (NULL: the default stream) and returns; the copy
 * runs in order with the stream's other work. Argument errors are reported
 * here, execution errors by aclrtSynchronizeStream.
 */
ACL_FUNC_VISIBILITY aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src,
                                              size_t count, aclrtMemcpyKind kind,
                                              aclrtStream stream);
ACL_FUNC_VISIBILITY aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value,
                                         size_t count);
/* Queues a memset of device memory on stream (NULL: the default stream). */
ACL_FUNC_VISIBILITY aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count,
                                              aclrtStream stream);

/* ---- streams ------------------------------------------------------------ */

/* Creates a stream; the caller owns it and destroys it with aclrtDestroyStream. */
ACL_FUNC_VISIBILITY aclError aclrtCreateStream(aclrtStream *stream);
/* Waits for the stream's queued work, then destroys it. */
ACL_FUNC_VISIBILITY aclError aclrtDestroyStream(aclrtStream stream);
/* Destroys the stream at once: queued work that has not started is dropped
 * (a copy already running finishes first). */
ACL_FUNC_VISIBILITY aclError aclrtDestroyStreamForce(aclrtStream stream);
/* Waits for the stream's queued work; returns the first error it met. After
 * a failure the stream skips the copies and memsets queued behind it until
 * this call has reported it, and events it records complete with it. */
ACL_FUNC_VISIBILITY aclError aclrtSynchronizeStream(aclrtStream stream);
/* The same, giving up after timeout ms (-1 or 0: no limit) with
 * ACL_ERROR_RT_STREAM_SYNC_TIMEOUT. */
ACL_FUNC_VISIBILITY aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout);

/* ---- events ------------------------------------------------------------- */

/*
 * An event completes when the work queued on its stream before the record
 * has run. Waits (aclrtSynchronizeEvent, aclrtStreamWaitEvent) wait for the
 * latest record queued when they are called; later records do not move
 * them. The caller owns every event it creates or opens and releases it
 * with aclrtDestroyEvent, which does not block: queued work keeps it alive.
 */
/* CANN's default event (sync and timing); before any record its status is NOT_READY. */
ACL_FUNC_VISIBILITY aclError aclrtCreateEvent(aclrtEvent *event);
/* flag: an OR of ACL_EVENT_SYNC, _CAPTURE_STREAM_PROGRESS, _TIME_LINE; or
 * _DEVICE_USE_ONLY or _EXTERNAL alone. Streams wait only on SYNC events. */
ACL_FUNC_VISIBILITY aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag);
/* An event that is reused by recording it again; before any record its
 * status is COMPLETE. flag: as above, or ACL_EVENT_IPC alone. */
ACL_FUNC_VISIBILITY aclError aclrtCreateEventExWithFlag(aclrtEvent *event, uint32_t flag);
ACL_FUNC_VISIBILITY aclError aclrtDestroyEvent(aclrtEvent event);
/* Queues a record of event on stream (NULL: the default stream), a stream of the event's device. */
ACL_FUNC_VISIBILITY aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
ACL_FUNC_VISIBILITY aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status);
/* Blocks until the latest record has run; returns at once if never recorded. */
ACL_FUNC_VISIBILITY aclError aclrtSynchronizeEvent(aclrtEvent event);
/* The same with a limit: timeout ms (> 0) or -1 for none; ACL_ERROR_RT_EVENT_SYNC_TIMEOUT. */
ACL_FUNC_VISIBILITY aclError aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout);
/* Holds back the work queued on stream after this call until event's latest record has run. */
ACL_FUNC_VISIBILITY aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event);
/* The same, failing the stream's work (ACL_ERROR_RT_TASK_TIMEOUT) after timeout s (0: no limit). */
ACL_FUNC_VISIBILITY aclError aclrtStreamWaitEventWithTimeout(aclrtStream stream, aclrtEvent event,
                                                             int32_t timeout);
/* Milliseconds between two completed records of timing events. */
ACL_FUNC_VISIBILITY aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent);
/*
 * IPC events (aclrtCreateEventExWithFlag(ACL_EVENT_IPC)): the handle is
 * copied as bytes to any process of the same user, which opens its own
 * event on it. Either side may record, wait, synchronize and query; a wait
 * fails (ACL_ERROR_RT_IPC_ERROR) if the process that recorded last ends
 * before its record runs.
 */
ACL_FUNC_VISIBILITY aclError aclrtIpcGetEventHandle(aclrtEvent event, aclrtIpcEventHandle *handle);
ACL_FUNC_VISIBILITY aclError aclrtIpcOpenEventHandle(aclrtIpcEventHandle handle, aclrtEvent *event);

/* ---- notifies ------------------------------------------------------------- */

/*
 * A notify releases one wait per record. The caller owns every notify it
 * creates or imports and releases it with aclrtDestroyNotify. Shared
 * between processes by key, with the whitelist rules of memory keys; the
 * importer records, the creator waits.
 */
ACL_FUNC_VISIBILITY aclError aclrtCreateNotify(aclrtNotify *notify, uint64_t flag);
ACL_FUNC_VISIBILITY aclError aclrtDestroyNotify(aclrtNotify notify);
ACL_FUNC_VISIBILITY aclError aclrtRecordNotify(aclrtNotify notify, aclrtStream stream);
/* Holds back stream's later work until the notify is recorded, then resets
 * it. timeout in seconds, 0: no limit (ACL_ERROR_RT_WAIT_TIMEOUT, reported
 * by the stream's synchronize). */
ACL_FUNC_VISIBILITY aclError aclrtWaitAndResetNotify(aclrtNotify notify, aclrtStream stream, uint32_t timeout);
ACL_FUNC_VISIBILITY aclError aclrtGetNotifyId(aclrtNotify notify, uint32_t *notifyId);
/* Writes the notify's key (NUL-terminated) into key (len >= 65 bytes).
 * flags: ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT or _DISABLE_PID_VALIDATION. */
ACL_FUNC_VISIBILITY aclError aclrtNotifyGetExportKey(aclrtNotify notify, char *key, size_t len, uint64_t flags);
ACL_FUNC_VISIBILITY aclError aclrtNotifyImportByKey(aclrtNotify *notify, const char *key, uint64_t flags);
ACL_FUNC_VISIBILITY aclError aclrtNotifySetImportPid(aclrtNotify notify, int32_t *pid, size_t num);
ACL_FUNC_VISIBILITY aclError aclrtNotifySetImportPidInterServer(aclrtNotify notify, aclrtServerPid *serverPids,
                                                                size_t num);

/* ---- IPC memory sharing ------------------------------------------------- */

/*
 * Exports [devPtr, devPtr + size) of a live aclrtMalloc block of this process
 * and writes its key (NUL-terminated, at most 64 characters) into key, which
 * has room for len >= 65 bytes. devPtr and size are page-aligned; flags is
 * ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT (whitelist enforced, empty at first) or
 * ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION (any process of this user
 * holding the key may import). The export lives until aclrtIpcMemClose(key)
 * in this process.
 */
ACL_FUNC_VISIBILITY aclError aclrtIpcMemGetExportKey(void *devPtr, size_t size, char *key,
                                                     size_t len, uint64_t flags);
/* Adds num pids (from aclrtDeviceGetBareTgid in the importers) to the whitelist of an export of this process. */
ACL_FUNC_VISIBILITY aclError aclrtIpcMemSetImportPid(const char *key, int32_t *pid, size_t num);
/* Adds whitelist entries per super-node server; entries of this server whitelist local pids. */
ACL_FUNC_VISIBILITY aclError aclrtIpcMemImportPidInterServer(const char *key,
                                                             aclrtServerPid *serverPids,
                                                             size_t num);
/*
 * Maps the memory behind key into this process and writes its address to
 * *devPtr. Importing one key again returns the same address and counts a
 * reference; each import is matched by one aclrtIpcMemClose(key).
 */
ACL_FUNC_VISIBILITY aclError aclrtIpcMemImportByKey(void **devPtr, const char *key, uint64_t flags);
/* Sets an attribute of an export of this process, before its first import. */
ACL_FUNC_VISIBILITY aclError aclrtIpcMemSetAttr(const char *key, aclrtIpcMemAttrType type,
                                                uint64_t attr);
/*
 * Importer: drops one reference; the last one unmaps the memory.
 * Exporter: ends the export; the memory stays valid for importers that still
 * hold it (with ASCEND_IPC_STRICT=1 the call fails while any do).
 */
ACL_FUNC_VISIBILITY aclError aclrtIpcMemClose(const char *key);

/* ---- virtual memory and physical memory sharing (VMM) ------------------- */

/* A physical allocation of this process: from aclrtMallocPhysical,
 * aclrtMemImportFromShareableHandle or aclrtMemRetainAllocationHandle. */
typedef void *aclrtDrvMemHandle;

typedef enum aclrtMemLocationType {
  ACL_MEM_LOCATION_TYPE_HOST = 0,
  ACL_MEM_LOCATION_TYPE_DEVICE = 1,
  ACL_MEM_LOCATION_TYPE_UNREGISTERED = 2,
  ACL_MEM_LOCATION_TYPE_MANAGED = 3,
  ACL_MEM_LOCATION_TYPE_HOST_NUMA = 4,
} aclrtMemLocationType;

typedef struct aclrtMemLocation {
  uint32_t id; /* the device for ACL_MEM_LOCATION_TYPE_DEVICE */
  aclrtMemLocationType type;
} aclrtMemLocation;

/* One set of locations of aclrtMemcpyBatch, for a run of its copies. */
typedef struct {
  aclrtMemLocation dstLoc;
  aclrtMemLocation srcLoc;
  uint8_t rsv[16];
} aclrtMemcpyBatchAttr;

/*
 * numBatches copies of sizes[i] bytes from srcs[i] to dsts[i] (sizes[i] <=
 * destMaxs[i]), all host-to-device or all device-to-host; attrs[k] gives the
 * locations of copies attrsIndexes[k] up to the next index (attrsIndexes[0]
 * is 0, the indexes rise, numAttrs <= numBatches). Unordered among themselves.
 * On an error of one copy's locations or direction *failIndex is its index,
 * else SIZE_MAX; nothing is copied unless every copy passes.
 */
ACL_FUNC_VISIBILITY aclError aclrtMemcpyBatch(void **dsts, size_t *destMaxs, void **srcs, size_t *sizes,
                                              size_t numBatches, aclrtMemcpyBatchAttr *attrs,
                                              size_t *attrsIndexes, size_t numAttrs, size_t *failIndex);

typedef enum aclrtMemAllocationType {
  ACL_MEM_ALLOCATION_TYPE_PINNED = 0,
} aclrtMemAllocationType;

typedef enum aclrtMemHandleType {
  ACL_MEM_HANDLE_TYPE_NONE = 0,
  ACL_MEM_HANDLE_TYPE_POSIX = 2,
} aclrtMemHandleType;

typedef enum aclrtMemSharedHandleType {
  ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT = 0x1, /* a uint64_t */
  ACL_MEM_SHARE_HANDLE_TYPE_FABRIC = 0x2,  /* an aclrtMemFabricHandle: across super-node servers */
} aclrtMemSharedHandleType;

typedef struct aclrtMemFabricHandle {
  uint8_t data[128];
} aclrtMemFabricHandle;

typedef struct aclrtPhysicalMemProp {
  aclrtMemHandleType handleType;         /* ACL_MEM_HANDLE_TYPE_NONE */
  aclrtMemAllocationType allocationType; /* ACL_MEM_ALLOCATION_TYPE_PINNED */
  aclrtMemAttr memAttr;
  aclrtMemLocation location;
  uint64_t reserve;
} aclrtPhysicalMemProp;

typedef enum aclrtMemGranularityOptions {
  ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
  ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,
  ACL_RT_MEM_ALLOC_GRANULARITY_UNDEF = 0xFFFF,
} aclrtMemGranularityOptions;

typedef enum aclrtMemAccessFlags {
  ACL_RT_MEM_ACCESS_FLAGS_NONE = 0x0,
  ACL_RT_MEM_ACCESS_FLAGS_READ = 0x1,
  ACL_RT_MEM_ACCESS_FLAGS_READWRITE = 0x3,
} aclrtMemAccessFlags;

typedef struct aclrtMemAccessDesc {
  aclrtMemAccessFlags flags;
  aclrtMemLocation location;
  uint8_t rsv[12];
} aclrtMemAccessDesc;

#define ACL_RT_VMM_EXPORT_FLAG_DEFAULT 0x0UL
#define ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION 0x1UL

/* Bytes that sizes, mappings and reservations are multiples of. */
ACL_FUNC_VISIBILITY aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop,
                                                              aclrtMemGranularityOptions option,
                                                              size_t *granularity);
/* Device memory that no address reaches until aclrtMapMem puts it in a
 * reserved range; size is rounded up to the granularity. flags must be 0.
 * Ownership: the handle is the caller's, released with aclrtFreePhysical. */
ACL_FUNC_VISIBILITY aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size,
                                                 const aclrtPhysicalMemProp *prop, uint64_t flags);
/* Releases one handle; the memory goes once no mapping and no other process holds it. */
ACL_FUNC_VISIBILITY aclError aclrtFreePhysical(aclrtDrvMemHandle handle);
/* Reserves size bytes of address space (a multiple of the granularity);
 * nothing is accessible there until aclrtMapMem. alignment must be 0;
 * expectPtr: NULL, or a granularity-aligned free address in [16 TiB, 24 TiB). */
ACL_FUNC_VISIBILITY aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment,
                                                    void *expectPtr, uint64_t flags);
/* Gives a reservation back; every mapping in it must be unmapped first. */
ACL_FUNC_VISIBILITY aclError aclrtReleaseMemAddress(void *virPtr);
/* Maps a whole physical allocation (size equal to it, offset 0, flags 0) at
 * virPtr inside a reservation; readable and writable at once. */
ACL_FUNC_VISIBILITY aclError aclrtMapMem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle,
                                         uint64_t flags);
/* The same, but nothing may touch the range until aclrtMemSetAccess. */
ACL_FUNC_VISIBILITY aclError aclrtMemMapNoAccess(void *virPtr, size_t size, size_t offset,
                                                 aclrtDrvMemHandle handle, uint64_t flags);
/* Undoes the mapping that starts at virPtr. */
ACL_FUNC_VISIBILITY aclError aclrtUnmapMem(void *virPtr);
/* Grants access to the mapping [virPtr, virPtr + size) (exactly one mapping):
 * ACL_RT_MEM_ACCESS_FLAGS_READWRITE for a host or device location. */
ACL_FUNC_VISIBILITY aclError aclrtMemSetAccess(void *virPtr, size_t size, aclrtMemAccessDesc *desc,
                                               size_t count);
/* The physical allocation mapped at virPtr (a mapping's start), as a new
 * handle reference the caller releases with aclrtFreePhysical. */
ACL_FUNC_VISIBILITY aclError aclrtMemRetainAllocationHandle(void *virPtr, aclrtDrvMemHandle *handle);
/* The allocation or mapping that holds ptr: its start and size (either may be NULL, not both). */
ACL_FUNC_VISIBILITY aclError aclrtMemGetAddressRange(void *ptr, void **pbase, size_t *psize);
/*
 * Shares a physical allocation of this process: writes a 64-bit number that
 * another process of this user passes to aclrtMemImportFromShareableHandle.
 * handleType must be ACL_MEM_HANDLE_TYPE_NONE. flags:
 * ACL_RT_VMM_EXPORT_FLAG_DEFAULT (only pids given to
 * aclrtMemSetPidToShareableHandle may import) or
 * ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION. One number per handle.
 */
ACL_FUNC_VISIBILITY aclError aclrtMemExportToShareableHandle(aclrtDrvMemHandle handle,
                                                             aclrtMemHandleType handleType, uint64_t flags,
                                                             uint64_t *shareableHandle);
/* The same; shareableHandle points to a uint64_t (DEFAULT) or an
 * aclrtMemFabricHandle (FABRIC, which needs a super-node). */
ACL_FUNC_VISIBILITY aclError aclrtMemExportToShareableHandleV2(aclrtDrvMemHandle handle, uint64_t flags,
                                                               aclrtMemSharedHandleType shareType,
                                                               void *shareableHandle);
/* Exporter: whitelists pidNum pids (from aclrtDeviceGetBareTgid in the importers). */
ACL_FUNC_VISIBILITY aclError aclrtMemSetPidToShareableHandle(uint64_t shareableHandle, int32_t *pid,
                                                             size_t pidNum);
ACL_FUNC_VISIBILITY aclError aclrtMemSetPidToShareableHandleV2(void *shareableHandle,
                                                               aclrtMemSharedHandleType shareType,
                                                               int32_t *pid, size_t pidNum);
/* Importer (another process): a handle of its own on the same physical
 * memory, on deviceId; it stays valid after the exporter frees or exits. */
ACL_FUNC_VISIBILITY aclError aclrtMemImportFromShareableHandle(uint64_t shareableHandle, int32_t deviceId,
                                                               aclrtDrvMemHandle *handle);
/* The same on the current device; flags must be 0. */
ACL_FUNC_VISIBILITY aclError aclrtMemImportFromShareableHandleV2(void *shareableHandle,
                                                                 aclrtMemSharedHandleType shareType,
                                                                 uint64_t flags, aclrtDrvMemHandle *handle);

/* ==== Contexts, devices, versions, the last error ========================= */

/* A context: a device, its default stream, the streams created in it. */
typedef void *aclrtContext;

/* Where the program runs: on the device's own CPU, or on a host beside it. */
typedef enum aclrtRunMode {
  ACL_DEVICE,
  ACL_HOST,
} aclrtRunMode;

typedef enum aclrtDeviceStatus {
  ACL_RT_DEVICE_STATUS_NORMAL = 0,
  ACL_RT_DEVICE_STATUS_ABNORMAL,
  ACL_RT_DEVICE_STATUS_END = 0xFFFF,
} aclrtDeviceStatus;

/* Reserved by CANN; utilizationExtend must be NULL. */
typedef struct aclrtUtilizationExtendInfo aclrtUtilizationExtendInfo;

/* Percentages; -1: not measured. */
typedef struct aclrtUtilizationInfo {
  int32_t cubeUtilization;
  int32_t vectorUtilization;
  int32_t aicpuUtilization;
  int32_t memoryUtilization;
  aclrtUtilizationExtendInfo *utilizationExtend;
} aclrtUtilizationInfo;

/* Floating-point results on overflow: saturated, or inf/NaN. */
typedef enum aclrtFloatOverflowMode {
  ACL_RT_OVERFLOW_MODE_SATURATION = 0,
  ACL_RT_OVERFLOW_MODE_INFNAN,
  ACL_RT_OVERFLOW_MODE_UNDEF,
} aclrtFloatOverflowMode;

/* Device attributes for aclrtGetDeviceInfo (CANN's numbering). */
typedef enum {
  ACL_DEV_ATTR_AICPU_CORE_NUM = 1,
  ACL_DEV_ATTR_AICORE_CORE_NUM = 101,
  ACL_DEV_ATTR_CUBE_CORE_NUM = 102,
  ACL_DEV_ATTR_VECTOR_CORE_NUM = 201,
  ACL_DEV_ATTR_WARP_SIZE = 202,
  ACL_DEV_ATTR_MAX_THREAD_PER_VECTOR_CORE = 203,
  ACL_DEV_ATTR_LOCAL_MEM_PER_VECTOR_CORE = 204, /* the old name of UBUF_PER_VECTOR_CORE */
  ACL_DEV_ATTR_UBUF_PER_VECTOR_CORE = 204,
  ACL_DEV_ATTR_MAX_GRID_DIM_X = 205,
  ACL_DEV_ATTR_MAX_GRID_DIM_Y = 206,
  ACL_DEV_ATTR_MAX_GRID_DIM_Z = 207,
  ACL_DEV_ATTR_MAX_BLOCK_PER_GRID = 208,
  ACL_DEV_ATTR_MAX_THREADS_PER_BLOCK = 209,
  ACL_DEV_ATTR_MAX_BLOCK_DIM_X = 210,
  ACL_DEV_ATTR_MAX_BLOCK_DIM_Y = 211,
  ACL_DEV_ATTR_MAX_BLOCK_DIM_Z = 212,
  ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE = 301,
  ACL_DEV_ATTR_L2_CACHE_SIZE = 302,
  ACL_DEV_ATTR_SMP_ID = 401U,
  ACL_DEV_ATTR_PHY_CHIP_ID = 402U,
  ACL_DEV_ATTR_SUPER_POD_DEVIDE_ID = 403U, /* the old spelling of SUPER_POD_DEVICE_ID */
  ACL_DEV_ATTR_SUPER_POD_DEVICE_ID = 403U,
  ACL_DEV_ATTR_SUPER_POD_SERVER_ID = 404U,
  ACL_DEV_ATTR_SUPER_POD_ID = 405U,
  ACL_DEV_ATTR_CUST_OP_PRIVILEGE = 406U,
  ACL_DEV_ATTR_MAINBOARD_ID = 407U,
  ACL_DEV_ATTR_HD_CONNECT_TYPE = 408U,
  ACL_DEV_ATTR_DEVICE_FORM_FACTOR = 409U,
  ACL_DEV_ATTR_IS_VIRTUAL = 501U,
  ACL_DEV_ATTR_NPU_ARCH = 601U,
} aclrtDevAttr;

/* How the host reaches the device (ACL_DEV_ATTR_HD_CONNECT_TYPE). */
#define ACL_HOST_DEVICE_CONNECT_TYPE_PCIE 0
#define ACL_HOST_DEVICE_CONNECT_TYPE_HCCS 1
#define ACL_HOST_DEVICE_CONNECT_TYPE_UB 2

/* ACL_DEV_ATTR_DEVICE_FORM_FACTOR values. */
#define ACL_DEVICE_FORM_FACTOR_POD 0
#define ACL_DEVICE_FORM_FACTOR_A_K 1
#define ACL_DEVICE_FORM_FACTOR_A_X 2
#define ACL_DEVICE_FORM_FACTOR_PCIE_CARD 3

/* Features aclrtGetDeviceCapability answers about, and its answers. */
typedef enum {
  ACL_FEATURE_TSCPU_TASK_UPDATE_SUPPORT_AIC_AIV = 1,
  ACL_FEATURE_SYSTEM_MEMQ_EVENT_CROSS_DEV = 21,
} aclrtDevFeatureType;
#define ACL_DEV_FEATURE_SUPPORT 0x00000001
#define ACL_DEV_FEATURE_NOT_SUPPORT 0x00000000

/* Compute resources a process (or a thread) may use on a device. */
typedef enum {
  ACL_RT_DEV_RES_CUBE_CORE = 0,
  ACL_RT_DEV_RES_VECTOR_CORE,
} aclrtDevResLimitType;

/* The scope of aclrtGetLastError / aclrtPeekAtLastError: only the thread. */
typedef enum aclrtLastErrLevel {
  ACL_RT_THREAD_LEVEL = 0,
} aclrtLastErrLevel;

/* aclrtGetErrorVerbose: a device fault's kind and detail. */
typedef enum {
  ACL_RT_NO_ERROR = 0,
  ACL_RT_ERROR_MEMORY = 1,
  ACL_RT_ERROR_L2 = 2,
  ACL_RT_ERROR_AICORE = 3,
  ACL_RT_ERROR_LINK = 4,
  ACL_RT_ERROR_L3_PORT = 5,
  ACL_RT_ERROR_OTHERS = 0xFFFF,
} aclrtErrorType;

typedef enum aclrtAicoreErrorType {
  ACL_RT_AICORE_ERROR_UNKNOWN,
  ACL_RT_AICORE_ERROR_SW,
  ACL_RT_AICORE_ERROR_HW_LOCAL,
} aclrtAicoreErrorType;

#define MAX_MEM_UCE_INFO_ARRAY_SIZE 128
#define UCE_INFO_RESERVED_SIZE 14
#define ACL_RT_MEM_UCE_INFO_MAX_NUM 20

/* A range of device memory with an uncorrectable error. */
typedef struct aclrtMemUceInfo {
  void *addr;
  size_t len;
  size_t reserved[UCE_INFO_RESERVED_SIZE];
} aclrtMemUceInfo;

typedef struct {
  size_t arraySize;
  aclrtMemUceInfo memUceInfoArray[ACL_RT_MEM_UCE_INFO_MAX_NUM];
} aclrtMemUceInfoArray;

typedef union aclrtErrorInfoDetail {
  aclrtMemUceInfoArray uceInfo;
  aclrtAicoreErrorType aicoreErrType;
} aclrtErrorInfoDetail;

typedef struct aclrtErrorInfo {
  uint8_t tryRepair; /* 1: aclrtRepairError may fix it */
  uint8_t hasDetail; /* 1: detail is filled in */
  uint8_t reserved[2];
  aclrtErrorType errorType;
  aclrtErrorInfoDetail detail;
} aclrtErrorInfo;

/* aclsysGetVersionStr's buffer size. */
#define ACL_PKG_VERSION_MAX_SIZE 128
#define ACL_PKG_VERSION_PARTS_MAX_SIZE 64

/*
 * Contexts. aclrtSetDevice makes the device's default (primary) context
 * current; aclrtCreateContext creates one more and makes it current for the
 * calling thread; aclrtSetCurrentContext switches the thread's context and so
 * its current device. The NULL stream is the current context's default
 * stream, and aclrtCreateStream creates in the current context.
 * aclrtDestroyContext waits for and destroys the context's streams; the
 * default context cannot be destroyed (ACL_ERROR_RT_CONTEXT_NULL, as for a
 * handle that is not a live context).
 */
ACL_FUNC_VISIBILITY aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId);
ACL_FUNC_VISIBILITY aclError aclrtDestroyContext(aclrtContext context);
ACL_FUNC_VISIBILITY aclError aclrtSetCurrentContext(aclrtContext context);
ACL_FUNC_VISIBILITY aclError aclrtGetCurrentContext(aclrtContext *context);
/* The current context's default stream, as a handle any call accepts. */
ACL_FUNC_VISIBILITY aclError aclrtCtxGetCurrentDefaultStream(aclrtStream *stream);
/* The compute resource of type the calling thread may use (the device limit). */
ACL_FUNC_VISIBILITY aclError aclrtGetResInCurrentThread(aclrtDevResLimitType type, uint32_t *value);

/* Devices. */
ACL_FUNC_VISIBILITY aclError aclrtGetRunMode(aclrtRunMode *runMode);
/* The emulated chip's name (ASCEND_IPC_EMU_SOC; static storage). */
ACL_FUNC_VISIBILITY const char *aclrtGetSocName(void);
ACL_FUNC_VISIBILITY aclError aclrtGetDeviceInfo(uint32_t deviceId, aclrtDevAttr attr, int64_t *value);
ACL_FUNC_VISIBILITY aclError aclrtGetDeviceCapability(int32_t deviceId, aclrtDevFeatureType devFeatureType,
                                                      int32_t *value);
ACL_FUNC_VISIBILITY aclError aclrtQueryDeviceStatus(int32_t deviceId, aclrtDeviceStatus *deviceStatus);
ACL_FUNC_VISIBILITY aclError aclrtGetDeviceUtilizationRate(int32_t deviceId, aclrtUtilizationInfo *utilizationInfo);
ACL_FUNC_VISIBILITY aclError aclrtDeviceGetStreamPriorityRange(int32_t *leastPriority, int32_t *greatestPriority);
/* Process-wide limits on a device's compute resources, until reset. */
ACL_FUNC_VISIBILITY aclError aclrtSetDeviceResLimit(int32_t deviceId, aclrtDevResLimitType type, uint32_t value);
ACL_FUNC_VISIBILITY aclError aclrtGetDeviceResLimit(int32_t deviceId, aclrtDevResLimitType type, uint32_t *value);
ACL_FUNC_VISIBILITY aclError aclrtResetDeviceResLimit(int32_t deviceId);
/* Waits for every stream of the current device. */
ACL_FUNC_VISIBILITY aclError aclrtSynchronizeDevice(void);
ACL_FUNC_VISIBILITY aclError aclrtDeviceDisablePeerAccess(int32_t peerDeviceId);
/* Whether code built for socVersion runs on this device: 1 or 0. */
ACL_FUNC_VISIBILITY aclError aclrtCheckArchCompatibility(const char *socVersion, int32_t *canCompatible);

/* Versions and attributes of the installed CANN. */
ACL_FUNC_VISIBILITY aclError aclsysGetVersionStr(char *pkgName, char *versionStr);
ACL_FUNC_VISIBILITY aclError aclsysGetVersionNum(char *pkgName, int32_t *versionNum);
/* *cannAttrList: static storage, *num entries. */
ACL_FUNC_VISIBILITY aclError aclGetCannAttributeList(const aclCannAttr **cannAttrList, size_t *num);
ACL_FUNC_VISIBILITY aclError aclGetCannAttribute(aclCannAttr cannAttr, int32_t *value);

/* Floating-point overflow: the device's mode, a stream's detection switch,
 * and the device's overflow status (written to / cleared by a stream task). */
ACL_FUNC_VISIBILITY aclError aclrtSetDeviceSatMode(aclrtFloatOverflowMode mode);
ACL_FUNC_VISIBILITY aclError aclrtGetDeviceSatMode(aclrtFloatOverflowMode *mode);
ACL_FUNC_VISIBILITY aclError aclrtSetStreamOverflowSwitch(aclrtStream stream, uint32_t flag);
ACL_FUNC_VISIBILITY aclError aclrtGetStreamOverflowSwitch(aclrtStream stream, uint32_t *flag);
ACL_FUNC_VISIBILITY aclError aclrtGetOverflowStatus(void *outputAddr, size_t outputSize, aclrtStream stream);
ACL_FUNC_VISIBILITY aclError aclrtResetOverflowStatus(aclrtStream stream);

/* The calling thread's last error code: Get returns and clears it, Peek
 * only returns it. */
ACL_FUNC_VISIBILITY aclError aclrtGetLastError(aclrtLastErrLevel level);
ACL_FUNC_VISIBILITY aclError aclrtPeekAtLastError(aclrtLastErrLevel level);
/* A device fault's details (the emulated device has none: ACL_RT_NO_ERROR). */
ACL_FUNC_VISIBILITY aclError aclrtGetErrorVerbose(int32_t deviceId, aclrtErrorInfo *errorInfo);


/* ==== Stream configuration, failure modes, event and value tasks ========== */

/* aclrtCreateStreamWithConfig flags (may be or-ed). */
#define ACL_STREAM_FAST_LAUNCH 0x00000001U
#define ACL_STREAM_FAST_SYNC 0x00000002U
#define ACL_STREAM_PERSISTENT 0x00000004U
#define ACL_STREAM_HUGE 0x00000008U
#define ACL_STREAM_CPU_SCHEDULE 0x00000010U
#define ACL_STREAM_DEVICE_USE_ONLY 0x00000020U

/* aclrtValueWait conditions on the 64-bit word. */
#define ACL_STREAM_WAIT_VALUE_GEQ 0x00000000U /* (int64_t)(*addr - value) >= 0 */
#define ACL_STREAM_WAIT_VALUE_EQ 0x00000001U  /* *addr == value */
#define ACL_STREAM_WAIT_VALUE_AND 0x00000002U /* (*addr & value) != 0 */
#define ACL_STREAM_WAIT_VALUE_NOR 0x00000003U /* ~(*addr | value) != 0 */

/* aclrtSetStreamFailureMode modes. */
#define ACL_CONTINUE_ON_FAILURE 0x00000000U
#define ACL_STOP_ON_FAILURE 0x00000001U

/* aclrtRecordEventWithFlag / aclrtStreamWaitEventWithFlag flags. */
#define ACL_EVENT_RECORD_DEFAULT 0x0U
#define ACL_EVENT_RECORD_EXTERNAL 0x01U
#define ACL_EVENT_WAIT_DEFAULT 0x0U
#define ACL_EVENT_WAIT_EXTERNAL 0x01U

typedef enum aclrtStreamStatus {
  ACL_STREAM_STATUS_COMPLETE = 0,
  ACL_STREAM_STATUS_NOT_READY = 1,
  ACL_STREAM_STATUS_RESERVED = 0xFFFF,
} aclrtStreamStatus;

typedef enum {
  ACL_RT_STREAM_WORK_ADDR_PTR = 0,
  ACL_RT_STREAM_WORK_SIZE,
  ACL_RT_STREAM_FLAG,
  ACL_RT_STREAM_PRIORITY,
} aclrtStreamConfigAttr;

/* Filled by aclrtSetStreamConfigOpt, read by aclrtCreateStreamV2. */
typedef struct aclrtStreamConfigHandle {
  void *workptr;
  size_t workSize;
  size_t flag;
  uint32_t priority;
} aclrtStreamConfigHandle;

typedef enum {
  ACL_RT_STREAM_STATE_CREATE_POST = 1, /* after a stream was created */
  ACL_RT_STREAM_STATE_DESTROY_PRE,     /* before a stream is destroyed */
} aclrtStreamState;

typedef void (*aclrtStreamStateCallback)(aclrtStream stm, aclrtStreamState state, void *args);

typedef enum {
  ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM = 10,
  ACL_RT_MEMCPY_SDMA_AUTOMATIC_MAX = 11,
  ACL_RT_MEMCPY_SDMA_AUTOMATIC_MIN = 12,
  ACL_RT_MEMCPY_SDMA_AUTOMATIC_EQUAL = 13,
} aclrtReduceKind;

/* One parameter of a random-number task: a value of `size` bytes held in
 * valueOrAddr, or (isAddr 1) the device address of one. */
typedef struct {
  uint8_t isAddr;
  uint8_t valueOrAddr[8];
  uint8_t size;
  uint8_t rsv[6];
} aclrtRandomParaInfo;

typedef struct {
  aclrtRandomParaInfo dropoutRation;
} aclrtDropoutBitmaskInfo;

typedef struct {
  aclrtRandomParaInfo min;
  aclrtRandomParaInfo max;
} aclrtUniformDisInfo;

typedef struct {
  aclrtRandomParaInfo mean;
  aclrtRandomParaInfo stddev;
} aclrtNormalDisInfo;

typedef enum {
  ACL_RT_RANDOM_NUM_FUNC_TYPE_DROPOUT_BITMASK = 0,
  ACL_RT_RANDOM_NUM_FUNC_TYPE_UNIFORM_DIS,
  ACL_RT_RANDOM_NUM_FUNC_TYPE_NORMAL_DIS,
  ACL_RT_RANDOM_NUM_FUNC_TYPE_TRUNCATED_NORMAL_DIS,
} aclrtRandomNumFuncType;

typedef struct {
  aclrtRandomNumFuncType funcType;
  union {
    aclrtDropoutBitmaskInfo dropoutBitmaskInfo;
    aclrtUniformDisInfo uniformDisInfo;
    aclrtNormalDisInfo normalDisInfo;
  } paramInfo;
} aclrtRandomNumFuncParaInfo;

typedef struct {
  aclDataType dataType;
  aclrtRandomNumFuncParaInfo randomNumFuncParaInfo;
  void *randomParaAddr;    /* NULL: the runtime keeps the parameters itself */
  void *randomResultAddr;  /* device memory for the results */
  void *randomCounterAddr; /* device memory holding the generator's offset */
  aclrtRandomParaInfo randomSeed;
  aclrtRandomParaInfo randomNum;
  uint8_t rsv[8];
} aclrtRandomNumTaskInfo;

/* Failure mode of a stream: ACL_CONTINUE_ON_FAILURE (default) or
 * ACL_STOP_ON_FAILURE; once per stream. */
ACL_FUNC_VISIBILITY aclError aclrtSetStreamFailureMode(aclrtStream stream, uint64_t mode);
/* Whether every task queued on the stream has run. */
ACL_FUNC_VISIBILITY aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status);
ACL_FUNC_VISIBILITY aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority, uint32_t flag);
ACL_FUNC_VISIBILITY aclrtStreamConfigHandle *aclrtCreateStreamConfigHandle(void);
ACL_FUNC_VISIBILITY aclError aclrtDestroyStreamConfigHandle(aclrtStreamConfigHandle *handle);
ACL_FUNC_VISIBILITY aclError aclrtSetStreamConfigOpt(aclrtStreamConfigHandle *handle, aclrtStreamConfigAttr attr,
                                                     const void *attrValue, size_t valueSize);
ACL_FUNC_VISIBILITY aclError aclrtCreateStreamV2(aclrtStream *stream, const aclrtStreamConfigHandle *handle);
ACL_FUNC_VISIBILITY aclError aclrtStreamGetFlags(aclrtStream stream, uint32_t *flags);
ACL_FUNC_VISIBILITY aclError aclrtStreamGetId(aclrtStream stream, int32_t *streamId);
ACL_FUNC_VISIBILITY aclError aclrtStreamGetPriority(aclrtStream stream, uint32_t *priority);
/* Stops the running task and drops the queued ones. */
ACL_FUNC_VISIBILITY aclError aclrtStreamAbort(aclrtStream stream);
/* Stops the running task only; the queued ones stay. */
ACL_FUNC_VISIBILITY aclError aclrtStreamStop(aclrtStream stream);
/* Registers (callback non-NULL) or removes a named stream state callback. */
ACL_FUNC_VISIBILITY aclError aclrtRegStreamStateCallback(const char *regName, aclrtStreamStateCallback callback,
                                                         void *args);

/* Queues a reset of the event: waits issued after it wait for a new record. */
ACL_FUNC_VISIBILITY aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream);
/* When the event's latest record ran, in microseconds. */
ACL_FUNC_VISIBILITY aclError aclrtEventGetTimestamp(aclrtEvent event, uint64_t *timestamp);
ACL_FUNC_VISIBILITY aclError aclrtRecordEventWithFlag(aclrtEvent event, aclrtStream stream, uint32_t flag);
ACL_FUNC_VISIBILITY aclError aclrtStreamWaitEventWithFlag(aclrtStream stream, aclrtEvent event, uint32_t timeout,
                                                          uint32_t flag);

/* Stream-ordered writes and waits on a 64-bit word of device memory. */
ACL_FUNC_VISIBILITY aclError aclrtValueWrite(void *devAddr, uint64_t value, uint32_t flag, aclrtStream stream);
ACL_FUNC_VISIBILITY aclError aclrtValueWait(void *devAddr, uint64_t value, uint32_t flag, aclrtStream stream);

/* dst = dst (kind) src, element-wise over count bytes of type. */
ACL_FUNC_VISIBILITY aclError aclrtReduceAsync(void *dst, const void *src, uint64_t count, aclrtReduceKind kind,
                                              aclDataType type, aclrtStream stream, void *reserve);
ACL_FUNC_VISIBILITY aclError aclrtRandomNumAsync(const aclrtRandomNumTaskInfo *taskInfo, const aclrtStream stream,
                                                 void *reserve);


/* ==== Callbacks, host functions, exceptions, kernels ====================== */

/* -- Host callbacks on a stream (see docs/c-api.md for the emulator's rules) -- */

typedef enum aclrtCallbackBlockType {
  ACL_CALLBACK_NO_BLOCK = 0, /* later tasks of the stream may run before the callback returns */
  ACL_CALLBACK_BLOCK = 1,    /* later tasks of the stream wait until the callback has returned */
} aclrtCallbackBlockType;

typedef void (*aclrtCallback)(void *userData);
typedef void (*aclrtHostFunc)(void *args);

/* Queues fn(userData) on stream; it runs on the thread bound to the stream by
 * aclrtSubscribeReport, inside that thread's aclrtProcessReport. */
ACL_FUNC_VISIBILITY aclError aclrtLaunchCallback(aclrtCallback fn, void *userData, aclrtCallbackBlockType blockType,
                                                 aclrtStream stream);
/* Binds the thread whose pthread_t value is threadId to stream's callbacks. */
ACL_FUNC_VISIBILITY aclError aclrtSubscribeReport(uint64_t threadId, aclrtStream stream);
/* Called in the bound thread: runs the callbacks that are due, waiting up to
 * timeout ms (-1: no limit) for one. */
ACL_FUNC_VISIBILITY aclError aclrtProcessReport(int32_t timeout);
ACL_FUNC_VISIBILITY aclError aclrtUnSubscribeReport(uint64_t threadId, aclrtStream stream);

/* Queues fn(args) on stream; later tasks wait until it returned. It runs on
 * the thread bound by aclrtSubscribeHostFunc, else on a thread of the runtime. */
ACL_FUNC_VISIBILITY aclError aclrtLaunchHostFunc(aclrtStream stream, aclrtHostFunc fn, void *args);
ACL_FUNC_VISIBILITY aclError aclrtSubscribeHostFunc(uint64_t hostFuncThreadId, aclrtStream exeStream);
ACL_FUNC_VISIBILITY aclError aclrtProcessHostFunc(int32_t timeout);
ACL_FUNC_VISIBILITY aclError aclrtUnSubscribeHostFunc(uint64_t hostFuncThreadId, aclrtStream exeStream);

/* -- Exceptions of device tasks -- */

/* Opaque: read it with the getters below, only inside the callback. */
typedef struct rtExceptionInfo aclrtExceptionInfo;
typedef void (*aclrtExceptionInfoCallback)(aclrtExceptionInfo *exceptionInfo);

/* The process's callback for failed device tasks (NULL: none). */
ACL_FUNC_VISIBILITY aclError aclrtSetExceptionInfoCallback(aclrtExceptionInfoCallback callback);
/* Each returns 0xFFFFFFFF for a NULL info. */
ACL_FUNC_VISIBILITY uint32_t aclrtGetTaskIdFromExceptionInfo(const aclrtExceptionInfo *info);
ACL_FUNC_VISIBILITY uint32_t aclrtGetStreamIdFromExceptionInfo(const aclrtExceptionInfo *info);
ACL_FUNC_VISIBILITY uint32_t aclrtGetThreadIdFromExceptionInfo(const aclrtExceptionInfo *info);
ACL_FUNC_VISIBILITY uint32_t aclrtGetDeviceIdFromExceptionInfo(const aclrtExceptionInfo *info);
ACL_FUNC_VISIBILITY uint32_t aclrtGetErrorCodeFromExceptionInfo(const aclrtExceptionInfo *info);

/* -- Kernels: binaries, functions, arguments, launches -- */

typedef void *aclrtBinHandle;
typedef void *aclrtFuncHandle;
typedef void *aclrtArgsHandle;
typedef void *aclrtParamHandle;

ACL_FUNC_VISIBILITY aclError aclrtGetArgsFromExceptionInfo(const aclrtExceptionInfo *info, void **devArgsPtr,
                                                           uint32_t *devArgsLen);
ACL_FUNC_VISIBILITY aclError aclrtGetFuncHandleFromExceptionInfo(const aclrtExceptionInfo *info,
                                                                 aclrtFuncHandle *func);
/* The id of the last task the calling thread queued on a stream it created. */
ACL_FUNC_VISIBILITY aclError aclrtGetThreadLastTaskId(uint32_t *taskId);

#define ACL_RT_BINARY_MAGIC_ELF_AICORE 0x43554245U
#define ACL_RT_BINARY_MAGIC_ELF_VECTOR_CORE 0x41415246U
#define ACL_RT_BINARY_MAGIC_ELF_CUBE_CORE 0x41494343U

typedef enum aclrtBinaryLoadOptionType {
  ACL_RT_BINARY_LOAD_OPT_LAZY_LOAD = 1,
  ACL_RT_BINARY_LOAD_OPT_LAZY_MAGIC = 2,
  ACL_RT_BINARY_LOAD_OPT_MAGIC = 2,
  ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE = 3,
} aclrtBinaryLoadOptionType;

typedef union aclrtBinaryLoadOptionValue {
  uint32_t isLazyLoad;
  uint32_t magic;
  int32_t cpuKernelMode;
  uint32_t rsv[4];
} aclrtBinaryLoadOptionValue;

typedef struct {
  aclrtBinaryLoadOptionType type;
  aclrtBinaryLoadOptionValue value;
} aclrtBinaryLoadOption;

typedef struct aclrtBinaryLoadOptions {
  aclrtBinaryLoadOption *options;
  size_t numOpt;
} aclrtBinaryLoadOptions;

typedef enum {
  ACL_RT_ENGINE_TYPE_AIC = 0,
  ACL_RT_ENGINE_TYPE_AIV,
} aclrtEngineType;

typedef enum aclrtLaunchKernelAttrId {
  ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE = 1,
  ACL_RT_LAUNCH_KERNEL_ATTR_LOCAL_MEMORY_SIZE = 2, /* the old name of DYN_UBUF_SIZE */
  ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE = 2,
  ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE = 3,
  ACL_RT_LAUNCH_KERNEL_ATTR_BLOCKDIM_OFFSET = 4,
  ACL_RT_LAUNCH_KERNEL_ATTR_BLOCK_TASK_PREFETCH = 5,
  ACL_RT_LAUNCH_KERNEL_ATTR_DATA_DUMP = 6,
  ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT = 7,
  ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US = 8, /* not together with TIMEOUT */
  ACL_RT_LAUNCH_KERNEL_ATTR_ENABLE_PROFILING = 9,
} aclrtLaunchKernelAttrId;

typedef struct {
  uint32_t timeoutLow;  /* microseconds, low 32 bits */
  uint32_t timeoutHigh; /* high 32 bits */
} aclrtTimeoutUs;

typedef union aclrtLaunchKernelAttrValue {
  uint8_t schemMode;
  uint32_t localMemorySize; /* the old name of dynUBufSize */
  uint32_t dynUBufSize;
  aclrtEngineType engineType;
  uint32_t blockDimOffset;
  uint8_t isBlockTaskPrefetch;
  uint8_t isDataDump;
  uint16_t timeout; /* seconds */
  aclrtTimeoutUs timeoutUs;
  uint8_t enableProfiling;
  uint32_t rsv[4];
} aclrtLaunchKernelAttrValue;

typedef struct aclrtLaunchKernelAttr {
  aclrtLaunchKernelAttrId id;
  aclrtLaunchKernelAttrValue value;
} aclrtLaunchKernelAttr;

typedef struct aclrtLaunchKernelCfg {
  aclrtLaunchKernelAttr *attrs;
  size_t numAttrs;
} aclrtLaunchKernelCfg;

/* Loads a device binary. In the emulator it is a host shared object whose
 * kernels follow <ascend_ipc/kernel.h>, whatever the file's extension. */
ACL_FUNC_VISIBILITY aclError aclrtBinaryLoadFromFile(const char *binPath, aclrtBinaryLoadOptions *options,
                                                     aclrtBinHandle *binHandle);
/* Unloads it; its function and argument handles go with it. */
ACL_FUNC_VISIBILITY aclError aclrtBinaryUnLoad(aclrtBinHandle binHandle);
ACL_FUNC_VISIBILITY aclError aclrtBinaryGetFunction(const aclrtBinHandle binHandle, const char *kernelName,
                                                    aclrtFuncHandle *funcHandle);
/* Arguments: appended in order, then finalized, then launched (any number of times). */
ACL_FUNC_VISIBILITY aclError aclrtKernelArgsInit(aclrtFuncHandle funcHandle, aclrtArgsHandle *argsHandle);
ACL_FUNC_VISIBILITY aclError aclrtKernelArgsAppend(aclrtArgsHandle argsHandle, void *param, size_t paramSize,
                                                   aclrtParamHandle *paramHandle);
/* A pointer-sized argument that, at launch, points to a copy of the bytes
 * written into its buffer (aclrtKernelArgsGetPlaceHolderBuffer). */
ACL_FUNC_VISIBILITY aclError aclrtKernelArgsAppendPlaceHolder(aclrtArgsHandle argsHandle,
                                                              aclrtParamHandle *paramHandle);
ACL_FUNC_VISIBILITY aclError aclrtKernelArgsGetPlaceHolderBuffer(aclrtArgsHandle argsHandle,
                                                                 aclrtParamHandle paramHandle, size_t dataSize,
                                                                 void **bufferAddr);
ACL_FUNC_VISIBILITY aclError aclrtKernelArgsFinalize(aclrtArgsHandle argsHandle);
/* Queues funcHandle over numBlocks blocks on stream; reserve must be NULL. */
ACL_FUNC_VISIBILITY aclError aclrtLaunchKernelWithConfig(aclrtFuncHandle funcHandle, uint32_t numBlocks,
                                                         aclrtStream stream, aclrtLaunchKernelCfg *cfg,
                                                         aclrtArgsHandle argsHandle, void *reserve);


/* ==== Managed and registered host memory, labels, model runtime instances = */

/* aclrtMemAllocManaged: the only flag, memory reachable from host and device. */
#define ACL_RT_MEM_ATTACH_GLOBAL 0x01U

/* aclrtHostRegisterV2 flags (an OR of them). */
#define ACL_HOST_REG_MAPPED 0x2UL          /* give the host range a device address */
#define ACL_HOST_REG_IOMEMORY 0x4UL        /* a PCIe device's I/O space (reserved in CANN) */
#define ACL_HOST_REG_READONLY 0x8UL        /* device access read-only (reserved in CANN) */
#define ACL_HOST_REG_PINNED 0x10000000UL   /* page-lock pageable host memory */

/* Unified memory (2 MiB granules), freed with aclrtFree. flag: ACL_RT_MEM_ATTACH_GLOBAL. */
ACL_FUNC_VISIBILITY aclError aclrtMemAllocManaged(void **ptr, uint64_t size, uint32_t flag);
/* Registers [ptr, ptr+size) of host memory (4 KiB aligned) with the runtime. */
ACL_FUNC_VISIBILITY aclError aclrtHostRegisterV2(void *ptr, uint64_t size, uint32_t flag);
/* The device address of a range registered with ACL_HOST_REG_MAPPED (pHost: its base); flag 0. */
ACL_FUNC_VISIBILITY aclError aclrtHostGetDevicePointer(void *pHost, void **pDevice, uint32_t flag);
/* Ends the registration whose base is ptr. */
ACL_FUNC_VISIBILITY aclError aclrtHostUnregister(void *ptr);

/* Labels: positions in the task lists of streams bound to a model runtime
 * instance, and lists of them that a switch task jumps through. */
typedef void *aclrtLabel;
typedef void *aclrtLabelList;

ACL_FUNC_VISIBILITY aclError aclrtCreateLabel(aclrtLabel *label);
/* Places label at the current end of stream's tasks (a stream bound to a model being built). */
ACL_FUNC_VISIBILITY aclError aclrtSetLabel(aclrtLabel label, aclrtStream stream);
ACL_FUNC_VISIBILITY aclError aclrtDestroyLabel(aclrtLabel label);
/* num in 1..65535 labels, in index order. */
ACL_FUNC_VISIBILITY aclError aclrtCreateLabelList(aclrtLabel *labels, size_t num, aclrtLabelList *labelList);
ACL_FUNC_VISIBILITY aclError aclrtDestroyLabelList(aclrtLabelList labelList);
/* A task: reads a uint32 index at device address ptr when it runs and jumps
 * to that label of labelList (an index past the end: the last label); the
 * stream's own tasks after it do not run. */
ACL_FUNC_VISIBILITY aclError aclrtSwitchLabelByIndex(void *ptr, uint32_t maxValue, aclrtLabelList labelList,
                                                     aclrtStream stream);

/* Model runtime instances: task lists recorded from streams and replayed. */
typedef void *aclmdlRI;

typedef enum {
  ACL_MODEL_RI_CAPTURE_MODE_GLOBAL = 0,
  ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL,
  ACL_MODEL_RI_CAPTURE_MODE_RELAXED,
} aclmdlRICaptureMode;

typedef enum {
  ACL_MODEL_RI_CAPTURE_STATUS_NONE = 0,
  ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE,
  ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED,
} aclmdlRICaptureStatus;

/* aclmdlRIBindStream flags (values from CANN's documentation). */
#ifndef ACL_MODEL_STREAM_FLAG_HEAD
#define ACL_MODEL_STREAM_FLAG_HEAD 0x00000000U    /* runs from the start of each execution */
#define ACL_MODEL_STREAM_FLAG_DEFAULT 0x7FFFFFFFU /* runs only when a switch jumps to it */
#endif

/* Build: begin (flag 0), bind streams, queue tasks on them, end each stream's
 * tasks, end the build (reserve NULL). */
ACL_FUNC_VISIBILITY aclError aclmdlRIBuildBegin(aclmdlRI *modelRI, uint32_t flag);
ACL_FUNC_VISIBILITY aclError aclmdlRIBindStream(aclmdlRI modelRI, aclrtStream stream, uint32_t flag);
ACL_FUNC_VISIBILITY aclError aclmdlRIEndTask(aclmdlRI modelRI, aclrtStream stream);
ACL_FUNC_VISIBILITY aclError aclmdlRIBuildEnd(aclmdlRI modelRI, void *reserve);
ACL_FUNC_VISIBILITY aclError aclmdlRIUnbindStream(aclmdlRI modelRI, aclrtStream stream);
/* Queues one run of the model's tasks on stream. */
ACL_FUNC_VISIBILITY aclError aclmdlRIExecuteAsync(aclmdlRI modelRI, aclrtStream stream);
ACL_FUNC_VISIBILITY aclError aclmdlRIDestroy(aclmdlRI modelRI);
/* Capture: tasks queued on stream between begin and end are recorded into a
 * new model runtime instance instead of running. */
ACL_FUNC_VISIBILITY aclError aclmdlRICaptureBegin(aclrtStream stream, aclmdlRICaptureMode mode);
ACL_FUNC_VISIBILITY aclError aclmdlRICaptureGetInfo(aclrtStream stream, aclmdlRICaptureStatus *status,
                                                    aclmdlRI *modelRI);
ACL_FUNC_VISIBILITY aclError aclmdlRICaptureEnd(aclrtStream stream, aclmdlRI *modelRI);

#include "acl_rt_allocator.h"


#ifdef __cplusplus
}
#endif

#endif /* ASCEND_IPC_ACL_RT_H_ */
