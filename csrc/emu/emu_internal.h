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
/* Checks that [a, a+na) and (b non-NULL) [b, b+nb) each lie in one block
 * of device memory (local or imported), and runs fn(arg) (unless NULL)
 * under the shared lock, so that no free or close unmaps them meanwhile:
 * for stream tasks that compute on device memory (value writes and waits,
 * reductions, random numbers). fn must not block or call the runtime. The
 * messages name the range "devPtr". Takes the lock. */
aclError aipc__mem_run_on_device(const char *call, void *a, size_t na, const void *b, size_t nb,
                                 void (*fn)(void *arg), void *arg);
/* Name of a memcpy kind ("ACL_MEMCPY_HOST_TO_DEVICE"), or "unknown kind". */
const char *aipc__memcpy_kind_name(int kind);

/* stream.c */
void aipc__stream_finalize(void);
/* aclrtResetDeviceForce: waits for the default stream's work, then destroys
 * the streams created on device without running their queued work. */
void aipc__stream_reset_device(int32_t device);
void aipc__stream_atfork_prepare(void);
void aipc__stream_atfork_parent(void);

/* stream_state.c: stream state callbacks (a leaf lock, taken first at fork). */
void aipc__stream_state_finalize(void);
void aipc__stream_state_atfork_prepare(void);
void aipc__stream_state_atfork_parent(void);
void aipc__stream_state_atfork_child(void);

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

/* callback.c, kernel.c: host work and kernels on streams. Their locks come
 * first in the lock order (they call streams with none held). aclFinalize:
 * the callbacks' part runs before the streams drain (items that no thread
 * will run are dropped, so no worker waits for ever), the kernels' after. */
typedef struct aipc__exception {
  uint32_t task_id, stream_id, thread_id, device_id, error_code;
  void *func;    /* the kernel's aclrtFuncHandle */
  void *args;    /* its argument buffer, valid during the callback */
  uint32_t args_len;
} aipc__exception;
/* Calls the process's exception callback, if any, with e (callback.c). */
void aipc__exception_report(const aipc__exception *e);
void aipc__callback_finalize(void);
void aipc__callback_atfork_prepare(void);
void aipc__callback_atfork_parent(void);
void aipc__callback_atfork_child(void);
void aipc__kernel_finalize(void);
void aipc__kernel_atfork_prepare(void);
void aipc__kernel_atfork_parent(void);
void aipc__kernel_atfork_child(void);
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
/* The calling thread's explicit context (context.c's, opaque here): set
 * makes device current with ctx (NULL: the device's default context); get
 * returns it and its id, or NULL when the thread uses its device's default
 * context. aclrtSetDevice clears it; forget (fork child) clears every
 * thread's at once. */
void aipc__device_set_context(int32_t device, void *ctx, uint64_t id);
void *aipc__device_context(uint64_t *id);
void aipc__device_forget_contexts(void);

/* context.c: contexts (a registry, a default context per device). */
/*
 * The calling thread's current context: its id (never reused in a process;
 * streams name their context by it) and device. Fails with
 * ACL_ERROR_RT_CONTEXT_NULL when the thread's explicit context was destroyed.
 */
aclError aipc__ctx_current(const char *call, uint64_t *id, int32_t *device);
/* aclrtDestroyContext's first half: takes ctx out of the registry (the
 * default context is refused) and says its id; the caller destroys its
 * streams, then calls aipc__ctx_release. */
aclError aipc__ctx_remove(const char *call, aclrtContext ctx, uint64_t *id, void **obj);
void aipc__ctx_release(void *obj);
void aipc__ctx_finalize(void);
void aipc__ctx_atfork_prepare(void);
void aipc__ctx_atfork_parent(void);
void aipc__ctx_atfork_child(void);

/* devinfo.c: the emulated device's profile, limits and modes. */
/* The device's cores of type (aclrtDevResLimitType), the hardware's. */
uint32_t aipc__dev_cores(int type);
/* The limit in force for the process (aclrtSetDeviceResLimit, or the cores). */
uint32_t aipc__dev_res_limit(int32_t device, int type);
/* The device's floating-point overflow flag (aclrtGetOverflowStatus): raise
 * sets it, take reads it, clear resets it. */
void aipc__dev_overflow_raise(int32_t device);
uint32_t aipc__dev_overflow_get(int32_t device);
void aipc__dev_overflow_clear(int32_t device);
void aipc__devinfo_finalize(void);

/* stream.c, for contexts (context_ops.c). */
/* Drains and destroys every stream of context id, its default one included. */
void aipc__stream_destroy_context(uint64_t id);
/* The current context's default stream, as a registered handle. */
aclError aipc__stream_default_handle(const char *call, aclrtStream *out);
/* Waits for every stream of device; the first stored error, if any (left
 * stored for the stream's own synchronize). */
aclError aipc__stream_synchronize_device(const char *call, int32_t device);
/* A stream's overflow-detection switch (NULL: the default stream); the
 * stream must be in the current context (ACL_ERROR_RT_STREAM_CONTEXT). */
aclError aipc__stream_overflow_switch(const char *call, aclrtStream h, const uint32_t *set, uint32_t *get);

#endif
