/* The wire protocol: encode, decode, validate. See proto.h. */
#include "emu/ipc/proto.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/le.h"
#include "emu/emu.h"

static void set_text_v(aipc__msg *m, const char *fmt, va_list ap);

static size_t body_len(uint16_t type, uint32_t text_len) {
  switch (type) {
    case AIPC_MSG_IMPORT: return 40;
    case AIPC_MSG_IMPORT_REPLY: return 40 + (size_t)text_len;
    case AIPC_MSG_RELEASE: return 16;
    case AIPC_MSG_ERROR: return 8 + (size_t)text_len;
    case AIPC_MSG_CANCEL: return 0;
  }
  return 0;
}

size_t aipc__proto_encode(aipc__msg *m, uint8_t buf[AIPC_PROTO_MAX]) {
  m->version = AIPC_PROTO_VERSION;
  if (m->type != AIPC_MSG_IMPORT_REPLY && m->type != AIPC_MSG_ERROR) m->text_len = 0;
  if (m->text_len > AIPC_PROTO_TEXT_MAX) m->text_len = AIPC_PROTO_TEXT_MAX;
  size_t len = AIPC_PROTO_HEADER + body_len(m->type, m->text_len);
  aipc__put32(buf, AIPC_PROTO_MAGIC);
  aipc__put16(buf + 4, m->version);
  aipc__put16(buf + 6, m->type);
  aipc__put32(buf + 8, (uint32_t)len);
  aipc__put32(buf + 12, 0);
  aipc__put64(buf + 16, m->req);
  uint8_t *b = buf + AIPC_PROTO_HEADER;
  switch (m->type) {
    case AIPC_MSG_IMPORT:
      aipc__put64(b, m->export_id);
      memcpy(b + 8, m->secret, AIPC_SECRET_LEN);
      aipc__put32(b + 24, m->flags);
      aipc__put32(b + 28, m->sdid);
      aipc__put64(b + 32, m->settled);
      break;
    case AIPC_MSG_IMPORT_REPLY:
      aipc__put32(b, (uint32_t)m->status);
      aipc__put32(b + 4, m->flags);
      aipc__put32(b + 8, (uint32_t)m->device);
      aipc__put32(b + 12, m->attr);
      aipc__put64(b + 16, m->offset);
      aipc__put64(b + 24, m->size);
      aipc__put32(b + 32, m->text_len);
      aipc__put32(b + 36, m->status == ACL_SUCCESS ? m->slot : 0);
      memcpy(b + 40, m->text, m->text_len);
      break;
    case AIPC_MSG_RELEASE:
      aipc__put64(b, m->export_id);
      aipc__put32(b + 8, m->count);
      aipc__put32(b + 12, 0);
      break;
    case AIPC_MSG_ERROR:
      aipc__put32(b, (uint32_t)m->status);
      aipc__put32(b + 4, m->text_len);
      memcpy(b + 8, m->text, m->text_len);
      break;
  }
  return len;
}

static int known_error(aclError code) {
  return code != ACL_SUCCESS && strcmp(aipc__error_name(code), "ACL_ERROR_UNKNOWN") != 0;
}

static int printable(const uint8_t *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] < 0x20 || s[i] > 0x7e) return 0;
  return 1;
}

#define BAD(reason)   \
  do {                \
    *why = (reason);  \
    return AIPC_DECODE_MALFORMED; \
  } while (0)

aipc__decode_result aipc__proto_decode(const uint8_t *buf, size_t len, aipc__msg *m, const char **why) {
  *why = NULL;
  if (len < AIPC_PROTO_HEADER) BAD("shorter than a header");
  if (len > AIPC_PROTO_MAX) BAD("longer than any message");
  if (aipc__get32(buf) != AIPC_PROTO_MAGIC) BAD("bad magic");
  memset(m, 0, offsetof(aipc__msg, text) + 1);
  m->version = aipc__get16(buf + 4);
  m->type = aipc__get16(buf + 6);
  uint32_t length = aipc__get32(buf + 8);
  m->req = aipc__get64(buf + 16);
  if (length != len) BAD("length field differs from the packet size");
  if (m->version != AIPC_PROTO_VERSION) {
    *why = "unsupported protocol version";
    return AIPC_DECODE_VERSION;
  }
  if (aipc__get32(buf + 12) != 0) BAD("reserved header field is not 0");
  const uint8_t *b = buf + AIPC_PROTO_HEADER;
  size_t blen = len - AIPC_PROTO_HEADER;
  switch (m->type) {
    case AIPC_MSG_IMPORT:
      if (blen != 40) BAD("IMPORT has the wrong length");
      m->export_id = aipc__get64(b);
      memcpy(m->secret, b + 8, AIPC_SECRET_LEN);
      m->flags = aipc__get32(b + 24);
      m->sdid = aipc__get32(b + 28);
      m->settled = aipc__get64(b + 32);
      if (m->export_id == 0) BAD("IMPORT of export id 0");
      if (m->settled > m->req) BAD("IMPORT settles requests after itself");
      if ((m->flags & AIPC_IMPORT_FLAGS_MASK) > ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS ||
          m->flags >> AIPC_IMPORT_KIND_SHIFT >= AIPC_OBJECT_KIND_COUNT)
        BAD("IMPORT with unknown flags");
      return AIPC_DECODE_OK;
    case AIPC_MSG_IMPORT_REPLY:
      if (blen < 40) BAD("IMPORT_REPLY is too short");
      m->status = (aclError)aipc__get32(b);
      m->flags = aipc__get32(b + 4);
      m->device = (int32_t)aipc__get32(b + 8);
      m->attr = aipc__get32(b + 12);
      m->offset = aipc__get64(b + 16);
      m->size = aipc__get64(b + 24);
      m->text_len = aipc__get32(b + 32);
      m->slot = aipc__get32(b + 36);
      if (m->text_len > AIPC_PROTO_TEXT_MAX || blen != 40 + (size_t)m->text_len)
        BAD("IMPORT_REPLY text length is wrong");
      if (!printable(b + 40, m->text_len)) BAD("IMPORT_REPLY text is not printable");
      memcpy(m->text, b + 40, m->text_len);
      m->text[m->text_len] = '\0';
      if (m->status == ACL_SUCCESS) {
        if (m->flags & ~(AIPC_REPLY_FD | AIPC_REPLY_LEDGER)) BAD("IMPORT_REPLY with unknown flags");
        if (m->slot >= AIPC_LEDGER_SLOTS && m->slot != AIPC_NO_SLOT) BAD("IMPORT_REPLY slot out of range");
        if (m->device < 0 || m->device > AIPC_PROTO_MAX_DEVICE) BAD("IMPORT_REPLY device out of range");
        if (m->attr > ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_HCCS) BAD("IMPORT_REPLY attribute out of range");
        if (m->size == 0 || m->size > AIPC_PROTO_MAX_SIZE || m->offset > AIPC_PROTO_MAX_SIZE * 4)
          BAD("IMPORT_REPLY size or offset out of range");
        if (!AIPC_IS_PAGE_ALIGNED(m->size) || !AIPC_IS_PAGE_ALIGNED(m->offset))
          BAD("IMPORT_REPLY size or offset not page-aligned");
        if (m->text_len != 0) BAD("successful IMPORT_REPLY carries text");
      } else {
        if (!known_error(m->status)) BAD("IMPORT_REPLY with an unknown status");
        if (m->flags || m->device || m->attr || m->offset || m->size || m->slot)
          BAD("failed IMPORT_REPLY carries a mapping");
      }
      return AIPC_DECODE_OK;
    case AIPC_MSG_RELEASE:
      if (blen != 16) BAD("RELEASE has the wrong length");
      m->export_id = aipc__get64(b);
      m->count = aipc__get32(b + 8);
      if (aipc__get32(b + 12) != 0) BAD("reserved RELEASE field is not 0");
      if (m->export_id == 0 || m->count == 0) BAD("RELEASE of export id 0 or of 0 references");
      return AIPC_DECODE_OK;
    case AIPC_MSG_ERROR:
      if (blen < 8) BAD("ERROR is too short");
      m->status = (aclError)aipc__get32(b);
      m->text_len = aipc__get32(b + 4);
      if (m->text_len > AIPC_PROTO_TEXT_MAX || blen != 8 + (size_t)m->text_len) BAD("ERROR text length is wrong");
      if (!printable(b + 8, m->text_len)) BAD("ERROR text is not printable");
      if (!known_error(m->status)) BAD("ERROR with an unknown status");
      memcpy(m->text, b + 8, m->text_len);
      m->text[m->text_len] = '\0';
      return AIPC_DECODE_OK;
    case AIPC_MSG_CANCEL:
      if (blen != 0) BAD("CANCEL has a body");
      return AIPC_DECODE_OK;
  }
  BAD("unknown message type");
}

void aipc__proto_set_text(aipc__msg *m, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_text_v(m, fmt, ap);
  va_end(ap);
}

/* ---- constructors ------------------------------------------------------------ */

static void msg_start(aipc__msg *m, uint16_t type, uint64_t req) {
  memset(m, 0, offsetof(aipc__msg, text) + 1);
  m->type = type;
  m->req = req;
}

void aipc__msg_import(aipc__msg *m, uint64_t export_id, const uint8_t secret[AIPC_SECRET_LEN], uint32_t flags,
                      uint32_t sdid) {
  msg_start(m, AIPC_MSG_IMPORT, 0);
  m->export_id = export_id;
  memcpy(m->secret, secret, AIPC_SECRET_LEN);
  m->flags = flags;
  m->sdid = sdid;
}

void aipc__msg_number(aipc__msg *m, uint64_t req, uint64_t settled) {
  m->req = req;
  m->settled = settled;
}

void aipc__msg_release(aipc__msg *m, uint64_t req, uint64_t export_id, uint32_t count) {
  msg_start(m, AIPC_MSG_RELEASE, req);
  m->export_id = export_id;
  m->count = count;
}

void aipc__msg_cancel(aipc__msg *m, uint64_t req) { msg_start(m, AIPC_MSG_CANCEL, req); }

void aipc__msg_grant(aipc__msg *m, uint64_t req, int32_t device, uint32_t attr, uint64_t offset, uint64_t size,
                     uint32_t slot, uint32_t flags) {
  msg_start(m, AIPC_MSG_IMPORT_REPLY, req);
  m->status = ACL_SUCCESS;
  m->device = device;
  m->attr = attr;
  m->offset = offset;
  m->size = size;
  m->slot = slot;
  m->flags = flags;
}

static void set_text_v(aipc__msg *m, const char *fmt, va_list ap) {
  int n = vsnprintf(m->text, sizeof m->text, fmt, ap);
  if (n < 0) n = 0;
  if ((size_t)n > AIPC_PROTO_TEXT_MAX) n = AIPC_PROTO_TEXT_MAX;
  for (int i = 0; i < n; i++)
    if ((unsigned char)m->text[i] < 0x20 || (unsigned char)m->text[i] > 0x7e) m->text[i] = '?';
  m->text_len = (uint32_t)n;
}

/* A message that carries a status and a text: a refusal or an ERROR. */
static void msg_status(aipc__msg *m, uint16_t type, uint64_t req, aclError status, const char *fmt, va_list ap) {
  msg_start(m, type, req);
  m->status = status;
  set_text_v(m, fmt, ap);
}

void aipc__msg_refuse(aipc__msg *m, uint64_t req, aclError status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  msg_status(m, AIPC_MSG_IMPORT_REPLY, req, status, fmt, ap);
  va_end(ap);
}

void aipc__msg_error(aipc__msg *m, uint64_t req, aclError status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  msg_status(m, AIPC_MSG_ERROR, req, status, fmt, ap);
  va_end(ap);
}

void aipc__msg_wipe(aipc__msg *m) { memset(m->secret, 0, sizeof m->secret); }

ssize_t aipc__proto_recv(int sock, uint8_t buf[AIPC_PROTO_MAX], int flags, int fds[AIPC_PROTO_MAX_FDS],
                         int *nfds, unsigned *seen) {
  return aipc__os_recv_fds(sock, buf, AIPC_PROTO_MAX, flags, fds, nfds, seen);
}

ssize_t aipc__proto_recv_from(int sock, uint8_t buf[AIPC_PROTO_MAX], int flags, int fds[AIPC_PROTO_MAX_FDS],
                              int *nfds, unsigned *seen, aipc__os_sender *from) {
  return aipc__os_recv_fds_from(sock, buf, AIPC_PROTO_MAX, flags, fds, nfds, seen, from);
}
