/*
 * Fuzz target: the wire protocol's decoder (csrc/emu/ipc/proto.c, linked
 * into the target), which both sides run on every packet they receive.
 * For any packet: decoding never reads outside it, and either refuses it
 * with a reason, or accepts a message that satisfies every rule of
 * docs/design-ipc.md and that encodes back to exactly the same bytes (so
 * there is one spelling per message, and nothing unchecked rides along).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "emu/emu.h"
#include "emu/ipc/proto.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int printable(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) return 0;
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *pkt = malloc(size ? size : 1); /* exactly the packet: ASan sees any over-read */
  if (!pkt) return 0;
  memcpy(pkt, data, size);
  aipc__msg m;
  const char *why = (const char *)1;
  aipc__decode_result d = aipc__proto_decode(pkt, size, &m, &why);
  if (d == AIPC_DECODE_MALFORMED) {
    FUZZ_CHECK(why != NULL && why[0] != '\0');
  } else if (d == AIPC_DECODE_VERSION) {
    FUZZ_CHECK(why != NULL);
    FUZZ_CHECK(m.version != AIPC_PROTO_VERSION);
    FUZZ_CHECK(size >= AIPC_PROTO_HEADER && size <= AIPC_PROTO_MAX);
  } else {
    FUZZ_CHECK(d == AIPC_DECODE_OK);
    FUZZ_CHECK(why == NULL);
    FUZZ_CHECK(m.version == AIPC_PROTO_VERSION);
    switch (m.type) {
      case AIPC_MSG_IMPORT:
        FUZZ_CHECK(size == AIPC_PROTO_HEADER + 40);
        FUZZ_CHECK(m.export_id != 0 && (m.flags & AIPC_IMPORT_FLAGS_MASK) <= 1 && m.settled <= m.req);
        FUZZ_CHECK(m.flags >> AIPC_IMPORT_KIND_SHIFT < AIPC_OBJECT_KIND_COUNT);
        break;
      case AIPC_MSG_CANCEL:
        FUZZ_CHECK(size == AIPC_PROTO_HEADER);
        break;
      case AIPC_MSG_RELEASE:
        FUZZ_CHECK(size == AIPC_PROTO_HEADER + 16);
        FUZZ_CHECK(m.export_id != 0 && m.count != 0);
        break;
      case AIPC_MSG_IMPORT_REPLY:
        FUZZ_CHECK(m.text_len <= AIPC_PROTO_TEXT_MAX && size == AIPC_PROTO_HEADER + 40 + m.text_len);
        FUZZ_CHECK(m.text[m.text_len] == '\0' && printable(m.text, m.text_len));
        if (m.status == ACL_SUCCESS) {
          FUZZ_CHECK(m.size != 0 && AIPC_IS_PAGE_ALIGNED(m.size) && AIPC_IS_PAGE_ALIGNED(m.offset));
          FUZZ_CHECK(m.size <= AIPC_PROTO_MAX_SIZE && m.offset <= AIPC_PROTO_MAX_SIZE * 4);
          FUZZ_CHECK(m.device >= 0 && m.device <= AIPC_PROTO_MAX_DEVICE && m.attr <= 1);
          FUZZ_CHECK(m.slot < AIPC_LEDGER_SLOTS || m.slot == AIPC_NO_SLOT);
          FUZZ_CHECK((m.flags & ~(AIPC_REPLY_FD | AIPC_REPLY_LEDGER)) == 0 && m.text_len == 0);
        } else {
          FUZZ_CHECK(strcmp(aipc__error_name(m.status), "ACL_ERROR_UNKNOWN") != 0);
          FUZZ_CHECK(!m.flags && !m.device && !m.attr && !m.offset && !m.size && !m.slot);
        }
        break;
      case AIPC_MSG_ERROR:
        FUZZ_CHECK(m.text_len <= AIPC_PROTO_TEXT_MAX && size == AIPC_PROTO_HEADER + 8 + m.text_len);
        FUZZ_CHECK(m.status != ACL_SUCCESS && m.text[m.text_len] == '\0' && printable(m.text, m.text_len));
        break;
      default:
        FUZZ_CHECK(!"a message of an unknown type was accepted");
    }
    /* one spelling per message: it encodes back to the very same bytes */
    uint8_t out[AIPC_PROTO_MAX];
    aipc__msg copy = m;
    size_t n = aipc__proto_encode(&copy, out);
    FUZZ_CHECK(n == size);
    FUZZ_CHECK(memcmp(out, pkt, size) == 0);
  }

  /* the other direction: whatever text a sender formats, the packet decodes */
  if (size >= 8) {
    aipc__msg e;
    memset(&e, 0, sizeof e);
    e.type = data[0] & 1 ? AIPC_MSG_ERROR : AIPC_MSG_IMPORT_REPLY;
    e.status = ACL_ERROR_RT_IPC_ERROR;
    e.req = 7;
    char text[600];
    size_t tl = size - 8 < sizeof text - 1 ? size - 8 : sizeof text - 1;
    memcpy(text, data + 8, tl);
    text[tl] = '\0';
    aipc__proto_set_text(&e, "%s", text);
    FUZZ_CHECK(e.text_len <= AIPC_PROTO_TEXT_MAX && printable(e.text, e.text_len));
    uint8_t out[AIPC_PROTO_MAX];
    size_t n = aipc__proto_encode(&e, out);
    aipc__msg back;
    FUZZ_CHECK(aipc__proto_decode(out, n, &back, &why) == AIPC_DECODE_OK);
    FUZZ_CHECK(back.text_len == e.text_len && memcmp(back.text, e.text, e.text_len) == 0);
  }
  free(pkt);
  return 0;
}
