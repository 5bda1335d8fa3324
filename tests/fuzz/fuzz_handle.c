/*
 * Fuzz target: IPC event handle parsing (aipc__event_handle_parse,
 * csrc/emu/ipc/key.c). Any 64 bytes either are exactly what
 * aipc__event_handle_write makes of a valid event key (and write back to
 * themselves), or are refused with ACL_ERROR_INVALID_PARAM and a message.
 *
 * Input: the handle's bytes (shorter inputs are padded with zeros, longer
 * ones cut), so the seeds can be real handles.
 */
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "emu/ipc/key.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  aclrtIpcEventHandle h;
  memset(&h, 0, sizeof h);
  memcpy(h.reserved, data, size < sizeof h.reserved ? size : sizeof h.reserved);
  aipc__key k;
  char key[AIPC_KEY_CHARS + 1];
  memset(key, 0x5a, sizeof key);
  aclError rc = aipc__event_handle_parse("fuzz", &h, &k, key);
  const char *msg = aipc__recent_err_msg();
  if (rc == ACL_SUCCESS) {
    FUZZ_CHECK(msg == NULL);
    FUZZ_CHECK(k.kind == AIPC_OBJECT_EVENT);
    FUZZ_CHECK(key[AIPC_KEY_CHARS] == '\0' && strlen(key) == AIPC_KEY_CHARS);
    aclrtIpcEventHandle back;
    aipc__event_handle_write(key, &back);
    FUZZ_CHECK(memcmp(&back, &h, sizeof h) == 0); /* one spelling per handle */
  } else {
    FUZZ_CHECK(rc == ACL_ERROR_INVALID_PARAM);
    FUZZ_CHECK(msg != NULL && strncmp(msg, "fuzz: ", 6) == 0);
    for (size_t i = 0; i < sizeof key; i++) FUZZ_CHECK(key[i] == 0x5a); /* nothing written on failure */
  }
  return 0;
}
