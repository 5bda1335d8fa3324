/*
 * The context and device calls that reach into the streams: destroying a
 * context (its streams go with it), its default stream as a handle,
 * synchronizing a device, and the overflow tasks. Above stream.c and
 * context.c, which never call back here; no state of its own.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

aclError aipc__emu_destroy_context(aclrtContext h) {
  const char *call = AIPC_CALL_NAME(destroy_context);
  uint64_t id;
  void *obj;
  aclError rc = aipc__ctx_remove(call, h, &id, &obj);
  if (rc) return rc;
  /* CANN tears the context's streams down with it: their queued work runs
   * first (as aclrtDestroyStream), then they are gone. */
  aipc__stream_destroy_context(id);
  aipc__ctx_release(obj);
  return ACL_SUCCESS;
}

aclError aipc__emu_ctx_get_current_default_stream(aclrtStream *stream) {
  const char *call = AIPC_CALL_NAME(ctx_get_current_default_stream);
  if (!stream) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL", call);
  return aipc__stream_default_handle(call, stream);
}

aclError aipc__emu_synchronize_device(void) {
  const char *call = AIPC_CALL_NAME(synchronize_device);
  uint64_t id;
  int32_t device;
  aclError rc = aipc__ctx_current(call, &id, &device); /* the current context's device */
  if (rc) return rc;
  return aipc__stream_synchronize_device(call, device);
}

aclError aipc__emu_set_stream_overflow_switch(aclrtStream stream, uint32_t flag) {
  const char *call = AIPC_CALL_NAME(set_stream_overflow_switch);
  if (flag > 1) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: flag %u is not 0 (off) or 1 (on)", call, flag);
  return aipc__stream_overflow_switch(call, stream, &flag, NULL);
}

aclError aipc__emu_get_stream_overflow_switch(aclrtStream stream, uint32_t *flag) {
  const char *call = AIPC_CALL_NAME(get_stream_overflow_switch);
  if (!flag) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: flag is NULL", call);
  return aipc__stream_overflow_switch(call, stream, NULL, flag);
}

/* CANN's status buffer: 64 bytes, the flag in the first 4. */
#define OVERFLOW_STATUS_SIZE 64

typedef struct overflow_task {
  aipc__task t;
  void *dst; /* NULL: a reset */
  int32_t device, cur_dev;
} overflow_task;

static void free_task(aipc__task *t) { free(t); }

static aclError run_overflow(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)cancel;
  if (failed) return ACL_SUCCESS; /* skipped behind an error, as copies are */
  overflow_task *o = (overflow_task *)t;
  if (!o->dst) {
    aipc__dev_overflow_clear(o->device);
    return ACL_SUCCESS;
  }
  unsigned char status[OVERFLOW_STATUS_SIZE] = {0};
  uint32_t flag = aipc__dev_overflow_get(o->device);
  memcpy(status, &flag, sizeof flag);
  return aipc__mem_copy("aclrtGetOverflowStatus (running on the stream)", o->dst, OVERFLOW_STATUS_SIZE, status,
                        OVERFLOW_STATUS_SIZE, ACL_MEMCPY_HOST_TO_DEVICE, o->cur_dev, true);
}

static aclError submit(const char *call, void *dst, aclrtStream stream) {
  int32_t device;
  aclError rc = aipc__stream_device(call, stream, &device);
  if (rc) return rc;
  int32_t cur = aipc__device_current();
  if (dst && (rc = aipc__mem_copy_check(call, dst, OVERFLOW_STATUS_SIZE, dst, OVERFLOW_STATUS_SIZE,
                                        ACL_MEMCPY_DEVICE_TO_DEVICE, cur, true)))
    return rc;
  overflow_task *o = malloc(sizeof *o);
  if (!o) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  *o = (overflow_task){{NULL, run_overflow, free_task, NULL}, dst, device, cur};
  return aipc__stream_submit(call, stream, &o->t);
}

aclError aipc__emu_get_overflow_status(void *outputAddr, size_t outputSize, aclrtStream stream) {
  const char *call = AIPC_CALL_NAME(get_overflow_status);
  if (!outputAddr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: outputAddr is NULL", call);
  if (outputSize != OVERFLOW_STATUS_SIZE)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: outputSize %zu must be %d (CANN's status size)", call, outputSize,
                      OVERFLOW_STATUS_SIZE);
  return submit(call, outputAddr, stream);
}

aclError aipc__emu_reset_overflow_status(aclrtStream stream) {
  return submit(AIPC_CALL_NAME(reset_overflow_status), NULL, stream);
}
