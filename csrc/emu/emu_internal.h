/*
 * Private seams between the runtime's own files (config, device, memory,
 * stream). The IPC layer uses emu.h only.
 */
#ifndef ASCEND_IPC_EMU_EMU_INTERNAL_H_
#define ASCEND_IPC_EMU_EMU_INTERNAL_H_

#include "emu.h"

#define AIPC_MAX_DEVICES 64

/* memory.c */
/* Bytes of device's capacity in use (page-rounded sizes). */
uint64_t aipc__mem_used(int32_t device);
/* Frees every block and arena (aclFinalize). */
void aipc__mem_finalize(void);
/*
 * Validates a copy of count bytes from src to dst of the given kind, for
 * the entry point named call, and (aipc__mem_copy) moves the bytes, holding
 * the memory lock shared across both so no free or close can unmap under
 * the copy. cur_dev is the calling thread's current device. async: the copy
 * runs on a stream (the cross-device rule allows asynchronous
 * device-to-device). aipc__mem_copy_check only validates (a submit: the
 * task checks again when it runs). Both take the lock.
 */
aclError aipc__mem_copy_check(const char *call, void *dst, size_t destMax, const void *src, size_t count,
                              aclrtMemcpyKind kind, int32_t cur_dev, bool async);
aclError aipc__mem_copy(const char *call, void *dst, size_t destMax, const void *src, size_t count,
                        aclrtMemcpyKind kind, int32_t cur_dev, bool async);
/* The same for a memset of count bytes of value at devPtr (device memory
 * only). Both take the lock. */
aclError aipc__mem_memset_check(const char *call, void *devPtr, size_t count);
aclError aipc__mem_memset(const char *call, void *devPtr, int value, size_t count);
/* Name of a memcpy kind ("ACL_MEMCPY_HOST_TO_DEVICE"), or "unknown kind". */
const char *aipc__memcpy_kind_name(int kind);

/* stream.c */
void aipc__stream_finalize(void);
/* aclrtResetDeviceForce: waits for the default stream's work, then destroys
 * the streams created on device without running their queued work. */
void aipc__stream_reset_device(int32_t device);
void aipc__stream_atfork_prepare(void);
void aipc__stream_atfork_parent(void);

/* event.c, notify.c: aclFinalize (after the streams drained, before the
 * IPC layer) and fork (lock order: event, notify -> IPC layer -> memory).
 * Their handle registries, and stream.c's, are instances of handles.h's:
 * each registry's lock is its kind's place in that order. */
void aipc__event_finalize(void);
void aipc__event_atfork_prepare(void);
void aipc__event_atfork_parent(void);
void aipc__event_atfork_child(void);
void aipc__notify_finalize(void);
void aipc__notify_atfork_prepare(void);
void aipc__notify_atfork_parent(void);
void aipc__notify_atfork_child(void);

/* hostmem.c, allocator.c, model.c: aclFinalize (model: after the streams
 * drained, before events and notifies, whose references its recorded tasks
 * hold) and fork. Lock order: model.c's lock comes after the streams' (a
 * stream records into a model under its queue lock); allocator.c's and
 * hostmem.c's are leaves, held around nothing. */
void aipc__hostmem_finalize(void);
void aipc__hostmem_atfork_prepare(void);
void aipc__hostmem_atfork_parent(void);
void aipc__hostmem_atfork_child(void);
void aipc__allocator_finalize(void);
void aipc__allocator_atfork_prepare(void);
void aipc__allocator_atfork_parent(void);
void aipc__allocator_atfork_child(void);
void aipc__model_finalize(void);
void aipc__model_atfork_prepare(void);
void aipc__model_atfork_parent(void);
void aipc__model_atfork_child(void);

/* device.c */
void aipc__device_finalize(void);
/* aclrtResetDeviceForce's check and claim: every aclrtSetDevice of deviceId
 * is undone; an error when it was not set. */
aclError aipc__device_unset_all(int32_t deviceId);

#endif
