/*
 * This process on the IPC layer: its pid and a random nonce, which together
 * name its exporter's socket and appear in every key it issues, and its
 * place, which keys carry too. A forked child is a new process with a new
 * name. Thread-safe.
 */
#ifndef ASCEND_IPC_EMU_IPC_IDENTITY_H_
#define ASCEND_IPC_EMU_IPC_IDENTITY_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acl/acl.h"

/* This process's pid and nonce (48 bits, never 0), chosen at the first
 * call. 0, or -1 with errno (getrandom). */
int aipc__self_get(uint32_t *pid, uint64_t *nonce);
/* A new nonce for this process, never its last one: each start of its
 * exporter binds a name nobody could know before (the last one was listed in
 * /proc/net/unix, and anyone may have bound it since). Keys issued under
 * the old name stop being this process's. 0, or -1 with errno. */
int aipc__self_rename(uint32_t *pid, uint64_t *nonce);
/* Where this process was when it was named: its exporter's socket is there. */
uint32_t aipc__self_place(void);

/*
 * A place: where a process runs, in the 32 bits a key has room for. 12 bits
 * of its host's boot, 10 of its network namespace (abstract sockets, the
 * exporter's included, are seen only from there) and 10 of its PID
 * namespace (a key's pid means that process only there), each a hash; a
 * part that cannot be read is 0, unknown. An import that cannot reach the
 * exporter compares places to say why, instead of calling it gone.
 */
uint32_t aipc__place_here(void);
/* When a known part of place theirs (host, network or PID namespace) is not
 * where this process is now: a recorded ACL_ERROR_RT_FEATURE_NOT_SUPPORT
 * saying, after "call: who cannot be reached from here:", which part differs
 * and what to do; else ACL_SUCCESS (the same, or unknown). */
aclError aipc__place_elsewhere(const char *call, const char *who, uint32_t theirs);
/* Before an import of a key of place theirs, not this process's own place
 * (aipc__self_place: the usual case, which the importer tells apart before
 * it names the exporter who): ACL_SUCCESS when the key was issued where
 * this process is now; else a
 * recorded ACL_ERROR_RT_FEATURE_NOT_SUPPORT naming what differs, or
 * ACL_ERROR_INVALID_PARAM when nothing known differs yet the places are not
 * equal (a damaged or forged key: a key has one spelling). */
aclError aipc__place_check(const char *call, const char *who, uint32_t theirs);
/*
 * A place in full, for what has room to carry it (in Python a
 * ShareableHandle carries its exporter's: the shareable handle itself is a
 * bare 64-bit number): the 64-bit id of each part, 0 when unknown.
 */
typedef struct aipc__place_full {
  uint64_t host, net, pid;
} aipc__place_full;

aipc__place_full aipc__place_full_here(void);
/* When a known part of place theirs is not where this process is now:
 * writes "call: who cannot be reached from here: " and which part differs
 * and what to do to buf, the words of aipc__place_elsewhere's message, with
 * noun naming what was issued there ("key", "shareable handle"), and
 * returns true; else false (the same, or unknown). */
bool aipc__place_full_elsewhere(aipc__place_full theirs, const char *noun, const char *call, const char *who,
                                char *buf, size_t cap);
/* Whether (pid, nonce) names this process. False before it has a name. */
bool aipc__self_is(uint32_t pid, uint64_t nonce);
/* Writes the abstract socket address of the exporter (pid, nonce) to sun
 * (a struct sockaddr_un) and returns its length. */
unsigned aipc__self_sockaddr(void *sun, uint32_t pid, uint64_t nonce);

/* Fork: the name is held still across it; the child forgets it. */
void aipc__self_atfork_prepare(void);
void aipc__self_atfork_parent(void);
void aipc__self_atfork_child(void);

#endif
