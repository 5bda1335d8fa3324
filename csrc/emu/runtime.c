/*
 * The emulator's provider table and the lifecycle that spans its modules:
 * aclInit, aclFinalize, aclrtResetDeviceForce and fork. Each module keeps
 * its own state behind its own lock and offers init/finalize/fork hooks;
 * only this file knows their order, and nothing below calls back up.
 *
 * The layers, top down (each calls only those below it; make check-layers
 * fails on a loop):
 *
 *   runtime.c                       this file: lifecycle and the provider table
 *   callback.c  kernel.c            host work and kernels queued on streams
 *   model.c  allocator.c  hostmem.c labels and model runtime instances, allocators, host memory
 *   event.c  notify.c  vmm.c        events, notifies, physical memory (shared through ipc/)
 *   ipc/                            keys, exporter, importer, the wire
 *   context_ops.c                   context and device calls that reach the streams
 *   stream.c                        streams and their workers (each in a context)
 *   memory.c                        every address range, behind the memory lock
 *   context.c  devinfo.c            contexts; the device's profile, limits, modes
 *   device.c  handles.c  config.c   current device and context, the handle registries, settings
 *   core/  os/                      containers, errors, platform calls
 *
 * Lock order, outermost first, the same as the call order above:
 *   (stream state callbacks: a leaf, held across nothing) callback, kernel (never held while
 *   calling others) -> event -> notify -> vmm -> IPC layer (a connection's, then the importer's;
 *   or the exporter's) -> streams -> contexts -> model -> memory
 * (model.c's lock sits below the streams': a stream hands a task to the
 * model recording from it under its queue lock, and model.c never holds its
 * lock while calling a stream; contexts and models are never held together;
 * allocator.c's and hostmem.c's locks are leaves.)
 * A module may hold its lock while calling a module to its right, never the
 * other way round; fork's prepare takes them in this order, the parent's and
 * child's hooks undo them in reverse.
 */
#include <pthread.h>

#include "core/provider.h"
#include "emu_internal.h"

static void atfork_prepare(void) {
  aipc__stream_state_atfork_prepare();
  aipc__callback_atfork_prepare();
  aipc__kernel_atfork_prepare();
  aipc__event_atfork_prepare();
  aipc__notify_atfork_prepare();
  aipc__vmm_atfork_prepare();
  aipc__ipc_atfork_prepare();
  aipc__stream_atfork_prepare();
  aipc__ctx_atfork_prepare();
  aipc__model_atfork_prepare();
  aipc__allocator_atfork_prepare();
  aipc__hostmem_atfork_prepare();
  aipc__mem_atfork_prepare();
}

static void atfork_parent(void) {
  aipc__mem_atfork_parent();
  aipc__hostmem_atfork_parent();
  aipc__allocator_atfork_parent();
  aipc__model_atfork_parent();
  aipc__ctx_atfork_parent();
  aipc__stream_atfork_parent();
  aipc__ipc_atfork_parent();
  aipc__vmm_atfork_parent();
  aipc__notify_atfork_parent();
  aipc__event_atfork_parent();
  aipc__stream_state_atfork_parent();
  aipc__kernel_atfork_parent();
  aipc__callback_atfork_parent();
}

static void atfork_child(void) {
  /* First: the callbacks' queues hold items that live in stream tasks, which
   * the streams' hook may free. */
  aipc__callback_atfork_child();
  aipc__kernel_atfork_child();
  aipc__mem_atfork_child();
  aipc__hostmem_atfork_child();
  aipc__allocator_atfork_child();
  aipc__stream_atfork_child();
  aipc__ctx_atfork_child();
  aipc__model_atfork_child();
  aipc__ipc_atfork_child();
  aipc__vmm_atfork_child();
  aipc__event_atfork_child();
  aipc__notify_atfork_child();
  aipc__stream_state_atfork_child();
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void register_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

static const aipc_provider emu_provider = {
    .name = "emulated",
    .library_path = NULL,
    .dlpack_device_type = AIPC_DLPACK_DEVICE_CPU,
    .host_visible = 1,
#define AIPC_EMU_ENTRY_(ret, symbol, field, params, args, since, need) .field = aipc__emu_##field,
    AIPC_CALLS(AIPC_EMU_ENTRY_)
#undef AIPC_EMU_ENTRY_
    .ipc_get_attr = aipc__emu_ipc_get_attr,
    .mem_physical_size = aipc__emu_mem_physical_size,
    .ipc_expect_request = aipc__emu_ipc_expect_request,
    .report = NULL,
    /* None: each part of the emulator owns its state in its own file
     * (device.c, memory.c, stream.c, event.c, notify.c, ipc/), behind its own lock. */
    .private_data = NULL,
};

const aipc_provider *aipc__emu_provider(void) {
  /* Registered here, the first time anyone reaches the emulator, so a
   * process that only loads the library pays nothing at fork. */
  pthread_once(&atfork_once, register_atfork);
  return &emu_provider;
}

aclError aipc__emu_init(const char *configPath) {
  /* Everything starts lazily; the config file of CANN has no meaning here. */
  (void)configPath;
  (void)aipc__config_get();
  return ACL_SUCCESS;
}

aclError aipc__emu_finalize(void) {
  if (aipc__stream_in_task())
    return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR,
                      "aclFinalize: called from a callback or task of a stream, it would wait for itself");
  /* Streams first (their queued work touches events, notifies and memory),
   * then what shares through the IPC layer, then the IPC layer (it unpins
   * and removes its blocks), then whatever memory is left. Callbacks no
   * thread will run are dropped first, so no stream waits for them. */
  aipc__callback_finalize();
  aipc__stream_finalize();
  aipc__stream_state_finalize();
  aipc__kernel_finalize();
  aipc__model_finalize();
  aipc__allocator_finalize();
  aipc__hostmem_finalize();
  aipc__event_finalize();
  aipc__notify_finalize();
  aipc__vmm_finalize();
  aipc__ipc_finalize();
  aipc__mem_finalize();
  aipc__ctx_finalize();
  aipc__devinfo_finalize();
  aipc__device_finalize();
  return ACL_SUCCESS;
}

aclError aipc__emu_reset_device_force(int32_t deviceId) {
  aclError rc = aipc__device_unset_all(deviceId);
  if (rc) return rc;
  /* Its memory stays allocated, as with aclrtResetDevice; its streams go. */
  aipc__stream_reset_device(deviceId);
  return ACL_SUCCESS;
}
