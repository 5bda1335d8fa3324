/*
 * The wire protocol between an importer and an exporter: small binary
 * messages on a SOCK_SEQPACKET connection (one message per packet), all
 * integers little-endian.
 *
 * header, 24 bytes:
 *   u32 magic     AIPC_PROTO_MAGIC
 *   u16 version   AIPC_PROTO_VERSION
 *   u16 type      AIPC_MSG_*
 *   u32 length    whole message in bytes (must equal the packet size)
 *   u32 reserved  0
 *   u64 req       request id, chosen by the importer, echoed in the reply
 *
 * IMPORT         importer -> exporter, body 40: u64 export_id, u8 secret[16],
 *                u32 flags (bits 0-7: import flags, <= 1; bits 8-15: the kind
 *                of object the importer expects, aipc__object_kind, which the
 *                exporter checks; the rest 0), u32 sdid (importer's),
 *                u64 settled (every request of this connection with a lower
 *                id has had its reply, or its CANCEL sent: the exporter may
 *                forget those grants)
 * IMPORT_REPLY   exporter -> importer, body 40 + text_len: i32 status,
 *                u32 flags (bit 0: the allocation's memfd is attached, on
 *                every grant; bit 1: the connection's release ledger fd
 *                follows it), i32 device, u32 attr, u64 offset (of the
 *                export in the memfd), u64 size, u32 text_len, u32 slot (the
 *                reference's ledger slot, AIPC_NO_SLOT for none; 0 on
 *                failure), char text[text_len] (printable ASCII, no NUL)
 * RELEASE        importer -> exporter, body 16: u64 export_id, u32 count,
 *                u32 reserved. One-way: no reply (see docs/design-ipc.md).
 * CANCEL         importer -> exporter, no body; req is the id of an IMPORT
 *                whose caller gave up waiting. One-way. The exporter, which
 *                has served that IMPORT by then (one ordered stream), takes
 *                back the reference it granted, if it granted one.
 *
 * The release ledger: a sealed memfd of AIPC_LEDGER_SLOTS u32 counters that
 * the exporter creates per connection and sends with its first grant. An
 * importer releases n references of a slotted grant by adding n to its slot
 * (no syscall); the exporter takes the counts out (atomic exchange) whenever
 * it needs exact numbers, and treats them as untrusted input.
 * ERROR          exporter -> importer, body 8 + text_len: i32 status,
 *                u32 text_len, text; sent before the exporter closes a
 *                connection it cannot serve: req is the request it answers
 *                (unsupported protocol version), or 0 when the connection
 *                itself is refused at accept (another user, too many
 *                connections from one process), before any request is read:
 *                it then answers whatever the importer asked.
 *
 * Decoding checks every field: exact lengths, enums and flags in range,
 * reserved fields zero, sizes page-aligned and sane, text printable.
 */
#ifndef ASCEND_IPC_EMU_IPC_PROTO_H_
#define ASCEND_IPC_EMU_IPC_PROTO_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acl/acl.h"
#include "emu/ipc/key.h"
#include "os/os.h"

#define AIPC_PROTO_MAGIC 0x43504941u /* "AIPC" */
#define AIPC_PROTO_VERSION 1
#define AIPC_PROTO_HEADER 24
#define AIPC_PROTO_TEXT_MAX 255
#define AIPC_PROTO_MAX 512 /* receive buffers: any larger packet is malformed */

enum {
  AIPC_MSG_IMPORT = 1,
  AIPC_MSG_IMPORT_REPLY = 2,
  AIPC_MSG_RELEASE = 3,
  AIPC_MSG_ERROR = 4,
  AIPC_MSG_CANCEL = 5,
};

#define AIPC_IMPORT_KIND_SHIFT 8
#define AIPC_IMPORT_FLAGS_MASK 0xffu
#define AIPC_REPLY_FD 1u     /* IMPORT_REPLY flags: the allocation's memfd rides along */
#define AIPC_REPLY_LEDGER 2u /* ... and the connection's ledger fd (after the memfd) */
#define AIPC_LEDGER_SLOTS 16384u
#define AIPC_LEDGER_BYTES ((size_t)AIPC_LEDGER_SLOTS * 4)
#define AIPC_NO_SLOT 0xffffffffu
#define AIPC_PROTO_MAX_SIZE ((uint64_t)1 << 47)
#define AIPC_PROTO_MAX_DEVICE 65535

typedef struct aipc__msg {
  uint16_t version;
  uint16_t type;
  uint64_t req;
  /* IMPORT, RELEASE */
  uint64_t export_id;
  uint8_t secret[AIPC_SECRET_LEN]; /* IMPORT */
  uint32_t flags;                  /* IMPORT: import flags; IMPORT_REPLY: AIPC_REPLY_* */
  uint32_t sdid;                   /* IMPORT */
  uint64_t settled;                /* IMPORT */
  uint32_t count;                  /* RELEASE */
  uint32_t slot;                   /* IMPORT_REPLY */
  /* IMPORT_REPLY, ERROR */
  aclError status;
  int32_t device;
  uint32_t attr;
  uint64_t offset, size;
  uint32_t text_len;
  char text[AIPC_PROTO_TEXT_MAX + 1]; /* NUL-terminated after decode */
} aipc__msg;

/* Encodes m (version and text_len filled in here) into buf. Returns the length. */
size_t aipc__proto_encode(aipc__msg *m, uint8_t buf[AIPC_PROTO_MAX]);

typedef enum aipc__decode_result {
  AIPC_DECODE_OK = 0,
  AIPC_DECODE_MALFORMED = -1, /* *why says which rule failed */
  AIPC_DECODE_VERSION = -2,   /* well-formed header of another protocol version */
} aipc__decode_result;

/* Decodes and validates the packet buf[0..len). */
aipc__decode_result aipc__proto_decode(const uint8_t *buf, size_t len, aipc__msg *m, const char **why);

#define AIPC_PROTO_MAX_FDS AIPC_OS_FDS_MAX

/*
 * Receives one packet from a SEQPACKET socket into buf (recvmsg flags, plus
 * MSG_CMSG_CLOEXEC): aipc__os_recv_fds with a buffer of AIPC_PROTO_MAX, so
 * a longer packet shows as AIPC_RECV_ODD.
 */
ssize_t aipc__proto_recv(int sock, uint8_t buf[AIPC_PROTO_MAX], int flags, int fds[AIPC_PROTO_MAX_FDS],
                         int *nfds, unsigned *seen);

/* The same, and the sender's credentials (aipc__os_recv_fds_from): for a
 * socket with SO_PASSCRED. */
ssize_t aipc__proto_recv_from(int sock, uint8_t buf[AIPC_PROTO_MAX], int flags, int fds[AIPC_PROTO_MAX_FDS],
                              int *nfds, unsigned *seen, aipc__os_sender *from);

/* Sets m's text (truncated to AIPC_PROTO_TEXT_MAX, non-printables replaced). */
void aipc__proto_set_text(aipc__msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * The messages each side sends, built here only (the decoder above fills
 * the ones received), so a message's fields have one writer.
 */
/* IMPORT of export_id with its secret; aipc__msg_number gives it its id. */
void aipc__msg_import(aipc__msg *m, uint64_t export_id, const uint8_t secret[AIPC_SECRET_LEN], uint32_t flags,
                      uint32_t sdid);
/* An IMPORT's request id, and the mark below which every request is settled. */
void aipc__msg_number(aipc__msg *m, uint64_t req, uint64_t settled);
void aipc__msg_release(aipc__msg *m, uint64_t req, uint64_t export_id, uint32_t count);
void aipc__msg_cancel(aipc__msg *m, uint64_t req);
/* IMPORT_REPLY granting [offset, offset + size) of device's memory; flags: AIPC_REPLY_*. */
void aipc__msg_grant(aipc__msg *m, uint64_t req, int32_t device, uint32_t attr, uint64_t offset, uint64_t size,
                     uint32_t slot, uint32_t flags);
/* IMPORT_REPLY refusing request req with status and a message. */
void aipc__msg_refuse(aipc__msg *m, uint64_t req, aclError status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* ERROR, sent before the exporter closes a connection it cannot serve. */
void aipc__msg_error(aipc__msg *m, uint64_t req, aclError status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Zeroes the secret a message carried. */
void aipc__msg_wipe(aipc__msg *m);

#endif
