/* This process's name on the IPC layer (identity.h). */
#define _GNU_SOURCE
#include "emu/ipc/identity.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "emu/ipc/key.h"

/* Written once under lock (the nonce first, then the pid, both with release
 * stores), read without it: aipc__self_is is on every close's path. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t self_pid;   /* 0 until named */
static uint64_t self_nonce; /* never 0 once named */

int aipc__self_get(uint32_t *pid, uint64_t *nonce) {
  int rc = 0;
  pthread_mutex_lock(&lock);
  if (!self_pid) {
    uint64_t n = 0;
    while (rc == 0 && n == 0) rc = aipc__random(&n, sizeof n);
    if (rc == 0) {
      __atomic_store_n(&self_nonce, n, __ATOMIC_RELEASE);
      __atomic_store_n(&self_pid, (uint32_t)getpid(), __ATOMIC_RELEASE);
    }
  }
  *pid = self_pid;
  *nonce = self_nonce;
  pthread_mutex_unlock(&lock);
  return rc;
}

bool aipc__self_is(uint32_t pid, uint64_t nonce) {
  uint32_t p = __atomic_load_n(&self_pid, __ATOMIC_ACQUIRE);
  return p != 0 && pid == p && nonce == __atomic_load_n(&self_nonce, __ATOMIC_ACQUIRE);
}

unsigned aipc__self_sockaddr(void *out, uint32_t pid, uint64_t nonce) {
  struct sockaddr_un *sa = out;
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  /* Abstract namespace: no file to clean up, gone with the last descriptor. */
  /* nonce 0 (never a process's nonce): pid is then the number of a door of
   * shareable handles (exporter.c). */
  int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "ascend_ipc.%u.%016llx", pid,
                   (unsigned long long)nonce);
  return (unsigned)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

void aipc__self_atfork_prepare(void) { pthread_mutex_lock(&lock); }
void aipc__self_atfork_parent(void) { pthread_mutex_unlock(&lock); }

void aipc__self_atfork_child(void) {
  lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  self_pid = 0;
  self_nonce = 0;
}
