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

#include "core/error.h"
#include "emu/ipc/key.h"
#include "os/os.h"

/* Written once under lock (the nonce first, then the pid, both with release
 * stores), read without it: aipc__self_is is on every close's path. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t self_pid;   /* 0 until named */
static uint64_t self_nonce; /* never 0 once named */
static uint32_t self_place;

int aipc__self_get(uint32_t *pid, uint64_t *nonce) {
  int rc = 0;
  pthread_mutex_lock(&lock);
  if (!self_pid) {
    uint64_t n = 0;
    while (rc == 0 && n == 0) {
      rc = aipc__random(&n, sizeof n);
      n &= AIPC_NONCE_MASK;
    }
    if (rc == 0) {
      __atomic_store_n(&self_place, aipc__place_here(), __ATOMIC_RELAXED);
      __atomic_store_n(&self_nonce, n, __ATOMIC_RELEASE);
      __atomic_store_n(&self_pid, (uint32_t)getpid(), __ATOMIC_RELEASE);
    }
  }
  *pid = self_pid;
  *nonce = self_nonce;
  pthread_mutex_unlock(&lock);
  return rc;
}

int aipc__self_rename(uint32_t *pid, uint64_t *nonce) {
  uint64_t old_nonce;
  if (aipc__self_get(pid, &old_nonce) != 0) return -1;
  uint64_t n = 0;
  while (n == 0 || n == old_nonce) {
    if (aipc__random(&n, sizeof n) != 0) return -1;
    n &= AIPC_NONCE_MASK;
  }
  pthread_mutex_lock(&lock);
  __atomic_store_n(&self_nonce, n, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&lock);
  *nonce = n;
  return 0;
}

uint32_t aipc__self_place(void) {
  /* Named: the place was stored before the pid (release), no lock needed. */
  if (!__atomic_load_n(&self_pid, __ATOMIC_ACQUIRE)) {
    uint32_t pid;
    uint64_t nonce;
    aipc__self_get(&pid, &nonce);
  }
  return __atomic_load_n(&self_place, __ATOMIC_RELAXED);
}

/* Folds id to bits bits, never 0 for a known id (0 stays unknown). */
static uint32_t fold(uint64_t id, unsigned bits) {
  if (id == 0) return 0;
  uint32_t v = (uint32_t)((id * 0x9e3779b97f4a7c15u) >> (64 - bits));
  return v ? v : 1;
}

#define PLACE_HOST(p) ((p) >> 20)
#define PLACE_NET(p) (((p) >> 10) & 0x3ff)
#define PLACE_PID(p) ((p) & 0x3ff)

uint32_t aipc__place_here(void) {
  return fold(aipc__os_host_boot(), 12) << 20 | fold(aipc__os_net_namespace(), 10) << 10 |
         fold(aipc__os_pid_namespace(), 10);
}

static bool part_differs(uint64_t a, uint64_t b) { return a != 0 && b != 0 && a != b; }

/* A place of 32 bits, in parts. */
static aipc__place_full unpack(uint32_t p) { return (aipc__place_full){PLACE_HOST(p), PLACE_NET(p), PLACE_PID(p)}; }

aipc__place_full aipc__place_full_here(void) {
  return (aipc__place_full){aipc__os_host_boot(), aipc__os_net_namespace(), aipc__os_pid_namespace()};
}

/* Writes to buf "call: who cannot be reached from here: " and a sentence
 * naming the known part of theirs that is not here, and what to do; false
 * (buf untouched) when none differs. */
static bool place_differs(aipc__place_full theirs, aipc__place_full here, const char *noun, const char *call,
                          const char *who, char *buf, size_t cap) {
  if (part_differs(theirs.host, here.host))
    snprintf(buf, cap,
             "%s: %s cannot be reached from here: the %s was issued on another host (or before this host last "
             "booted): %ss are imported on the exporter's host only",
             call, who, noun, noun);
  else if (part_differs(theirs.net, here.net))
    snprintf(buf, cap,
             "%s: %s cannot be reached from here: the %s was issued in another network namespace (another "
             "container?), and an exporter is reachable only from its own: run importers in the exporter's "
             "network namespace (for example docker --network container:<exporter>, or one Kubernetes pod)",
             call, who, noun);
  else if (part_differs(theirs.pid, here.pid))
    snprintf(buf, cap,
             "%s: %s cannot be reached from here: the %s was issued in another PID namespace, where its pid "
             "names another process than here: run importers in the exporter's PID namespace (for example "
             "docker --pid container:<exporter> or --pid host, or shareProcessNamespace in a Kubernetes pod)",
             call, who, noun);
  else
    return false;
  return true;
}

bool aipc__place_full_elsewhere(aipc__place_full theirs, const char *noun, const char *call, const char *who,
                                char *buf, size_t cap) {
  return place_differs(theirs, aipc__place_full_here(), noun, call, who, buf, cap);
}

aclError aipc__place_elsewhere(const char *call, const char *who, uint32_t theirs) {
  char message[640];
  if (!place_differs(unpack(theirs), unpack(aipc__place_here()), "key", call, who, message, sizeof message))
    return ACL_SUCCESS;
  return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "%s", message);
}

aclError aipc__place_check(const char *call, const char *who, uint32_t theirs) {
  if (theirs == aipc__place_here()) return ACL_SUCCESS; /* this process moved there since it was named */
  aclError rc = aipc__place_elsewhere(call, who, theirs);
  if (rc != ACL_SUCCESS) return rc;
  return aipc__fail(ACL_ERROR_INVALID_PARAM,
                    "%s: the key's place (host and namespaces of its exporter) is not this process's, yet no known "
                    "part differs: a damaged or forged key (or one of the two processes cannot read /proc)",
                    call);
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
   * shareable handles (exporter_server.c). */
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
  self_place = 0;
}
