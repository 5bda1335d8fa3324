/*
 * Fuzz target: fabric handles (aclrtMemFabricHandle, 128 bytes, parsed by
 * aipc__fabric_parse in csrc/emu/ipc/key.c): they come off the network
 * (CANN's sample 12 sends one over UDP). Any 128 bytes either are exactly
 * what aipc__fabric_write makes of the key and super-node id parsed from
 * them (one spelling per handle), or are refused with
 * ACL_ERROR_INVALID_PARAM and a message naming the call.
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
  uint8_t h[AIPC_FABRIC_LEN];
  memset(h, 0, sizeof h);
  memcpy(h, data, size < sizeof h ? size : sizeof h);
  aipc__key k;
  memset(&k, 0xa5, sizeof k);
  uint64_t supernode = 0;
  aclError rc = aipc__fabric_parse("fuzz", h, &k, &supernode);
  const char *msg = aipc__recent_err_msg();
  if (rc == ACL_SUCCESS) {
    FUZZ_CHECK(msg == NULL);
    FUZZ_CHECK(k.kind == AIPC_OBJECT_PHYSICAL);
    FUZZ_CHECK(k.pid != 0 && k.pid <= INT32_MAX && k.nonce != 0 && k.nonce <= AIPC_NONCE_MASK);
    FUZZ_CHECK(k.export_id != 0 && supernode != 0);
    uint8_t back[AIPC_FABRIC_LEN];
    aipc__fabric_write(&k, supernode, back);
    FUZZ_CHECK(memcmp(back, h, sizeof h) == 0);
  } else {
    FUZZ_CHECK(rc == ACL_ERROR_INVALID_PARAM);
    FUZZ_CHECK(msg != NULL && strncmp(msg, "fuzz: ", 6) == 0);
  }
  return 0;
}
