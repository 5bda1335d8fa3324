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

static bool part_differs(uint32_t a, uint32_t b) { return a != 0 && b != 0 && a != b; }

/* A sentence in buf naming the known part of place theirs that is not where
 * this process is now, and what to do; NULL when none differs. */
static const char *place_differs(uint32_t theirs, char *buf, size_t cap) {
  uint32_t here = aipc__place_here();
  if (part_differs(PLACE_HOST(theirs), PLACE_HOST(here)))
    snprintf(buf, cap,
             "the key was issued on another host (or before this host last booted): keys are imported on the "
             "exporter's host only");
  else if (part_differs(PLACE_NET(theirs), PLACE_NET(here)))
    snprintf(buf, cap,
             "the key was issued in another network namespace (another container?), and an exporter is "
             "reachable only from its own: run importers in the exporter's network namespace (for example "
             "docker --network container:<exporter>, or one Kubernetes pod)");
  else if (part_differs(PLACE_PID(theirs), PLACE_PID(here)))
    snprintf(buf, cap,
             "the key was issued in another PID namespace, where its pid names another process than here: run "
             "importers in the exporter's PID namespace (for example docker --pid container:<exporter> or "
             "--pid host, or shareProcessNamespace in a Kubernetes pod)");
  else
    return NULL;
  return buf;
}

aclError aipc__place_elsewhere(const char *call, const char *who, uint32_t theirs) {
  char why[400];
  if (!place_differs(theirs, why, sizeof why)) return ACL_SUCCESS;
  return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "%s: %s cannot be reached from here: %s", call, who, why);
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
