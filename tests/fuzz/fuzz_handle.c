/*
 * Fuzz target: the handles a process receives as bytes (csrc/emu/ipc/key.c).
 *
 * IPC event handles (aipc__event_handle_parse): any 64 bytes either are
 * exactly what aipc__event_handle_write makes of a valid event key (and
 * write back to themselves), or are refused with ACL_ERROR_INVALID_PARAM and
 * a message.
 *
 * Shareable handles of physical memory (aipc__shareable_parse): the first 8
 * bytes as a 64-bit number are accepted exactly when both its door and its
 * random part are non-zero, and then name that door and that export.
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

  uint64_t value = 0;
  for (int i = 7; i >= 0; i--) value = value << 8 | (uint8_t)h.reserved[i];
  memset(&k, 0x5a, sizeof k);
  rc = aipc__shareable_parse("fuzz", value, &k);
  msg = aipc__recent_err_msg();
  uint64_t door = value >> AIPC_SHAREABLE_DOOR_SHIFT, random = value & AIPC_SHAREABLE_RANDOM_MASK;
  if (door != 0 && random != 0) {
    FUZZ_CHECK(rc == ACL_SUCCESS && msg == NULL);
    FUZZ_CHECK(k.kind == AIPC_OBJECT_PHYSICAL && k.pid == door && k.nonce == 0 && k.export_id == value);
    static const uint8_t zero[AIPC_SECRET_LEN];
    FUZZ_CHECK(memcmp(k.secret, zero, sizeof zero) == 0);
  } else {
    FUZZ_CHECK(rc == ACL_ERROR_INVALID_PARAM);
    FUZZ_CHECK(msg != NULL && strncmp(msg, "fuzz: ", 6) == 0);
  }
  return 0;
}
