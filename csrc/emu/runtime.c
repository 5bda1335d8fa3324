/* The emulator's provider table and its single fork registration. */
#include <pthread.h>

#include "core/provider.h"
#include "emu.h"

static void atfork_prepare(void) {
  aipc__ipc_atfork_prepare();
  aipc__mem_atfork_prepare();
}

static void atfork_parent(void) {
  aipc__mem_atfork_parent();
  aipc__ipc_atfork_parent();
}

static void atfork_child(void) {
  aipc__mem_atfork_child();
  aipc__stream_atfork_child();
  aipc__ipc_atfork_child();
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void register_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

static const aipc_provider emu_provider = {
    .name = "emulated",
    .library_path = NULL,
    .dlpack_device_type = AIPC_DLPACK_DEVICE_CPU,
    .host_visible = 1,
    .init = aipc__emu_init,
    .finalize = aipc__emu_finalize,
    .get_recent_err_msg = aipc__recent_err_msg,
    .set_device = aipc__emu_set_device,
    .get_device = aipc__emu_get_device,
    .get_device_count = aipc__emu_get_device_count,
    .reset_device = aipc__emu_reset_device,
    .device_can_access_peer = aipc__emu_device_can_access_peer,
    .device_enable_peer_access = aipc__emu_device_enable_peer_access,
    .device_get_bare_tgid = aipc__emu_device_get_bare_tgid,
    .get_mem_info = aipc__emu_get_mem_info,
    .malloc = aipc__emu_malloc,
    .free = aipc__emu_free,
    .malloc_host = aipc__emu_malloc_host,
    .free_host = aipc__emu_free_host,
    .memcpy = aipc__emu_memcpy,
    .memcpy_async = aipc__emu_memcpy_async,
    .memset = aipc__emu_memset,
    .create_stream = aipc__emu_create_stream,
    .destroy_stream = aipc__emu_destroy_stream,
    .synchronize_stream = aipc__emu_synchronize_stream,
    .ipc_get_export_key = aipc__emu_ipc_get_export_key,
    .ipc_set_import_pid = aipc__emu_ipc_set_import_pid,
    .ipc_import_pid_inter_server = aipc__emu_ipc_import_pid_inter_server,
    .ipc_import_by_key = aipc__emu_ipc_import_by_key,
    .ipc_set_attr = aipc__emu_ipc_set_attr,
    .ipc_close = aipc__emu_ipc_close,
    .ipc_get_attr = aipc__emu_ipc_get_attr,
    .private_data = NULL,
};

const aipc_provider *aipc__emu_provider(void) {
  /* Registered here, the first time anyone reaches the emulator, so a
   * process that only loads the library pays nothing at fork. */
  pthread_once(&atfork_once, register_atfork);
  return &emu_provider;
}
