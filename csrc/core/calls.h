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
 *   ret     return type, one token: aclError, or aipc_cstr (const char *)
 *   symbol  the CANN name
 *   field   the provider table's field, also the emulator's function suffix
 *   params  the parameter list, parenthesised, as CANN declares it
 *   args    the parameter names, parenthesised, to forward them
 *   since   the oldest CANN whose documentation lists the call (docs/hardware.md),
 *           or NULL when every CANN the project supports has it
 *   need    REQUIRED: a library without it is not a runtime the project can
 *           use; OPTIONAL: without it only the features that need it fail
 */
#ifndef ASCEND_IPC_CORE_CALLS_H_
#define ASCEND_IPC_CORE_CALLS_H_

#include "acl/acl.h"

/* Return types are single tokens so that a macro can paste them. */
typedef const char *aipc_cstr;

#define AIPC_CALLS_CORE(X)                                                                                          \
  X(aipc_cstr, aclGetRecentErrMsg, get_recent_err_msg, (void), (), NULL, OPTIONAL)                             \
  X(aclError, aclInit, init, (const char *configPath), (configPath), NULL, REQUIRED)                            \
  X(aclError, aclFinalize, finalize, (void), (), NULL, OPTIONAL)                                               \
  X(aclError, aclrtSetDevice, set_device, (int32_t deviceId), (deviceId), NULL, REQUIRED)                      \
  X(aclError, aclrtGetDevice, get_device, (int32_t * deviceId), (deviceId), NULL, REQUIRED)                    \
  X(aclError, aclrtGetDeviceCount, get_device_count, (uint32_t * count), (count), NULL, REQUIRED)              \
  X(aclError, aclrtResetDevice, reset_device, (int32_t deviceId), (deviceId), NULL, OPTIONAL)                  \
  X(aclError, aclrtResetDeviceForce, reset_device_force, (int32_t deviceId), (deviceId), NULL, OPTIONAL)       \
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
    (event, flag), "CANN 8.2.RC1", OPTIONAL)                                                                   \
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
    (aclrtStream stream, aclrtEvent event, int32_t timeout), (stream, event, timeout), NULL, OPTIONAL)         \
  X(aclError, aclrtEventElapsedTime, event_elapsed_time, (float *ms, aclrtEvent startEvent, aclrtEvent endEvent), \
    (ms, startEvent, endEvent), NULL, OPTIONAL)                                                                \
  X(aclError, aclrtIpcGetEventHandle, ipc_get_event_handle, (aclrtEvent event, aclrtIpcEventHandle * handle),  \
    (event, handle), "CANN 8.5.0", OPTIONAL)                                                                   \
  X(aclError, aclrtIpcOpenEventHandle, ipc_open_event_handle, (aclrtIpcEventHandle handle, aclrtEvent * event), \
    (handle, event), "CANN 8.5.0", OPTIONAL)                                                                   \
  X(aclError, aclrtCreateNotify, create_notify, (aclrtNotify * notify, uint64_t flag), (notify, flag), NULL,   \
    OPTIONAL)                                                                                                  \
  X(aclError, aclrtDestroyNotify, destroy_notify, (aclrtNotify notify), (notify), NULL, OPTIONAL)              \
  X(aclError, aclrtRecordNotify, record_notify, (aclrtNotify notify, aclrtStream stream), (notify, stream),    \
    NULL, OPTIONAL)                                                                                            \
  X(aclError, aclrtWaitAndResetNotify, wait_and_reset_notify,                                                   \
    (aclrtNotify notify, aclrtStream stream, uint32_t timeout), (notify, stream, timeout), NULL, OPTIONAL)     \
  X(aclError, aclrtGetNotifyId, get_notify_id, (aclrtNotify notify, uint32_t * notifyId), (notify, notifyId),  \
    NULL, OPTIONAL)                                                                                            \
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
    (virPtr, size, offset, handle, flags), NULL, OPTIONAL)                                                     \
  X(aclError, aclrtUnmapMem, unmap_mem, (void *virPtr), (virPtr), NULL, OPTIONAL)                              \
  X(aclError, aclrtMemSetAccess, mem_set_access,                                                               \
    (void *virPtr, size_t size, aclrtMemAccessDesc *desc, size_t count), (virPtr, size, desc, count), NULL,    \
    OPTIONAL)                                                                                                  \
  X(aclError, aclrtMemRetainAllocationHandle, mem_retain_allocation_handle,                                    \
    (void *virPtr, aclrtDrvMemHandle *handle), (virPtr, handle), NULL, OPTIONAL)                               \
  X(aclError, aclrtMemGetAddressRange, mem_get_address_range, (void *ptr, void **pbase, size_t *psize),          \
    (ptr, pbase, psize), NULL, OPTIONAL)                                                                       \
  X(aclError, aclrtMemExportToShareableHandle, mem_export_to_shareable_handle,                                 \
    (aclrtDrvMemHandle handle, aclrtMemHandleType handleType, uint64_t flags, uint64_t *shareableHandle),      \
    (handle, handleType, flags, shareableHandle), NULL, OPTIONAL)                                              \
  X(aclError, aclrtMemExportToShareableHandleV2, mem_export_to_shareable_handle_v2,                            \
    (aclrtDrvMemHandle handle, uint64_t flags, aclrtMemSharedHandleType shareType, void *shareableHandle),     \
    (handle, flags, shareType, shareableHandle), NULL, OPTIONAL)                                               \
  X(aclError, aclrtMemSetPidToShareableHandle, mem_set_pid_to_shareable_handle,                                \
    (uint64_t shareableHandle, int32_t *pid, size_t pidNum), (shareableHandle, pid, pidNum), NULL, OPTIONAL)   \
  X(aclError, aclrtMemSetPidToShareableHandleV2, mem_set_pid_to_shareable_handle_v2,                           \
    (void *shareableHandle, aclrtMemSharedHandleType shareType, int32_t *pid, size_t pidNum),                  \
    (shareableHandle, shareType, pid, pidNum), NULL, OPTIONAL)                                                 \
  X(aclError, aclrtMemImportFromShareableHandle, mem_import_from_shareable_handle,                             \
    (uint64_t shareableHandle, int32_t deviceId, aclrtDrvMemHandle *handle), (shareableHandle, deviceId, handle), \
    NULL, OPTIONAL)                                                                                            \
  X(aclError, aclrtMemImportFromShareableHandleV2, mem_import_from_shareable_handle_v2,                        \
    (void *shareableHandle, aclrtMemSharedHandleType shareType, uint64_t flags, aclrtDrvMemHandle *handle),    \
    (shareableHandle, shareType, flags, handle), NULL, OPTIONAL)


/* The runtime around IPC that CANN programs call beside it, one list per part
 * (each defined empty until its part has calls). */
#define AIPC_CALLS_CONTEXT(X) /* contexts, devices, versions, last error */

#define AIPC_CALLS_STREAM(X) /* stream configuration, failure modes, event and value tasks */

#define AIPC_CALLS_TASK(X) /* callbacks, host functions, exceptions, kernels */

#define AIPC_CALLS_MODEL(X) /* managed and registered host memory, allocators, labels, model runtime instances */ \
  X(aclError, aclrtMemAllocManaged, mem_alloc_managed, (void **ptr, uint64_t size, uint32_t flag), (ptr, size, flag), NULL, OPTIONAL) \
  X(aclError, aclrtHostRegisterV2, host_register_v2, (void *ptr, uint64_t size, uint32_t flag), (ptr, size, flag), NULL, OPTIONAL) \
  X(aclError, aclrtHostGetDevicePointer, host_get_device_pointer, (void *pHost, void **pDevice, uint32_t flag), (pHost, pDevice, flag), NULL, OPTIONAL) \
  X(aclError, aclrtHostUnregister, host_unregister, (void *ptr), (ptr), NULL, OPTIONAL) \
  X(aclrtAllocatorDesc, aclrtAllocatorCreateDesc, allocator_create_desc, (void), (), NULL, OPTIONAL) \
  X(aclError, aclrtAllocatorDestroyDesc, allocator_destroy_desc, (aclrtAllocatorDesc allocatorDesc), (allocatorDesc), NULL, OPTIONAL) \
  X(aclError, aclrtAllocatorSetObjToDesc, allocator_set_obj_to_desc, (aclrtAllocatorDesc allocatorDesc, aclrtAllocator allocator), (allocatorDesc, allocator), NULL, OPTIONAL) \
  X(aclError, aclrtAllocatorSetAllocFuncToDesc, allocator_set_alloc_func_to_desc, (aclrtAllocatorDesc allocatorDesc, aclrtAllocatorAllocFunc func), (allocatorDesc, func), NULL, OPTIONAL) \
  X(aclError, aclrtAllocatorSetFreeFuncToDesc, allocator_set_free_func_to_desc, (aclrtAllocatorDesc allocatorDesc, aclrtAllocatorFreeFunc func), (allocatorDesc, func), NULL, OPTIONAL) \
  X(aclError, aclrtAllocatorSetAllocAdviseFuncToDesc, allocator_set_alloc_advise_func_to_desc, (aclrtAllocatorDesc allocatorDesc, aclrtAllocatorAllocAdviseFunc func), (allocatorDesc, func), NULL, OPTIONAL) \
  X(aclError, aclrtAllocatorSetGetAddrFromBlockFuncToDesc, allocator_set_get_addr_from_block_func_to_desc, (aclrtAllocatorDesc allocatorDesc, aclrtAllocatorGetAddrFromBlockFunc func), (allocatorDesc, func), NULL, OPTIONAL) \
  X(aclError, aclrtAllocatorRegister, allocator_register, (aclrtStream stream, aclrtAllocatorDesc allocatorDesc), (stream, allocatorDesc), NULL, OPTIONAL) \
  X(aclError, aclrtAllocatorGetByStream, allocator_get_by_stream, (aclrtStream stream, aclrtAllocatorDesc *allocatorDesc, aclrtAllocator *allocator, aclrtAllocatorAllocFunc *allocFunc, aclrtAllocatorFreeFunc *freeFunc, aclrtAllocatorAllocAdviseFunc *allocAdviseFunc, aclrtAllocatorGetAddrFromBlockFunc *getAddrFromBlockFunc), (stream, allocatorDesc, allocator, allocFunc, freeFunc, allocAdviseFunc, getAddrFromBlockFunc), NULL, OPTIONAL) \
  X(aclError, aclrtAllocatorUnregister, allocator_unregister, (aclrtStream stream), (stream), NULL, OPTIONAL) \
  X(aclError, aclrtCreateLabel, create_label, (aclrtLabel *label), (label), NULL, OPTIONAL) \
  X(aclError, aclrtSetLabel, set_label, (aclrtLabel label, aclrtStream stream), (label, stream), NULL, OPTIONAL) \
  X(aclError, aclrtDestroyLabel, destroy_label, (aclrtLabel label), (label), NULL, OPTIONAL) \
  X(aclError, aclrtCreateLabelList, create_label_list, (aclrtLabel *labels, size_t num, aclrtLabelList *labelList), (labels, num, labelList), NULL, OPTIONAL) \
  X(aclError, aclrtDestroyLabelList, destroy_label_list, (aclrtLabelList labelList), (labelList), NULL, OPTIONAL) \
  X(aclError, aclrtSwitchLabelByIndex, switch_label_by_index, (void *ptr, uint32_t maxValue, aclrtLabelList labelList, aclrtStream stream), (ptr, maxValue, labelList, stream), NULL, OPTIONAL) \
  X(aclError, aclmdlRIBuildBegin, mdl_ri_build_begin, (aclmdlRI *modelRI, uint32_t flag), (modelRI, flag), NULL, OPTIONAL) \
  X(aclError, aclmdlRIBindStream, mdl_ri_bind_stream, (aclmdlRI modelRI, aclrtStream stream, uint32_t flag), (modelRI, stream, flag), NULL, OPTIONAL) \
  X(aclError, aclmdlRIEndTask, mdl_ri_end_task, (aclmdlRI modelRI, aclrtStream stream), (modelRI, stream), NULL, OPTIONAL) \
  X(aclError, aclmdlRIBuildEnd, mdl_ri_build_end, (aclmdlRI modelRI, void *reserve), (modelRI, reserve), NULL, OPTIONAL) \
  X(aclError, aclmdlRIUnbindStream, mdl_ri_unbind_stream, (aclmdlRI modelRI, aclrtStream stream), (modelRI, stream), NULL, OPTIONAL) \
  X(aclError, aclmdlRIExecuteAsync, mdl_ri_execute_async, (aclmdlRI modelRI, aclrtStream stream), (modelRI, stream), NULL, OPTIONAL) \
  X(aclError, aclmdlRIDestroy, mdl_ri_destroy, (aclmdlRI modelRI), (modelRI), NULL, OPTIONAL) \
  X(aclError, aclmdlRICaptureBegin, mdl_ri_capture_begin, (aclrtStream stream, aclmdlRICaptureMode mode), (stream, mode), NULL, OPTIONAL) \
  X(aclError, aclmdlRICaptureGetInfo, mdl_ri_capture_get_info, (aclrtStream stream, aclmdlRICaptureStatus *status, aclmdlRI *modelRI), (stream, status, modelRI), NULL, OPTIONAL) \
  X(aclError, aclmdlRICaptureEnd, mdl_ri_capture_end, (aclrtStream stream, aclmdlRI *modelRI), (stream, modelRI), NULL, OPTIONAL)

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
