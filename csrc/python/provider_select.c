/*
 * The one place that chooses the runtime behind the extension.
 *
 * ASCEND_IPC_PROVIDER:
 *   "emulated"        the emulator compiled into the extension;
 *   "cann"            libascendcl.so loaded with dlopen (csrc/cann); if it
 *                     cannot be loaded or aclInit fails, the import fails
 *                     with an ImportError that lists the paths tried and
 *                     the loader's message for each;
 *   "auto" (default)  cann when the library loads, aclInit succeeds and it
 *                     reports at least one device; otherwise the emulator
 *                     (provider_info() says why cann was not used).
 */
#include "module.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cann/cann_provider.h"

/* Why the current choice was made (process-wide; the choice is too). */
static char selection_note[8192];

const char *aipc_py_selection_note(void) { return selection_note; }

/* The library's message for the failure just reported by p, or a generic one. */
static void failure_text(const aipc_provider *p, aclError rc, char *out, size_t len) {
  const char *m = p->get_recent_err_msg != NULL ? p->get_recent_err_msg() : NULL;
  snprintf(out, len, "[%d] %s", (int)rc, m != NULL && m[0] != '\0' ? m : "(no message)");
}

static const aipc_provider *select_cann(int explicit_choice) {
  char err[4096];
  if (aipc__cann_check_env(err, sizeof err) < 0) {
    PyErr_Format(PyExc_ImportError, "ascend_ipc: %s", err);
    return NULL;
  }
  const aipc_provider *p = aipc__cann_provider_load(err, sizeof err);
  if (p == NULL) {
    if (explicit_choice) {
      PyErr_Format(PyExc_ImportError, "ascend_ipc: ASCEND_IPC_PROVIDER=cann: %s", err);
      return NULL;
    }
    snprintf(selection_note, sizeof selection_note, "auto: emulated, because the cann provider is unavailable: %s",
             err);
    return aipc__emu_provider();
  }

  aclError rc = p->init(NULL);
  if (rc != ACL_SUCCESS) {
    char why[1024];
    failure_text(p, rc, why, sizeof why);
    if (explicit_choice) {
      PyErr_Format(PyExc_ImportError, "ascend_ipc: ASCEND_IPC_PROVIDER=cann: %s loaded, but aclInit failed: %s",
                   p->library_path, why);
      return NULL;
    }
    snprintf(selection_note, sizeof selection_note, "auto: emulated, because aclInit of %.1024s failed: %s",
             p->library_path, why);
    return aipc__emu_provider();
  }
  if (explicit_choice) {
    snprintf(selection_note, sizeof selection_note, "ASCEND_IPC_PROVIDER=cann: %.1024s", p->library_path);
    return p;
  }

  uint32_t count = 0;
  rc = p->get_device_count(&count);
  if (rc != ACL_SUCCESS || count == 0) {
    char why[1024];
    if (rc != ACL_SUCCESS) {
      failure_text(p, rc, why, sizeof why);
    } else {
      snprintf(why, sizeof why, "it reports no device");
    }
    snprintf(selection_note, sizeof selection_note, "auto: emulated, because %.1024s has no usable device: %s",
             p->library_path, why);
    return aipc__emu_provider();
  }
  snprintf(selection_note, sizeof selection_note, "auto: cann, %.1024s with %u device(s)", p->library_path,
           (unsigned)count);
  return p;
}

const aipc_provider *aipc_py_select_provider(void) {
  const char *want = getenv("ASCEND_IPC_PROVIDER");
  if (want == NULL || want[0] == '\0' || strcmp(want, "auto") == 0) return select_cann(0);
  if (strcmp(want, "emulated") == 0) {
    snprintf(selection_note, sizeof selection_note, "ASCEND_IPC_PROVIDER=emulated");
    return aipc__emu_provider();
  }
  if (strcmp(want, "cann") == 0) return select_cann(1);
  PyErr_Format(PyExc_ImportError,
               "ascend_ipc: ASCEND_IPC_PROVIDER must be 'auto', 'emulated' or 'cann', not '%s'", want);
  return NULL;
}
