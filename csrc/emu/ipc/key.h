/*
 * IPC keys: the printable name of one export.
 *
 *   "aipc1." + base64url(record), no padding: 6 + 54 = 60 characters.
 *
 * record (40 bytes, little-endian):
 *   u32 pid        exporter's process id (1..INT32_MAX)
 *   u32 sdid       exporter's super-node server id (ASCEND_IPC_SDID)
 *   u64 nonce      exporter's per-process random nonce (never 0; new after fork)
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

#define AIPC_KEY_PREFIX "aipc1."
#define AIPC_KEY_PREFIX_LEN 6
#define AIPC_KEY_RECORD_LEN 40
#define AIPC_KEY_CHARS 60 /* prefix + 54 base64url characters */
#define AIPC_SECRET_LEN 16

typedef struct aipc__key {
  uint32_t pid;
  uint32_t sdid;
  uint64_t nonce;
  uint64_t export_id;
  uint8_t secret[AIPC_SECRET_LEN];
} aipc__key;

/* Writes the key's text and a NUL into out (AIPC_KEY_CHARS + 1 bytes). */
void aipc__key_format(const aipc__key *k, char out[AIPC_KEY_CHARS + 1]);
/* The same from the parts of a key (the exporter's way to issue one). */
void aipc__key_write(uint32_t pid, uint32_t sdid, uint64_t nonce, uint64_t export_id,
                     const uint8_t secret[AIPC_SECRET_LEN], char out[AIPC_KEY_CHARS + 1]);

/*
 * Parses key for the entry point named call. Reads at most
 * ACL_IPC_MEM_KEY_LEN bytes of key (which must not be NULL). Returns
 * ACL_SUCCESS and *out, or a recorded ACL_ERROR_INVALID_PARAM.
 */
aclError aipc__key_parse(const char *call, const char *key, aipc__key *out);

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
