/*
 * This process on the IPC layer: its pid and a random nonce, which together
 * name its exporter's socket and appear in every key it issues. A forked
 * child is a new process with a new name. Thread-safe.
 */
#ifndef ASCEND_IPC_EMU_IPC_IDENTITY_H_
#define ASCEND_IPC_EMU_IPC_IDENTITY_H_

#include <stdbool.h>
#include <stdint.h>

/* This process's pid and nonce, chosen at the first call. 0, or -1 with errno (getrandom). */
int aipc__self_get(uint32_t *pid, uint64_t *nonce);
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
