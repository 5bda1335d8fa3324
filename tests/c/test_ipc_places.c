/* Keys say where their exporter runs: an import from another host, network
 * namespace or PID namespace fails at once with a message that names the
 * cause, instead of calling a live exporter gone. The namespace tests need
 * root (unshare); they say "skipped" otherwise. */
#include "ipc_util.h"

#include <sched.h>

#define PLACE_HOST 0xfff00000u
#define PLACE_NET 0x000ffc00u
#define PLACE_PID 0x000003ffu

/* A pid no process has now: a child that has exited and been reaped. */
static uint32_t dead_pid(void) {
  int pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) _exit(0);
  CHECK_EQ(th_wait(pid), 0);
  return (uint32_t)pid;
}

/* The place with the part under mask changed (and still not 0: unknown). */
static uint32_t moved(uint32_t place, uint32_t mask) {
  uint32_t low = mask & (~mask + 1); /* the part's lowest bit */
  uint32_t p = place ^ low;
  if ((p & mask) == 0) p = place ^ (low << 1);
  return p;
}

TEST(keys_carry_their_place) {
  char key[KEYLEN] = {0}, key2[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  void *p2 = export_new(PAGE, EXPORT_ANY, key2);
  key_rec k = key_decode(key);
  /* host, network and PID namespace are all readable here */
  CHECK(k.place & PLACE_HOST);
  CHECK(k.place & PLACE_NET);
  CHECK(k.place & PLACE_PID);
  CHECK_EQ(key_decode(key2).place, k.place);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtIpcMemClose(key2));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclrtFree(p2));
  CHECK_OK(aclFinalize());
}

/* The key of an exporter that cannot be reached, as it looks from another
 * host or namespace: its pid and nonce name no socket here. */
TEST(keys_from_elsewhere_say_where) {
  timeout_never(); /* refused for the reason named, not after a timeout: a wait for one would hang */
  char key[KEYLEN] = {0}, forged[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  key_rec k = key_decode(key);
  uint32_t here = k.place;
  k.pid = dead_pid();
  static const struct {
    uint32_t mask;
    const char *says;
  } parts[] = {{PLACE_HOST, "on another host"},
               {PLACE_NET, "in another network namespace"},
               {PLACE_PID, "in another PID namespace"}};
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
    k.place = moved(here, parts[i].mask);
    key_encode(&k, forged);
    void *q = NULL;
    CHECK_MSG(aclrtIpcMemImportByKey(&q, forged, 0), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, parts[i].says);
    CHECK(q == NULL);
    /* notify keys name their place the same way */
    memcpy(forged, "aipn2.", 6);
    aclrtNotify n = NULL;
    CHECK_MSG(aclrtNotifyImportByKey(&n, forged, 0), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, parts[i].says);
  }
  /* several parts differ: the host is named, the widest */
  k.place = moved(moved(here, PLACE_HOST), PLACE_NET);
  key_encode(&k, forged);
  void *q = NULL;
  CHECK_MSG(aclrtIpcMemImportByKey(&q, forged, 0), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "on another host");
  /* here: the exporter is gone */
  k.place = here;
  key_encode(&k, forged);
  CHECK_MSG(aclrtIpcMemImportByKey(&q, forged, 0), ACL_ERROR_RT_IPC_ERROR, "is gone");
  /* a part left unknown (0) where this process knows it: a key has one
   * spelling, this is not it */
  k.place = 0;
  key_encode(&k, forged);
  CHECK_MSG(aclrtIpcMemImportByKey(&q, forged, 0), ACL_ERROR_INVALID_PARAM, "damaged or forged");
  k.place = here & ~PLACE_NET;
  key_encode(&k, forged);
  CHECK_MSG(aclrtIpcMemImportByKey(&q, forged, 0), ACL_ERROR_INVALID_PARAM, "damaged or forged");
  /* this process's own key with another place is not its key */
  key_rec own = key_decode(key);
  own.place = moved(here, PLACE_PID);
  key_encode(&own, forged);
  CHECK_MSG(aclrtIpcMemImportByKey(&q, forged, 0), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "in another PID namespace");
  own.place = here & ~PLACE_PID;
  key_encode(&own, forged);
  CHECK_MSG(aclrtIpcMemImportByKey(&q, forged, 0), ACL_ERROR_INVALID_PARAM, "damaged or forged");
  CHECK_MSG(aclrtIpcMemClose(forged), ACL_ERROR_INVALID_PARAM, "neither");
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

/* A child in a namespace of its own (net or PID) tries the parent's key and
 * IPC event handle. */
typedef struct away {
  int flags;        /* CLONE_NEWNET or CLONE_NEWPID */
  const char *says; /* what the refusal must say */
} away;

static int import_here(chan *c, const away *a) {
  char key[KEYLEN] = {0};
  aclrtIpcEventHandle h;
  from_parent(c, key, KEYLEN);
  from_parent(c, &h, sizeof h);
  void *q = NULL;
  CHECK_MSG(aclrtIpcMemImportByKey(&q, key, 0), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, a->says);
  CHECK(q == NULL);
  aclrtEvent ev = NULL;
  CHECK_MSG(aclrtIpcOpenEventHandle(h, &ev), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, a->says);
  CHECK_OK(aclFinalize());
  return 0;
}

/* Exit status 77: the namespace could not be made (no privilege). */
static int import_away(chan *c, void *arg) {
  const away *a = arg;
  if (unshare(a->flags) != 0) return 77;
  if (a->flags != CLONE_NEWPID) return import_here(c, a);
  /* A new PID namespace holds this process's children, not itself. */
  int pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) _exit(import_here(c, a));
  int st = th_wait(pid);
  /* Its PID namespace died with the grandchild, its init: this process can
   * start no more processes, and LeakSanitizer's exit check needs to. */
  fflush(NULL);
  _exit(st);
}

static void try_from_away(int flags, const char *says, const char *what) {
  if (geteuid() != 0) {
    printf("  (skipped: needs root to make a %s)\n", what);
    return;
  }
  timeout_never(); /* the child's refusal is for its place, not a timeout: a wait for one would hang */
  char key[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  aclrtEvent ev;
  CHECK_OK(aclrtCreateEventExWithFlag(&ev, ACL_EVENT_IPC));
  aclrtIpcEventHandle h;
  CHECK_OK(aclrtIpcGetEventHandle(ev, &h));
  away a = {flags, says};
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, import_away, &a);
  to_child(&c, key, KEYLEN);
  to_child(&c, &h, sizeof h);
  int st = th_wait(pid);
  if (st == 77)
    printf("  (skipped: unshare refused to make a %s here)\n", what);
  else
    CHECK_EQ(st, 0);
  chan_close(&c);
  CHECK_OK(aclrtDestroyEvent(ev));
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

TEST(import_from_another_network_namespace) {
  try_from_away(CLONE_NEWNET, "in another network namespace", "network namespace");
}

TEST(import_from_another_pid_namespace) {
  try_from_away(CLONE_NEWPID, "in another PID namespace", "PID namespace");
}


