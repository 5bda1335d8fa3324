/*
 * The one place that chooses the runtime behind the extension.
 *
 * ASCEND_IPC_PROVIDER: "auto" (default), "emulated" or "cann". The cann
 * provider (libascendcl loaded with dlopen) is not part of this build yet:
 * auto falls back to the emulator, and asking for cann explicitly fails the
 * import with a message that says so.
 */
#include "module.h"

#include <stdlib.h>
#include <string.h>

const aipc_provider *aipc_py_select_provider(void) {
  const char *want = getenv("ASCEND_IPC_PROVIDER");
  if (want == NULL || want[0] == '\0' || strcmp(want, "auto") == 0) {
    return aipc__emu_provider();
  }
  if (strcmp(want, "emulated") == 0) return aipc__emu_provider();
  if (strcmp(want, "cann") == 0) {
    PyErr_SetString(PyExc_ImportError,
                    "ascend_ipc: ASCEND_IPC_PROVIDER=cann: cann provider not available in this build "
                    "(use ASCEND_IPC_PROVIDER=auto or emulated)");
    return NULL;
  }
  PyErr_Format(PyExc_ImportError,
               "ascend_ipc: ASCEND_IPC_PROVIDER must be 'auto', 'emulated' or 'cann', not '%s'", want);
  return NULL;
}
