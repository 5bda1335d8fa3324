/*
 * The provider table: the one seam between callers (the public acl* entry
 * points of the emulator library, the Python extension) and a runtime that
 * implements them (the emulator, or the vendor's libascendcl loaded with
 * dlopen by the cann provider). Entries have the exact CANN signatures, so a provider over
 * the vendor library can fill them straight from dlsym.
 *
 * The calls are listed once, in core/calls.h. Every entry of a table is
 * callable: a provider that lacks a call fills the entry with a function
 * that fails with a message naming it. private_data is the provider's own
 * state.
 */
#ifndef ASCEND_IPC_CORE_PROVIDER_H_
#define ASCEND_IPC_CORE_PROVIDER_H_

#include <stddef.h>

#include "acl/acl.h"
#include "core/calls.h"

/* DLPack device types the providers report (values of the DLPack ABI). */
#define AIPC_DLPACK_DEVICE_CPU 1
#define AIPC_DLPACK_DEVICE_EXT 12

/* What a runtime loaded from a library says of itself, beyond the table. */
typedef struct aipc_provider_report {
  const char *version;              /* as the runtime reports it, or "unknown" */
  const char *version_source;       /* the call that reported it, or NULL */
  size_t n_missing;                 /* calls the runtime does not have */
  const char *const *missing;       /* their names */
  const char *const *missing_since; /* the CANN version that introduced each */
} aipc_provider_report;

typedef struct aipc_provider {
  const char *name;          /* "emulated", "cann" */
  const char *library_path;  /* where the runtime came from, or NULL */
  int dlpack_device_type;    /* AIPC_DLPACK_DEVICE_* of device memory */
  int host_visible;          /* device memory is addressable by the CPU */

  /* One field per call of core/calls.h, in its order. */
#define AIPC_PROVIDER_FIELD_(ret, symbol, field, params, args, since, need) ret(*field) params;
  AIPC_CALLS(AIPC_PROVIDER_FIELD_)
#undef AIPC_PROVIDER_FIELD_

  /* Not in CANN: reads back an attribute of a key this process exported or
   * imported (ACCESS_LINK). NULL where the runtime cannot tell. */
  aclError (*ipc_get_attr)(const char *key, aclrtIpcMemAttrType type, uint64_t *attr);

  /* Not in CANN: the bytes of the physical allocation behind a live handle
   * (one imported from a shareable handle included), so a caller can check
   * what a handle's sender claims. NULL where the runtime cannot tell. */
  aclError (*mem_physical_size)(aclrtDrvMemHandle handle, size_t *size);

  /* Not in CANN: a key or handle of this process was just pickled for one
   * receiver, whose import is on its way; the runtime may get ready for it
   * (the emulator's IPC server polls for it). NULL where nothing is gained. */
  void (*ipc_expect_request)(void);

  /* What the runtime says of itself (its version, the calls it lacks); the
   * first call may ask the runtime. NULL where there is nothing to say (the
   * emulator is this project's own). */
  const aipc_provider_report *(*report)(void);

  void *private_data;
} aipc_provider;

/* The emulated runtime's table. Static storage; never NULL. */
const aipc_provider *aipc__emu_provider(void);

#endif
