/*
 * IPC keys: the printable name of one export.
 *
 *   prefix + base64url(record), no padding: 6 + 56 = 62 characters, so
 *   that a key and its NUL fit in an aclrtIpcEventHandle (64 bytes).
 *
 * The prefix says what kind of object the export is (AIPC_OBJECT_KINDS):
 * device memory ("aipc2."), an IPC notify ("aipn2."), or an IPC event
 * ("aipe2.", carried in the 64-byte aclrtIpcEventHandle). The exporter
 * checks the kind again on every import: the prefix only lets a caller
 * who passes one kind of key to another kind's call hear so at once. The
 * digit is the record's version: "aipc1." keys had no place.
 *
 * record (42 bytes, little-endian):
 *   u32 pid        exporter's process id (1..INT32_MAX)
 *   u32 sdid       exporter's super-node server id (ASCEND_IPC_SDID)
 *   u48 nonce      exporter's per-process random nonce (never 0; new after fork)
 *   u32 place      where the exporter runs: host, network and PID namespace
 *                  (identity.h); read only to explain a failed import
 *   u64 export_id  per-process export counter (never 0, never reused)
 *   u8  secret[16] 128 random bits from getrandom
 *
 * Parsing is strict and total: the one canonical spelling of a record is
 * accepted, every other byte string is rejected with a message.
 */
#ifndef ASCEND_IPC_EMU_IPC_KEY_H_
#define ASCEND_IPC_EMU_IPC_KEY_H_

#include <stddef.h>
#include <stdint.h>

#include "acl/acl.h"

/* X(NAME, prefix, what it is called in messages, the call that issues it
 *   (its field in core/calls.h), how an exporter lets a process import it) */
#define AIPC_OBJECT_KINDS(X)                                                                                  \
  X(MEMORY, "aipc2.", "an IPC memory key", ipc_get_export_key,                                                \
    "pass it to aclrtIpcMemSetImportPid, or export with ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION")    \
  X(NOTIFY, "aipn2.", "an IPC notify key", notify_get_export_key,                                             \
    "pass it to aclrtNotifySetImportPid, or export with ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION")     \
  X(EVENT, "aipe2.", "an IPC event handle", ipc_get_event_handle, "")                                         \
  X(PHYSICAL, "aipv2.", "a shareable handle of physical memory", mem_export_to_shareable_handle,              \
    "pass it to aclrtMemSetPidToShareableHandle, or export with ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION")

typedef enum aipc__object_kind {
#define AIPC_OBJECT_KIND_ENUM_(name, prefix, what, issuer, allow) AIPC_OBJECT_##name,
  AIPC_OBJECT_KINDS(AIPC_OBJECT_KIND_ENUM_)
#undef AIPC_OBJECT_KIND_ENUM_
  AIPC_OBJECT_KIND_COUNT
} aipc__object_kind;

/* "an IPC notify key", and the call that issues such keys. */
const char *aipc__object_what(aipc__object_kind kind);
const char *aipc__object_issuer(aipc__object_kind kind);
/* What the exporter must do to whitelist a process for a kind ("pass it to ..."). */
const char *aipc__object_allow(aipc__object_kind kind);

#define AIPC_KEY_PREFIX "aipc2." /* memory keys' */
#define AIPC_KEY_PREFIX_LEN 6
#define AIPC_KEY_RECORD_LEN 42
#define AIPC_KEY_CHARS 62 /* prefix + 56 base64url characters */
#define AIPC_NONCE_MASK ((UINT64_C(1) << 48) - 1) /* a nonce has 48 bits */
#define AIPC_SECRET_LEN 16

typedef struct aipc__key {
  aipc__object_kind kind; /* from the prefix */
  uint32_t pid;
  uint32_t sdid;
  uint64_t nonce;
  uint32_t place;
  uint64_t export_id;
  uint8_t secret[AIPC_SECRET_LEN];
} aipc__key;

/* Writes the key's text and a NUL into out (AIPC_KEY_CHARS + 1 bytes). */
void aipc__key_format(const aipc__key *k, char out[AIPC_KEY_CHARS + 1]);
/* The same from the parts of a key (the exporter's way to issue one). */
void aipc__key_write(aipc__object_kind kind, uint32_t pid, uint32_t sdid, uint64_t nonce, uint32_t place,
                     uint64_t export_id, const uint8_t secret[AIPC_SECRET_LEN], char out[AIPC_KEY_CHARS + 1]);

/*
 * Parses key, of any kind, for the entry point named call. Reads at most
 * ACL_IPC_MEM_KEY_LEN bytes of key. Returns ACL_SUCCESS and *out, or a
 * recorded ACL_ERROR_INVALID_PARAM.
 */
aclError aipc__key_parse(const char *call, const char *key, aipc__key *out);
/* aipc__key_parse, and a recorded ACL_ERROR_INVALID_PARAM when the key is
 * of another kind than want. */
aclError aipc__key_parse_kind(const char *call, const char *key, aipc__object_kind want, aipc__key *out);

/*
 * IPC event handles (aclrtIpcEventHandle, 64 bytes): the key of kind EVENT,
 * its NUL, and zeros to the end. Parsing accepts exactly that.
 */
void aipc__event_handle_write(const char key[AIPC_KEY_CHARS + 1], aclrtIpcEventHandle *handle);
aclError aipc__event_handle_parse(const char *call, const aclrtIpcEventHandle *handle, aipc__key *out,
                                  char key[AIPC_KEY_CHARS + 1]);

/*
 * Shareable handles of physical memory (aclrtMemExportToShareableHandle):
 * the 64-bit number CANN defines, here the exporter's door in the top 32
 * bits and 32 random bits, neither 0. The door is a random number the
 * exporter picks at its first shareable export and binds a socket under
 * (its name ends in the nonce 0, which no process's own socket has); being
 * random, nobody can take it first. The random bits name the export there.
 * A handle is a key of kind PHYSICAL with the door in the pid field, nonce
 * 0, the number as export id and an all-zero secret: the whitelist, not the
 * number, is what guards it (as on hardware).
 */
#define AIPC_SHAREABLE_DOOR_SHIFT 32
#define AIPC_SHAREABLE_RANDOM_MASK ((UINT64_C(1) << AIPC_SHAREABLE_DOOR_SHIFT) - 1)
/* The key a shareable handle stands for (sdid 0: the caller's to fill), or a
 * recorded ACL_ERROR_INVALID_PARAM. */
aclError aipc__shareable_parse(const char *call, uint64_t handle, aipc__key *out);

/*
 * Fabric handles (aclrtMemFabricHandle, 128 bytes, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC):
 * a key of kind PHYSICAL and the super-node it was issued in, little-endian:
 *   0  u32 magic "AIPF"       4 u16 version 1      6 u16 reserved 0
 *   8  u64 super-node id (the rendezvous directory's, never 0)
 *   16 u32 sdid (the exporter's server)            20 u32 exporter pid
 *   24 u64 exporter nonce (48 bits, never 0)       32 u32 place
 *   36 u32 reserved 0         40 u64 export id (never 0)
 *   48 u8 secret[16] (128 random bits; never all 0) 64..127 zero
 * Parsing is strict: it comes off the network.
 */
#define AIPC_FABRIC_LEN 128
#define AIPC_FABRIC_MAGIC 0x46504941u /* "AIPF" */
#define AIPC_FABRIC_VERSION 1
void aipc__fabric_write(const aipc__key *k, uint64_t supernode, uint8_t out[AIPC_FABRIC_LEN]);
/* The key and super-node id of a handle, or a recorded ACL_ERROR_INVALID_PARAM. */
aclError aipc__fabric_parse(const char *call, const uint8_t in[AIPC_FABRIC_LEN], aipc__key *out,
                            uint64_t *supernode);

/* 1 when the two secrets are equal; time independent of where they differ. */
int aipc__secret_equal(const uint8_t *a, const uint8_t *b);

/*
 * Fills buf with n random bytes from getrandom, through a small pool of its
 * own (thread-safe). Returns 0 or -1 (errno).
 */
int aipc__random(void *buf, size_t n);
/* Fork: the pool is held still across it, and a child forgets it (it must
 * never hand out its parent's bytes). */
void aipc__random_atfork_prepare(void);
void aipc__random_atfork_parent(void);
void aipc__random_atfork_child(void);

#endif
