/*
 * The one list of CANN calls the project implements. Each line names a call
 * once; everything else is generated from it with X-macros:
 *
 *   core/provider.h      the aipc_provider table's fields
 *   api/acl_api.c        the exported acl* forwarders of libascendcl_emu.so
 *   emu/emu.h            the emulator's declarations, aipc__emu_<field>
 *   emu/runtime.c        the emulator's table
 *   cann/cann_provider.c the dlsym table and the "missing symbol" stubs
 *
 * Adding a call: one line here, in the list of its part (and its declaration
 * in the public header, which is CANN's ABI), and aipc__emu_<field> in the
 * emulator. AIPC_CALLS is every part's list in one.
 *
 * X(ret, symbol, field, params, args, since, need)
 *   ret     return type, one token: aclError, uint32_t, or aipc_cstr (const char *)
 *   symbol  the CANN name
 *   field   the provider table's field, also the emulator's function suffix
 *   params  the parameter list, parenthesised, as CANN declares it
 *   args    the parameter names, parenthesised, to forward them
 *   since   the oldest CANN whose documentation lists the call (docs/hardware.md),
 *           or NULL when every CANN the project supports (8.0.RC1 and newer) has it
 *   need    REQUIRED: a library without it is not a runtime the project can
 *           use; OPTIONAL: without it only the features that need it fail
 */
#ifndef ASCEND_IPC_CORE_CALLS_H_
#define ASCEND_IPC_CORE_CALLS_H_

#include "acl/acl.h"

/* Return types are single tokens so that a macro can paste them. */
typedef const char *aipc_cstr;
typedef aclrtStreamConfigHandle *aipc_stream_config_ptr;

#define AIPC_CALLS_CORE(X)                                                                                          \
  X(aipc_cstr, aclGetRecentErrMsg, get_recent_err_msg, (void), (), NULL, OPTIONAL)                             \
  X(aclError, aclInit, init, (const char *configPath), (configPath), NULL, REQUIRED)                            \
  X(aclError, aclFinalize, finalize, (void), (), NULL, OPTIONAL)                                               \
  X(aclError, aclrtSetDevice, set_device, (int32_t deviceId), (deviceId), NULL, REQUIRED)                      \
  X(aclError, aclrtGetDevice, get_device, (int32_t * deviceId), (deviceId), NULL, REQUIRED)                    \
  X(aclError, aclrtGetDeviceCount, get_device_count, (uint32_t * count), (count), NULL, REQUIRED)              \
  X(aclError, aclrtResetDevice, reset_device, (int32_t deviceId), (deviceId), NULL, OPTIONAL)                  \
  X(aclError, aclrtResetDeviceForce, reset_device_force, (int32_t deviceId), (deviceId), "CANN 8.0.RC3", OPTIONAL) \
  X(aclError, aclrtDeviceCanAccessPeer, device_can_access_peer,                                                \
    (int32_t * canAccessPeer, int32_t deviceId, int32_t peerDeviceId), (canAccessPeer, deviceId, peerDeviceId), \
    NULL, OPTIONAL)                                                                                            \
  X(aclError, aclrtDeviceEnablePeerAccess, device_enable_peer_access, (int32_t peerDeviceId, uint32_t flags),  \
    (peerDeviceId, flags), NULL, OPTIONAL)                                                                     \
  X(aclError, aclrtDeviceGetBareTgid, device_get_bare_tgid, (int32_t * pid), (pid), "CANN 8.0.0", OPTIONAL)    \
  X(aclError, aclrtGetMemInfo, get_mem_info, (aclrtMemAttr attr, size_t * free, size_t * total),              \
    (attr, free, total), NULL, OPTIONAL)                                                                       \
  X(aclError, aclrtMalloc, malloc, (void **devPtr, size_t size, aclrtMemMallocPolicy policy),                  \
    (devPtr, size, policy), NULL, REQUIRED)                                                                    \
  X(aclError, aclrtFree, free, (void *devPtr), (devPtr), NULL, REQUIRED)                                       \
  X(aclError, aclrtMallocHost, malloc_host, (void **hostPtr, size_t size), (hostPtr, size), NULL, OPTIONAL)    \
  X(aclError, aclrtFreeHost, free_host, (void *hostPtr), (hostPtr), NULL, OPTIONAL)                            \
  X(aclError, aclrtMemcpy, memcpy,                                                                             \
    (void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind),                          \
    (dst, destMax, src, count, kind), NULL, REQUIRED)                                                          \
  X(aclError, aclrtMemcpyAsync, memcpy_async,                                                                  \
    (void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind, aclrtStream stream),      \
    (dst, destMax, src, count, kind, stream), NULL, OPTIONAL)                                                  \
  X(aclError, aclrtMemcpyBatch, memcpy_batch,                                                                  \
    (void **dsts, size_t *destMaxs, void **srcs, size_t *sizes, size_t numBatches, aclrtMemcpyBatchAttr *attrs, \
     size_t *attrsIndexes, size_t numAttrs, size_t *failIndex),                                                 \
    (dsts, destMaxs, srcs, sizes, numBatches, attrs, attrsIndexes, numAttrs, failIndex), "CANN 8.2.RC1", OPTIONAL) \
  X(aclError, aclrtMemset, memset, (void *devPtr, size_t maxCount, int32_t value, size_t count),              \
    (devPtr, maxCount, value, count), NULL, OPTIONAL)                                                          \
  X(aclError, aclrtMemsetAsync, memset_async,                                                                  \
    (void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream),                          \
    (devPtr, maxCount, value, count, stream), NULL, OPTIONAL)                                                  \
  X(aclError, aclrtCreateStream, create_stream, (aclrtStream * stream), (stream), NULL, OPTIONAL)              \
  X(aclError, aclrtDestroyStream, destroy_stream, (aclrtStream stream), (stream), NULL, OPTIONAL)              \
  X(aclError, aclrtDestroyStreamForce, destroy_stream_force, (aclrtStream stream), (stream), NULL, OPTIONAL)   \
  X(aclError, aclrtSynchronizeStream, synchronize_stream, (aclrtStream stream), (stream), NULL, OPTIONAL)      \
  X(aclError, aclrtSynchronizeStreamWithTimeout, synchronize_stream_with_timeout,                               \
    (aclrtStream stream, int32_t timeout), (stream, timeout), NULL, OPTIONAL)                                  \
  X(aclError, aclrtCreateEvent, create_event, (aclrtEvent * event), (event), NULL, OPTIONAL)                   \
  X(aclError, aclrtCreateEventWithFlag, create_event_with_flag, (aclrtEvent * event, uint32_t flag),           \
    (event, flag), NULL, OPTIONAL)                                                                             \
  X(aclError, aclrtCreateEventExWithFlag, create_event_ex_with_flag, (aclrtEvent * event, uint32_t flag),      \
    (event, flag), NULL, OPTIONAL)                                                                             \
  X(aclError, aclrtDestroyEvent, destroy_event, (aclrtEvent event), (event), NULL, OPTIONAL)                   \
  X(aclError, aclrtRecordEvent, record_event, (aclrtEvent event, aclrtStream stream), (event, stream), NULL,   \
    OPTIONAL)                                                                                                  \
  X(aclError, aclrtQueryEventStatus, query_event_status, (aclrtEvent event, aclrtEventRecordedStatus * status), \
    (event, status), NULL, OPTIONAL)                                                                           \
  X(aclError, aclrtSynchronizeEvent, synchronize_event, (aclrtEvent event), (event), NULL, OPTIONAL)           \
  X(aclError, aclrtSynchronizeEventWithTimeout, synchronize_event_with_timeout,                                 \
    (aclrtEvent event, int32_t timeout), (event, timeout), NULL, OPTIONAL)                                     \
  X(aclError, aclrtStreamWaitEvent, stream_wait_event, (aclrtStream stream, aclrtEvent event), (stream, event), \
    NULL, OPTIONAL)                                                                                            \
  X(aclError, aclrtStreamWaitEventWithTimeout, stream_wait_event_with_timeout,                                  \
    (aclrtStream stream, aclrtEvent event, int32_t timeout), (stream, event, timeout), "CANN 8.5.0", OPTIONAL) \
  X(aclError, aclrtEventElapsedTime, event_elapsed_time, (float *ms, aclrtEvent startEvent, aclrtEvent endEvent), \
    (ms, startEvent, endEvent), NULL, OPTIONAL)                                                                \
  X(aclError, aclrtIpcGetEventHandle, ipc_get_event_handle, (aclrtEvent event, aclrtIpcEventHandle * handle),  \
    (event, handle), "CANN 8.5.0", OPTIONAL)                                                                   \
  X(aclError, aclrtIpcOpenEventHandle, ipc_open_event_handle, (aclrtIpcEventHandle handle, aclrtEvent * event), \
    (handle, event), "CANN 8.5.0", OPTIONAL)                                                                   \
  X(aclError, aclrtCreateNotify, create_notify, (aclrtNotify * notify, uint64_t flag), (notify, flag), "CANN 8.2.RC1", \
    OPTIONAL)                                                                                                  \
  X(aclError, aclrtDestroyNotify, destroy_notify, (aclrtNotify notify), (notify), "CANN 8.2.RC1", OPTIONAL)    \
  X(aclError, aclrtRecordNotify, record_notify, (aclrtNotify notify, aclrtStream stream), (notify, stream),    \
    "CANN 8.2.RC1", OPTIONAL)                                                                                  \
  X(aclError, aclrtWaitAndResetNotify, wait_and_reset_notify,                                                   \
    (aclrtNotify notify, aclrtStream stream, uint32_t timeout), (notify, stream, timeout), "CANN 8.2.RC1", OPTIONAL) \
  X(aclError, aclrtGetNotifyId, get_notify_id, (aclrtNotify notify, uint32_t * notifyId), (notify, notifyId),  \
    "CANN 8.2.RC1", OPTIONAL)                                                                                  \
  X(aclError, aclrtNotifyGetExportKey, notify_get_export_key,                                                   \
    (aclrtNotify notify, char *key, size_t len, uint64_t flags), (notify, key, len, flags), "CANN 8.2.RC1",    \
    OPTIONAL)                                                                                                  \
  X(aclError, aclrtNotifyImportByKey, notify_import_by_key, (aclrtNotify * notify, const char *key, uint64_t flags), \
    (notify, key, flags), "CANN 8.2.RC1", OPTIONAL)                                                            \
  X(aclError, aclrtNotifySetImportPid, notify_set_import_pid, (aclrtNotify notify, int32_t *pid, size_t num),  \
    (notify, pid, num), "CANN 8.2.RC1", OPTIONAL)                                                              \
  X(aclError, aclrtNotifySetImportPidInterServer, notify_set_import_pid_inter_server,                           \
    (aclrtNotify notify, aclrtServerPid *serverPids, size_t num), (notify, serverPids, num), "CANN 8.5.0",     \
    OPTIONAL)                                                                                                  \
  X(aclError, aclrtIpcMemGetExportKey, ipc_get_export_key,                                                     \
    (void *devPtr, size_t size, char *key, size_t len, uint64_t flags), (devPtr, size, key, len, flags),       \
    "CANN 8.2.RC1", OPTIONAL)                                                                                  \
  X(aclError, aclrtIpcMemSetImportPid, ipc_set_import_pid, (const char *key, int32_t *pid, size_t num),        \
    (key, pid, num), "CANN 8.2.RC1", OPTIONAL)                                                                 \
  X(aclError, aclrtIpcMemImportPidInterServer, ipc_import_pid_inter_server,                                    \
    (const char *key, aclrtServerPid *serverPids, size_t num), (key, serverPids, num), "CANN 8.5.0", OPTIONAL) \
  X(aclError, aclrtIpcMemImportByKey, ipc_import_by_key, (void **devPtr, const char *key, uint64_t flags),     \
    (devPtr, key, flags), "CANN 8.2.RC1", OPTIONAL)                                                            \
  X(aclError, aclrtIpcMemSetAttr, ipc_set_attr, (const char *key, aclrtIpcMemAttrType type, uint64_t attr),    \
    (key, type, attr), "CANN 8.5.0", OPTIONAL)                                                                 \
  X(aclError, aclrtIpcMemClose, ipc_close, (const char *key), (key), "CANN 8.2.RC1", OPTIONAL)                 \
  X(aclError, aclrtMemGetAllocationGranularity, mem_get_allocation_granularity,                                 \
    (aclrtPhysicalMemProp * prop, aclrtMemGranularityOptions option, size_t * granularity),                    \
    (prop, option, granularity), NULL, OPTIONAL)                                                               \
  X(aclError, aclrtMallocPhysical, malloc_physical,                                                            \
    (aclrtDrvMemHandle * handle, size_t size, const aclrtPhysicalMemProp *prop, uint64_t flags),               \
    (handle, size, prop, flags), NULL, OPTIONAL)                                                               \
  X(aclError, aclrtFreePhysical, free_physical, (aclrtDrvMemHandle handle), (handle), NULL, OPTIONAL)          \
  X(aclError, aclrtReserveMemAddress, reserve_mem_address,                                                     \
    (void **virPtr, size_t size, size_t alignment, void *expectPtr, uint64_t flags),                           \
    (virPtr, size, alignment, expectPtr, flags), NULL, OPTIONAL)                                               \
  X(aclError, aclrtReleaseMemAddress, release_mem_address, (void *virPtr), (virPtr), NULL, OPTIONAL)           \
  X(aclError, aclrtMapMem, map_mem,                                                                            \
    (void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle, uint64_t flags),                      \
    (virPtr, size, offset, handle, flags), NULL, OPTIONAL)                                                     \
  X(aclError, aclrtMemMapNoAccess, mem_map_no_access,                                                          \
    (void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle, uint64_t flags),                      \
    (virPtr, size, offset, handle, flags), "CANN 9.2.0", OPTIONAL)                                             \
  X(aclError, aclrtUnmapMem, unmap_mem, (void *virPtr), (virPtr), NULL, OPTIONAL)                              \
  X(aclError, aclrtMemSetAccess, mem_set_access,                                                               \
    (void *virPtr, size_t size, aclrtMemAccessDesc *desc, size_t count), (virPtr, size, desc, count), "CANN 8.5.0", \
    OPTIONAL)                                                                                                  \
  X(aclError, aclrtMemRetainAllocationHandle, mem_retain_allocation_handle,                                    \
    (void *virPtr, aclrtDrvMemHandle *handle), (virPtr, handle), "CANN 8.5.0", OPTIONAL)                       \
  X(aclError, aclrtMemGetAddressRange, mem_get_address_range, (void *ptr, void **pbase, size_t *psize),          \
    (ptr, pbase, psize), "CANN 9.0.0", OPTIONAL)                                                               \
  X(aclError, aclrtMemExportToShareableHandle, mem_export_to_shareable_handle,                                 \
    (aclrtDrvMemHandle handle, aclrtMemHandleType handleType, uint64_t flags, uint64_t *shareableHandle),      \
    (handle, handleType, flags, shareableHandle), "CANN 8.0.RC2", OPTIONAL)                                    \
  X(aclError, aclrtMemExportToShareableHandleV2, mem_export_to_shareable_handle_v2,                            \
    (aclrtDrvMemHandle handle, uint64_t flags, aclrtMemSharedHandleType shareType, void *shareableHandle),     \
    (handle, flags, shareType, shareableHandle), "CANN 8.5.0", OPTIONAL)                                       \
  X(aclError, aclrtMemSetPidToShareableHandle, mem_set_pid_to_shareable_handle,                                \
    (uint64_t shareableHandle, int32_t *pid, size_t pidNum), (shareableHandle, pid, pidNum), "CANN 8.0.RC2", OPTIONAL) \
  X(aclError, aclrtMemSetPidToShareableHandleV2, mem_set_pid_to_shareable_handle_v2,                           \
    (void *shareableHandle, aclrtMemSharedHandleType shareType, int32_t *pid, size_t pidNum),                  \
    (shareableHandle, shareType, pid, pidNum), "CANN 8.5.0", OPTIONAL)                                         \
  X(aclError, aclrtMemImportFromShareableHandle, mem_import_from_shareable_handle,                             \
    (uint64_t shareableHandle, int32_t deviceId, aclrtDrvMemHandle *handle), (shareableHandle, deviceId, handle), \
    "CANN 8.0.RC2", OPTIONAL)                                                                                  \
  X(aclError, aclrtMemImportFromShareableHandleV2, mem_import_from_shareable_handle_v2,                        \
    (void *shareableHandle, aclrtMemSharedHandleType shareType, uint64_t flags, aclrtDrvMemHandle *handle),    \
    (shareableHandle, shareType, flags, handle), "CANN 8.5.0", OPTIONAL)


/* The runtime around IPC that CANN programs call beside it, one list per part
 * (each defined empty until its part has calls). */
#define AIPC_CALLS_CONTEXT(X) /* contexts, devices, versions, last error */                                         \
  X(aclError, aclrtCreateContext, create_context, (aclrtContext * context, int32_t deviceId),                       \
    (context, deviceId), NULL, OPTIONAL)                                                                            \
  X(aclError, aclrtDestroyContext, destroy_context, (aclrtContext context), (context), NULL, OPTIONAL)              \
  X(aclError, aclrtSetCurrentContext, set_current_context, (aclrtContext context), (context), NULL, OPTIONAL)       \
  X(aclError, aclrtGetCurrentContext, get_current_context, (aclrtContext * context), (context), NULL, OPTIONAL)     \
  X(aclError, aclrtCtxGetCurrentDefaultStream, ctx_get_current_default_stream, (aclrtStream * stream),              \
    (stream), "CANN 8.2.RC1", OPTIONAL)                                                                             \
  X(aclError, aclrtGetResInCurrentThread, get_res_in_current_thread,                                                \
    (aclrtDevResLimitType type, uint32_t * value),                                                                  \
    (type, value), "CANN 8.3.RC1", OPTIONAL)                                                                        \
  X(aclError, aclrtGetRunMode, get_run_mode, (aclrtRunMode * runMode), (runMode), NULL, OPTIONAL)                   \
  X(aipc_cstr, aclrtGetSocName, get_soc_name, (void), (), NULL, OPTIONAL)                                           \
  X(aclError, aclrtGetDeviceInfo, get_device_info, (uint32_t deviceId, aclrtDevAttr attr, int64_t * value),         \
    (deviceId, attr, value), "CANN 8.2.RC1", OPTIONAL)                                                              \
  X(aclError, aclrtGetDeviceCapability, get_device_capability,                                                      \
    (int32_t deviceId, aclrtDevFeatureType devFeatureType, int32_t * value),                                        \
    (deviceId, devFeatureType, value), "CANN 8.3.RC1", OPTIONAL)                                                    \
  X(aclError, aclrtQueryDeviceStatus, query_device_status, (int32_t deviceId, aclrtDeviceStatus * deviceStatus),    \
    (deviceId, deviceStatus), NULL, OPTIONAL)                                                                       \
  X(aclError, aclrtGetDeviceUtilizationRate, get_device_utilization_rate,                                           \
    (int32_t deviceId, aclrtUtilizationInfo * utilizationInfo),                                                     \
    (deviceId, utilizationInfo), NULL, OPTIONAL)                                                                    \
  X(aclError, aclrtDeviceGetStreamPriorityRange, device_get_stream_priority_range,                                  \
    (int32_t * leastPriority, int32_t * greatestPriority),                                                          \
    (leastPriority, greatestPriority), "CANN 8.2.RC1", OPTIONAL)                                                    \
  X(aclError, aclrtSetDeviceResLimit, set_device_res_limit,                                                         \
    (int32_t deviceId, aclrtDevResLimitType type, uint32_t value),                                                  \
    (deviceId, type, value), "CANN 8.3.RC1", OPTIONAL)                                                              \
  X(aclError, aclrtGetDeviceResLimit, get_device_res_limit,                                                         \
    (int32_t deviceId, aclrtDevResLimitType type, uint32_t * value),                                                \
    (deviceId, type, value), "CANN 8.3.RC1", OPTIONAL)                                                              \
  X(aclError, aclrtResetDeviceResLimit, reset_device_res_limit, (int32_t deviceId), (deviceId), "CANN 8.3.RC1", OPTIONAL) \
  X(aclError, aclrtSynchronizeDevice, synchronize_device, (void), (), NULL, OPTIONAL)                               \
  X(aclError, aclrtDeviceDisablePeerAccess, device_disable_peer_access, (int32_t peerDeviceId),                     \
    (peerDeviceId), NULL, OPTIONAL)                                                                                 \
  X(aclError, aclrtCheckArchCompatibility, check_arch_compatibility,                                                \
    (const char *socVersion, int32_t *canCompatible),                                                               \
    (socVersion, canCompatible), "CANN 8.5.0", OPTIONAL)                                                            \
  X(aclError, aclsysGetVersionStr, sys_get_version_str, (char *pkgName, char *versionStr),                          \
    (pkgName, versionStr), "CANN 8.5.0", OPTIONAL)                                                                  \
  X(aclError, aclsysGetVersionNum, sys_get_version_num, (char *pkgName, int32_t *versionNum),                       \
    (pkgName, versionNum), "CANN 8.5.0", OPTIONAL)                                                                  \
  X(aclError, aclGetCannAttributeList, get_cann_attribute_list, (const aclCannAttr **cannAttrList, size_t *num),    \
    (cannAttrList, num), NULL, OPTIONAL)                                                                            \
  X(aclError, aclGetCannAttribute, get_cann_attribute, (aclCannAttr cannAttr, int32_t *value),                      \
    (cannAttr, value), NULL, OPTIONAL)                                                                              \
  X(aclError, aclrtSetDeviceSatMode, set_device_sat_mode, (aclrtFloatOverflowMode mode), (mode), NULL, OPTIONAL)    \
  X(aclError, aclrtGetDeviceSatMode, get_device_sat_mode, (aclrtFloatOverflowMode * mode),                          \
    (mode), NULL, OPTIONAL)                                                                                         \
  X(aclError, aclrtSetStreamOverflowSwitch, set_stream_overflow_switch, (aclrtStream stream, uint32_t flag),        \
    (stream, flag), NULL, OPTIONAL)                                                                                 \
  X(aclError, aclrtGetStreamOverflowSwitch, get_stream_overflow_switch, (aclrtStream stream, uint32_t * flag),      \
    (stream, flag), NULL, OPTIONAL)                                                                                 \
  X(aclError, aclrtGetOverflowStatus, get_overflow_status,                                                          \
    (void *outputAddr, size_t outputSize, aclrtStream stream),                                                      \
    (outputAddr, outputSize, stream), NULL, OPTIONAL)                                                               \
  X(aclError, aclrtResetOverflowStatus, reset_overflow_status, (aclrtStream stream), (stream), NULL, OPTIONAL)      \
  X(aclError, aclrtGetLastError, get_last_error, (aclrtLastErrLevel level), (level), "CANN 8.0.RC3", OPTIONAL)      \
  X(aclError, aclrtPeekAtLastError, peek_at_last_error, (aclrtLastErrLevel level), (level), "CANN 8.0.RC3", OPTIONAL) \
  X(aclError, aclrtGetErrorVerbose, get_error_verbose, (int32_t deviceId, aclrtErrorInfo * errorInfo),              \
    (deviceId, errorInfo), "CANN 8.5.0", OPTIONAL)

/* stream configuration, failure modes, event and value tasks */
#define AIPC_CALLS_STREAM(X)                                                                                          \
  X(aclError, aclrtSetStreamFailureMode, set_stream_failure_mode, (aclrtStream stream, uint64_t mode),                \
    (stream, mode), NULL, OPTIONAL)                                                                                   \
  X(aclError, aclrtStreamQuery, stream_query, (aclrtStream stream, aclrtStreamStatus * status),                       \
    (stream, status), NULL, OPTIONAL)                                                                                 \
  X(aclError, aclrtCreateStreamWithConfig, create_stream_with_config,                                                 \
    (aclrtStream * stream, uint32_t priority, uint32_t flag),                                                         \
    (stream, priority, flag), NULL, OPTIONAL)                                                                         \
  X(aipc_stream_config_ptr, aclrtCreateStreamConfigHandle, create_stream_config_handle, (void), (), NULL, OPTIONAL)   \
  X(aclError, aclrtDestroyStreamConfigHandle, destroy_stream_config_handle, (aclrtStreamConfigHandle * handle),       \
    (handle), NULL, OPTIONAL)                                                                                         \
  X(aclError, aclrtSetStreamConfigOpt, set_stream_config_opt,                                                         \
    (aclrtStreamConfigHandle * handle, aclrtStreamConfigAttr attr, const void *attrValue, size_t valueSize),          \
    (handle, attr, attrValue, valueSize), NULL, OPTIONAL)                                                             \
  X(aclError, aclrtCreateStreamV2, create_stream_v2, (aclrtStream * stream, const aclrtStreamConfigHandle *handle),   \
    (stream, handle), NULL, OPTIONAL)                                                                                 \
  X(aclError, aclrtStreamGetFlags, stream_get_flags, (aclrtStream stream, uint32_t * flags),                          \
    (stream, flags), "CANN 8.5.0", OPTIONAL)                                                                          \
  X(aclError, aclrtStreamGetId, stream_get_id, (aclrtStream stream, int32_t * streamId),                              \
    (stream, streamId), "CANN 8.2.RC1", OPTIONAL)                                                                     \
  X(aclError, aclrtStreamGetPriority, stream_get_priority, (aclrtStream stream, uint32_t * priority),                 \
    (stream, priority), "CANN 8.5.0", OPTIONAL)                                                                       \
  X(aclError, aclrtStreamAbort, stream_abort, (aclrtStream stream), (stream), "CANN 8.0.0", OPTIONAL)                 \
  X(aclError, aclrtStreamStop, stream_stop, (aclrtStream stream), (stream), "CANN 8.5.0", OPTIONAL)                   \
  X(aclError, aclrtRegStreamStateCallback, reg_stream_state_callback,                                                 \
    (const char *regName, aclrtStreamStateCallback callback, void *args),                                             \
    (regName, callback, args), "CANN 8.5.0", OPTIONAL)                                                                \
  X(aclError, aclrtResetEvent, reset_event, (aclrtEvent event, aclrtStream stream), (event, stream), NULL, OPTIONAL)  \
  X(aclError, aclrtEventGetTimestamp, event_get_timestamp, (aclrtEvent event, uint64_t * timestamp),                  \
    (event, timestamp), "CANN 8.5.0", OPTIONAL)                                                                       \
  X(aclError, aclrtRecordEventWithFlag, record_event_with_flag,                                                       \
    (aclrtEvent event, aclrtStream stream, uint32_t flag),                                                            \
    (event, stream, flag), "CANN 9.2.0", OPTIONAL)                                                                    \
  X(aclError, aclrtStreamWaitEventWithFlag, stream_wait_event_with_flag,                                              \
    (aclrtStream stream, aclrtEvent event, uint32_t timeout, uint32_t flag),                                          \
    (stream, event, timeout, flag), "CANN 9.2.0", OPTIONAL)                                                           \
  X(aclError, aclrtValueWrite, value_write, (void *devAddr, uint64_t value, uint32_t flag, aclrtStream stream),       \
    (devAddr, value, flag, stream), "CANN 8.5.0", OPTIONAL)                                                           \
  X(aclError, aclrtValueWait, value_wait, (void *devAddr, uint64_t value, uint32_t flag, aclrtStream stream),         \
    (devAddr, value, flag, stream), "CANN 8.5.0", OPTIONAL)                                                           \
  X(aclError, aclrtReduceAsync, reduce_async,                                                                         \
    (void *dst, const void *src, uint64_t count, aclrtReduceKind kind, aclDataType type, aclrtStream stream,          \
     void *reserve),                                                                                                  \
    (dst, src, count, kind, type, stream, reserve), "CANN 8.5.0", OPTIONAL)                                           \
  X(aclError, aclrtRandomNumAsync, random_num_async,                                                                  \
    (const aclrtRandomNumTaskInfo *taskInfo, const aclrtStream stream, void *reserve),                                \
    (taskInfo, stream, reserve), "CANN 8.5.0", OPTIONAL)

/* callbacks, host functions, exceptions, kernels */
#define AIPC_CALLS_TASK(X)                                                                                          \
  X(aclError, aclrtLaunchCallback, launch_callback,                                                            \
    (aclrtCallback fn, void *userData, aclrtCallbackBlockType blockType, aclrtStream stream),                  \
    (fn, userData, blockType, stream), NULL, OPTIONAL)                                                         \
  X(aclError, aclrtSubscribeReport, subscribe_report, (uint64_t threadId, aclrtStream stream), (threadId, stream), \
    NULL, OPTIONAL)                                                                                            \
  X(aclError, aclrtProcessReport, process_report, (int32_t timeout), (timeout), NULL, OPTIONAL)                \
  X(aclError, aclrtUnSubscribeReport, unsubscribe_report, (uint64_t threadId, aclrtStream stream),             \
    (threadId, stream), NULL, OPTIONAL)                                                                        \
  X(aclError, aclrtLaunchHostFunc, launch_host_func, (aclrtStream stream, aclrtHostFunc fn, void *args),       \
    (stream, fn, args), "CANN 8.5.0", OPTIONAL)                                                                \
  X(aclError, aclrtSubscribeHostFunc, subscribe_host_func, (uint64_t hostFuncThreadId, aclrtStream exeStream), \
    (hostFuncThreadId, exeStream), "CANN 8.5.0", OPTIONAL)                                                     \
  X(aclError, aclrtProcessHostFunc, process_host_func, (int32_t timeout), (timeout), "CANN 8.5.0", OPTIONAL)   \
  X(aclError, aclrtUnSubscribeHostFunc, unsubscribe_host_func, (uint64_t hostFuncThreadId, aclrtStream exeStream), \
    (hostFuncThreadId, exeStream), "CANN 8.5.0", OPTIONAL)                                                     \
  X(aclError, aclrtSetExceptionInfoCallback, set_exception_info_callback, (aclrtExceptionInfoCallback callback), \
    (callback), NULL, OPTIONAL)                                                                                \
  X(uint32_t, aclrtGetTaskIdFromExceptionInfo, get_task_id_from_exception_info, (const aclrtExceptionInfo *info), \
    (info), NULL, OPTIONAL)                                                                                    \
  X(uint32_t, aclrtGetStreamIdFromExceptionInfo, get_stream_id_from_exception_info,                            \
    (const aclrtExceptionInfo *info), (info), NULL, OPTIONAL)                                                  \
  X(uint32_t, aclrtGetThreadIdFromExceptionInfo, get_thread_id_from_exception_info,                            \
    (const aclrtExceptionInfo *info), (info), NULL, OPTIONAL)                                                  \
  X(uint32_t, aclrtGetDeviceIdFromExceptionInfo, get_device_id_from_exception_info,                            \
    (const aclrtExceptionInfo *info), (info), NULL, OPTIONAL)                                                  \
  X(uint32_t, aclrtGetErrorCodeFromExceptionInfo, get_error_code_from_exception_info,                          \
    (const aclrtExceptionInfo *info), (info), NULL, OPTIONAL)                                                  \
  X(aclError, aclrtGetArgsFromExceptionInfo, get_args_from_exception_info,                                     \
    (const aclrtExceptionInfo *info, void **devArgsPtr, uint32_t *devArgsLen), (info, devArgsPtr, devArgsLen), \
    "CANN 9.0.0", OPTIONAL)                                                                                    \
  X(aclError, aclrtGetFuncHandleFromExceptionInfo, get_func_handle_from_exception_info,                        \
    (const aclrtExceptionInfo *info, aclrtFuncHandle *func), (info, func), "CANN 9.0.0", OPTIONAL)             \
  X(aclError, aclrtGetThreadLastTaskId, get_thread_last_task_id, (uint32_t * taskId), (taskId), "CANN 8.5.0", OPTIONAL) \
  X(aclError, aclrtBinaryLoadFromFile, binary_load_from_file,                                                  \
    (const char *binPath, aclrtBinaryLoadOptions *options, aclrtBinHandle *binHandle),                         \
    (binPath, options, binHandle), "CANN 8.3.RC1", OPTIONAL)                                                   \
  X(aclError, aclrtBinaryUnLoad, binary_unload, (aclrtBinHandle binHandle), (binHandle), "CANN 8.3.RC1", OPTIONAL) \
  X(aclError, aclrtBinaryGetFunction, binary_get_function,                                                     \
    (const aclrtBinHandle binHandle, const char *kernelName, aclrtFuncHandle *funcHandle),                     \
    (binHandle, kernelName, funcHandle), "CANN 8.3.RC1", OPTIONAL)                                             \
  X(aclError, aclrtKernelArgsInit, kernel_args_init, (aclrtFuncHandle funcHandle, aclrtArgsHandle *argsHandle), \
    (funcHandle, argsHandle), "CANN 8.3.RC1", OPTIONAL)                                                        \
  X(aclError, aclrtKernelArgsAppend, kernel_args_append,                                                       \
    (aclrtArgsHandle argsHandle, void *param, size_t paramSize, aclrtParamHandle *paramHandle),                \
    (argsHandle, param, paramSize, paramHandle), "CANN 8.3.RC1", OPTIONAL)                                     \
  X(aclError, aclrtKernelArgsAppendPlaceHolder, kernel_args_append_place_holder,                               \
    (aclrtArgsHandle argsHandle, aclrtParamHandle *paramHandle), (argsHandle, paramHandle), "CANN 8.3.RC1", OPTIONAL) \
  X(aclError, aclrtKernelArgsGetPlaceHolderBuffer, kernel_args_get_place_holder_buffer,                        \
    (aclrtArgsHandle argsHandle, aclrtParamHandle paramHandle, size_t dataSize, void **bufferAddr),            \
    (argsHandle, paramHandle, dataSize, bufferAddr), "CANN 8.3.RC1", OPTIONAL)                                 \
  X(aclError, aclrtKernelArgsFinalize, kernel_args_finalize, (aclrtArgsHandle argsHandle), (argsHandle), "CANN 8.3.RC1", \
    OPTIONAL)                                                                                                  \
  X(aclError, aclrtLaunchKernelWithConfig, launch_kernel_with_config,                                          \
    (aclrtFuncHandle funcHandle, uint32_t numBlocks, aclrtStream stream, aclrtLaunchKernelCfg *cfg,            \
     aclrtArgsHandle argsHandle, void *reserve),                                                               \
    (funcHandle, numBlocks, stream, cfg, argsHandle, reserve), "CANN 8.3.RC1", OPTIONAL)

#define AIPC_CALLS_MODEL(X) /* managed and registered host memory, allocators, labels, model runtime instances */ \
  X(aclError, aclrtMemAllocManaged, mem_alloc_managed, (void **ptr, uint64_t size, uint32_t flag), (ptr, size, flag), "CANN 9.0.0", OPTIONAL) \
  X(aclError, aclrtHostRegisterV2, host_register_v2, (void *ptr, uint64_t size, uint32_t flag), (ptr, size, flag), "CANN 8.5.0", OPTIONAL) \
  X(aclError, aclrtHostGetDevicePointer, host_get_device_pointer, (void *pHost, void **pDevice, uint32_t flag), (pHost, pDevice, flag), "CANN 8.5.0", OPTIONAL) \
  X(aclError, aclrtHostUnregister, host_unregister, (void *ptr), (ptr), "CANN 8.5.0", OPTIONAL) \
  X(aclrtAllocatorDesc, aclrtAllocatorCreateDesc, allocator_create_desc, (void), (), "CANN 8.1.RC1", OPTIONAL) \
  X(aclError, aclrtAllocatorDestroyDesc, allocator_destroy_desc, (aclrtAllocatorDesc allocatorDesc), (allocatorDesc), "CANN 8.1.RC1", OPTIONAL) \
  X(aclError, aclrtAllocatorSetObjToDesc, allocator_set_obj_to_desc, (aclrtAllocatorDesc allocatorDesc, aclrtAllocator allocator), (allocatorDesc, allocator), "CANN 8.1.RC1", OPTIONAL) \
  X(aclError, aclrtAllocatorSetAllocFuncToDesc, allocator_set_alloc_func_to_desc, (aclrtAllocatorDesc allocatorDesc, aclrtAllocatorAllocFunc func), (allocatorDesc, func), "CANN 8.1.RC1", OPTIONAL) \
  X(aclError, aclrtAllocatorSetFreeFuncToDesc, allocator_set_free_func_to_desc, (aclrtAllocatorDesc allocatorDesc, aclrtAllocatorFreeFunc func), (allocatorDesc, func), "CANN 8.1.RC1", OPTIONAL) \
  X(aclError, aclrtAllocatorSetAllocAdviseFuncToDesc, allocator_set_alloc_advise_func_to_desc, (aclrtAllocatorDesc allocatorDesc, aclrtAllocatorAllocAdviseFunc func), (allocatorDesc, func), "CANN 8.1.RC1", OPTIONAL) \
  X(aclError, aclrtAllocatorSetGetAddrFromBlockFuncToDesc, allocator_set_get_addr_from_block_func_to_desc, (aclrtAllocatorDesc allocatorDesc, aclrtAllocatorGetAddrFromBlockFunc func), (allocatorDesc, func), "CANN 8.1.RC1", OPTIONAL) \
  X(aclError, aclrtAllocatorRegister, allocator_register, (aclrtStream stream, aclrtAllocatorDesc allocatorDesc), (stream, allocatorDesc), "CANN 8.1.RC1", OPTIONAL) \
  X(aclError, aclrtAllocatorGetByStream, allocator_get_by_stream, (aclrtStream stream, aclrtAllocatorDesc *allocatorDesc, aclrtAllocator *allocator, aclrtAllocatorAllocFunc *allocFunc, aclrtAllocatorFreeFunc *freeFunc, aclrtAllocatorAllocAdviseFunc *allocAdviseFunc, aclrtAllocatorGetAddrFromBlockFunc *getAddrFromBlockFunc), (stream, allocatorDesc, allocator, allocFunc, freeFunc, allocAdviseFunc, getAddrFromBlockFunc), "CANN 8.5.0", OPTIONAL) \
  X(aclError, aclrtAllocatorUnregister, allocator_unregister, (aclrtStream stream), (stream), "CANN 8.1.RC1", OPTIONAL) \
  X(aclError, aclrtCreateLabel, create_label, (aclrtLabel *label), (label), "CANN 8.3.RC1", OPTIONAL) \
  X(aclError, aclrtSetLabel, set_label, (aclrtLabel label, aclrtStream stream), (label, stream), "CANN 8.3.RC1", OPTIONAL) \
  X(aclError, aclrtDestroyLabel, destroy_label, (aclrtLabel label), (label), "CANN 8.3.RC1", OPTIONAL) \
  X(aclError, aclrtCreateLabelList, create_label_list, (aclrtLabel *labels, size_t num, aclrtLabelList *labelList), (labels, num, labelList), "CANN 8.3.RC1", OPTIONAL) \
  X(aclError, aclrtDestroyLabelList, destroy_label_list, (aclrtLabelList labelList), (labelList), "CANN 8.3.RC1", OPTIONAL) \
  X(aclError, aclrtSwitchLabelByIndex, switch_label_by_index, (void *ptr, uint32_t maxValue, aclrtLabelList labelList, aclrtStream stream), (ptr, maxValue, labelList, stream), "CANN 8.3.RC1", OPTIONAL) \
  X(aclError, aclmdlRIBuildBegin, mdl_ri_build_begin, (aclmdlRI *modelRI, uint32_t flag), (modelRI, flag), "CANN 8.3.RC1", OPTIONAL) \
  X(aclError, aclmdlRIBindStream, mdl_ri_bind_stream, (aclmdlRI modelRI, aclrtStream stream, uint32_t flag), (modelRI, stream, flag), "CANN 8.3.RC1", OPTIONAL) \
  X(aclError, aclmdlRIEndTask, mdl_ri_end_task, (aclmdlRI modelRI, aclrtStream stream), (modelRI, stream), "CANN 8.3.RC1", OPTIONAL) \
  X(aclError, aclmdlRIBuildEnd, mdl_ri_build_end, (aclmdlRI modelRI, void *reserve), (modelRI, reserve), "CANN 8.3.RC1", OPTIONAL) \
  X(aclError, aclmdlRIUnbindStream, mdl_ri_unbind_stream, (aclmdlRI modelRI, aclrtStream stream), (modelRI, stream), "CANN 8.3.RC1", OPTIONAL) \
  X(aclError, aclmdlRIExecuteAsync, mdl_ri_execute_async, (aclmdlRI modelRI, aclrtStream stream), (modelRI, stream), "CANN 8.1.RC1", OPTIONAL) \
  X(aclError, aclmdlRIDestroy, mdl_ri_destroy, (aclmdlRI modelRI), (modelRI), "CANN 8.1.RC1", OPTIONAL) \
  X(aclError, aclmdlRICaptureBegin, mdl_ri_capture_begin, (aclrtStream stream, aclmdlRICaptureMode mode), (stream, mode), "CANN 8.1.RC1", OPTIONAL) \
  X(aclError, aclmdlRICaptureGetInfo, mdl_ri_capture_get_info, (aclrtStream stream, aclmdlRICaptureStatus *status, aclmdlRI *modelRI), (stream, status, modelRI), "CANN 8.1.RC1", OPTIONAL) \
  X(aclError, aclmdlRICaptureEnd, mdl_ri_capture_end, (aclrtStream stream, aclmdlRI *modelRI), (stream, modelRI), "CANN 8.1.RC1", OPTIONAL)

#define AIPC_CALLS(X) AIPC_CALLS_CORE(X) AIPC_CALLS_CONTEXT(X) AIPC_CALLS_STREAM(X) AIPC_CALLS_TASK(X) AIPC_CALLS_MODEL(X)

/* AIPC_CALL_<field>: each call's place in the list; AIPC_CALL_NAME(field) its
 * CANN name (core/calls.c), for messages that name the call they report on. */
enum aipc_call {
#define AIPC_CALL_INDEX_(ret, symbol, field, params, args, since, need) AIPC_CALL_##field,
  AIPC_CALLS(AIPC_CALL_INDEX_)
#undef AIPC_CALL_INDEX_
  AIPC_CALL_COUNT
};
extern const char *const aipc__call_names[AIPC_CALL_COUNT];
#define AIPC_CALL_NAME(field) (aipc__call_names[AIPC_CALL_##field])

#endif
