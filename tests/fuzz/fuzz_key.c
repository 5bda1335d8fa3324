/*
 * Fuzz target: IPC key parsing (csrc/emu/ipc/key.c, linked into the
 * target). Any byte string given to aipc__key_parse either is the one
 * canonical spelling of a valid record (and formats back to itself), or is
 * refused with ACL_ERROR_INVALID_PARAM and a message; it never reads past
 * the NUL or past 65 bytes.
 *
 * Input: the key text (a NUL inside ends the string, as in C). The same
 * bytes, read as a 42-byte record (and a kind), also drive the format ->
 * parse round trip, and the kind check of aipc__key_parse_kind.
 */
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "emu/ipc/key.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void parse_checked(const char *s, size_t readable) {
  aipc__key k;
  memset(&k, 0xa5, sizeof k);
  aclError rc = aipc__key_parse("fuzz", s, &k);
  const char *msg = aipc__recent_err_msg();
  if (rc == ACL_SUCCESS) {
    FUZZ_CHECK(msg == NULL);
    FUZZ_CHECK(k.pid != 0 && k.pid <= INT32_MAX && k.nonce != 0 && k.export_id != 0);
    char out[AIPC_KEY_CHARS + 1];
    aipc__key_format(&k, out);
    FUZZ_CHECK(strnlen(s, readable) == AIPC_KEY_CHARS);
    FUZZ_CHECK(memcmp(out, s, AIPC_KEY_CHARS + 1) == 0); /* canonical: one spelling per record */
    FUZZ_CHECK((unsigned)k.kind < AIPC_OBJECT_KIND_COUNT);
    for (int want = 0; want < AIPC_OBJECT_KIND_COUNT; want++) {
      aipc__key k2;
      aclError rc2 = aipc__key_parse_kind("fuzz", s, (aipc__object_kind)want, &k2);
      FUZZ_CHECK((rc2 == ACL_SUCCESS) == (want == (int)k.kind));
      if (rc2) FUZZ_CHECK(aipc__recent_err_msg() != NULL);
    }
  } else {
    FUZZ_CHECK(rc == ACL_ERROR_INVALID_PARAM);
    FUZZ_CHECK(msg != NULL && msg[0] != '\0');
    FUZZ_CHECK(strncmp(msg, "fuzz: ", 6) == 0);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* 1. as a C string, in a buffer of exactly size + 1 bytes */
  char *s = malloc(size + 1);
  if (!s) return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  parse_checked(s, size + 1);
  free(s);

  /* 2. 65 bytes and no NUL among them: refused, nothing read beyond them */
  if (size >= ACL_IPC_MEM_KEY_LEN && !memchr(data, 0, ACL_IPC_MEM_KEY_LEN)) {
    char *b = malloc(ACL_IPC_MEM_KEY_LEN);
    if (!b) return 0;
    memcpy(b, data, ACL_IPC_MEM_KEY_LEN);
    aipc__key k;
    FUZZ_CHECK(aipc__key_parse("fuzz", b, &k) == ACL_ERROR_INVALID_PARAM);
    FUZZ_CHECK(aipc__recent_err_msg() != NULL);
    free(b);
  }

  /* 3. the bytes as a record: format, then parse gives it back (or refuses
   * exactly the records with a field out of range) */
  if (size >= AIPC_KEY_RECORD_LEN) {
    aipc__key k, back;
    k.kind = (aipc__object_kind)(data[size - 1] % AIPC_OBJECT_KIND_COUNT);
    k.nonce = 0;
    memcpy(&k.pid, data, 4);
    memcpy(&k.sdid, data + 4, 4);
    memcpy(&k.nonce, data + 8, 6); /* 48 bits */
    memcpy(&k.place, data + 14, 4);
    memcpy(&k.export_id, data + 18, 8);
    memcpy(k.secret, data + 26, AIPC_SECRET_LEN);
    char text[AIPC_KEY_CHARS + 1];
    memset(text, 0x5a, sizeof text);
    aipc__key_format(&k, text);
    FUZZ_CHECK(text[AIPC_KEY_CHARS] == '\0' && strlen(text) == AIPC_KEY_CHARS);
    for (int i = 0; i < AIPC_KEY_CHARS; i++) FUZZ_CHECK(text[i] > 0x20 && text[i] < 0x7f);
    aclError rc = aipc__key_parse("fuzz", text, &back);
    (void)aipc__recent_err_msg();
    int valid = k.pid != 0 && k.pid <= INT32_MAX && k.nonce != 0 && k.export_id != 0;
    FUZZ_CHECK((rc == ACL_SUCCESS) == valid);
    if (valid) {
      FUZZ_CHECK(back.kind == k.kind && back.pid == k.pid && back.sdid == k.sdid && back.nonce == k.nonce && back.place == k.place &&
                 back.export_id == k.export_id);
      FUZZ_CHECK(aipc__secret_equal(back.secret, k.secret));
    }
    /* a secret differing anywhere is not equal */
    uint8_t other[AIPC_SECRET_LEN];
    memcpy(other, k.secret, AIPC_SECRET_LEN);
    other[data[0] % AIPC_SECRET_LEN] ^= (uint8_t)(1u << (data[1] % 8));
    FUZZ_CHECK(!aipc__secret_equal(other, k.secret));
  }
  return 0;
}
