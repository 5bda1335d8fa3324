/* The emulator's provider table and its single fork registration. */
#include <pthread.h>

#include "core/provider.h"
#include "emu_internal.h"

static void atfork_prepare(void) {
  aipc__event_atfork_prepare();
  aipc__notify_atfork_prepare();
  aipc__vmm_atfork_prepare();
  aipc__ipc_atfork_prepare();
  aipc__mem_atfork_prepare();
}

static void atfork_parent(void) {
  aipc__mem_atfork_parent();
  aipc__ipc_atfork_parent();
  aipc__vmm_atfork_parent();
  aipc__notify_atfork_parent();
  aipc__event_atfork_parent();
}

static void atfork_child(void) {
  aipc__mem_atfork_child();
  aipc__stream_atfork_child();
  aipc__ipc_atfork_child();
  aipc__vmm_atfork_child();
  aipc__event_atfork_child();
  aipc__notify_atfork_child();
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
