/*
 * The cann provider: the provider table filled from the vendor's
 * libascendcl.so, loaded with dlopen at run time.
 *
 * Nothing here is linked against CANN: the package builds and imports on a
 * machine without it. This folder is not part of libascendcl_emu.so; only the
 * Python extension (and any other caller of the provider table) uses it.
 *
 * Where the library is looked for, in order:
 *   1. $ASCEND_IPC_CANN_LIB, if set (then nothing else is tried);
 *   2. $ASCEND_HOME_PATH/lib64/libascendcl.so;
 *   3. $ASCEND_TOOLKIT_HOME/lib64/libascendcl.so;
 *   4. /usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so;
 *   5. libascendcl.so through the dynamic loader (LD_LIBRARY_PATH, ld.so.cache).
 * Each is opened with RTLD_NOW | RTLD_LOCAL.
 *
 * A library that lacks a call marked REQUIRED in core/calls.h is not used.
 * Any other missing call (an older CANN) gets a table entry that fails with
 * ACL_ERROR_FEATURE_UNSUPPORTED and a message naming the call and the CANN
 * version that introduced it, so only the features that need it are lost.
 */
#ifndef ASCEND_IPC_CANN_PROVIDER_H_
#define ASCEND_IPC_CANN_PROVIDER_H_

#include <stddef.h>

#include "core/provider.h"

/* ASCEND_IPC_CANN_DLPACK: what DLPack device the provider's memory reports.
 *   "ext" (default): kDLExtDev (12) with the device id, as torch_npu expects
 *                    (NPU memory is not addressable by the CPU);
 *   "cpu":           kDLCPU, device 0: declares that the loaded library's
 *                    device memory is host memory (true for the project's
 *                    own libascendcl_emu.so, never for a real NPU). */
#define AIPC_CANN_DLPACK_ENV "ASCEND_IPC_CANN_DLPACK"

/*
 * Checks ASCEND_IPC_CANN_DLPACK. 0 if it is unset or valid; -1 with a
 * message in err otherwise.
 */
int aipc__cann_check_env(char *err, size_t errlen);

/*
 * Loads the library (once per process; later calls return the first
 * outcome) and returns the provider table, or NULL with a message in err
 * that lists every path tried and the loader's error for it. Thread-safe.
 * Does not call aclInit: the table's init entry does, once per process
 * (a second aclInit's ACL_ERROR_REPEAT_INITIALIZE counts as success).
 * The table's report entry gives the library's version (queried on first
 * use, after aclInit if init ran) and the calls it lacks.
 */
const aipc_provider *aipc__cann_provider_load(char *err, size_t errlen);

/* ACL_ERROR_REPEAT_INITIALIZE: a second aclInit in one process. */
#define AIPC_CANN_ERROR_REPEAT_INITIALIZE 100002

#endif
