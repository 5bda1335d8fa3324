/* IPC between real processes (fork, and fork+exec): round trips, whitelist,
 * users, forged keys, close ordering, cross-device rules, attributes,
 * super-node ids, many importers, fork hygiene. */
#include <grp.h>
#include <pthread.h>
#include <stdio.h>

#include "ipc_util.h"

/* ---- fork+exec importer: this binary re-executed with AIPC_TEST_ROLE ---------- */

static int role_import_fill(const char *key, size_t size) {
  void *p = NULL;
  if (aclrtIpcMemImportByKey(&p, key, 0) != ACL_SUCCESS) return 10;
  if (!check_pattern(p, size, 1)) return 11;
  fill_pattern(p, size, 2);
  if (aclrtIpcMemClose(key) != ACL_SUCCESS) return 12;
  if (aclFinalize() != ACL_SUCCESS) return 13;
  return 0;
}

__attribute__((constructor)) static void role_dispatch(void) {
  const char *role = getenv("AIPC_TEST_ROLE");
  if (!role) return;
  const char *key = getenv("AIPC_TEST_KEY");
  size_t size = (size_t)strtoull(getenv("AIPC_TEST_SIZE") ? getenv("AIPC_TEST_SIZE") : "0", NULL, 10);
  if (strcmp(role, "import_fill") == 0) _exit(role_import_fill(key, size));
  _exit(99);
}

/* Forks a child that waits for a byte on a pipe, then execs this binary as
 * an importer of key. Returns its pid; *go is the pipe to release it. */
static int spawn_exec_importer(const char *key, size_t size, int *go) {
  /* the program itself (under valgrind, /proc/self/exe is the tool; readlink is not) */
  static char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(sl > 0);
  self[sl] = '\0';
  int fds[2];
  CHECK(pipe(fds) == 0);
  fflush(stdout);
  fflush(stderr);
  int pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    close(fds[1]);
    char b;
    if (read(fds[0], &b, 1) != 1) _exit(97);
    char sz[32] = {0};
    snprintf(sz, sizeof sz, "%zu", size);
    setenv("AIPC_TEST_ROLE", "import_fill", 1);
    setenv("AIPC_TEST_KEY", key, 1);
    setenv("AIPC_TEST_SIZE", sz, 1);
    execl(self, self, (char *)NULL);
    _exit(98);
  }
  close(fds[0]);
  *go = fds[1];
  return pid;
}

TEST(exec_importer_round_trip) {
  char key[KEYLEN] = {0};
  size_t size = 1 * MiB;
  void *p = export_new(size, EXPORT_DEFAULT, key);
  fill_pattern(p, size, 1);
  int go;
  int pid = spawn_exec_importer(key, size, &go);
  CHECK_OK(aclrtIpcMemSetImportPid(key, &pid, 1)); /* exec keeps the pid */
  th_write(go, "x", 1);
  close(go);
  CHECK_EQ(th_wait(pid), 0);
  CHECK(check_pattern(p, size, 2));
  /* a second exec'ed importer that nobody whitelisted is refused */
  pid = spawn_exec_importer(key, size, &go);
  th_write(go, "x", 1);
  close(go);
  CHECK_EQ(th_wait(pid), 10);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

TEST(exec_importer_any_pid) {
  char key[KEYLEN] = {0};
  size_t size = 256 * KiB;
  void *p = export_new(size, EXPORT_ANY, key);
  fill_pattern(p, size, 1);
  int go;
  int pid = spawn_exec_importer(key, size, &go);
  th_write(go, "x", 1);
  close(go);
  CHECK_EQ(th_wait(pid), 0);
  CHECK(check_pattern(p, size, 2));
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

/* ---- round trip ------------------------------------------------------------------ */

typedef struct rt_arg {
  size_t size;
  int sub; /* import the key twice */
} rt_arg;

static int rt_child(chan *c, void *arg) {
  rt_arg *a = arg;
  char key[KEYLEN] = {0};
  from_parent(c, key, KEYLEN);
  void *p = NULL, *p2 = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  CHECK(((uintptr_t)p & (PAGE - 1)) == 0);
  CHECK(check_pattern(p, a->size, 1)); /* the exporter's writes */
  fill_pattern(p, a->size, 2);        /* ours, seen by the exporter */
  CHECK_OK(aclrtIpcMemImportByKey(&p2, key, 0));
  CHECK(p2 != p);                      /* same key twice: a mapping of its own each time, as in CANN */
  CHECK(check_pattern(p2, a->size, 2)); /* over the same bytes */
  send_int(c->up[1], 1);
  CHECK_EQ(recv_int(c->down[0]), 2);
  CHECK(check_pattern(p, a->size, 3)); /* the exporter wrote again, no copy anywhere */
  CHECK(check_pattern(p2, a->size, 3));
  /* imported memory is not this process's to export */
  char k2[KEYLEN] = {0};
  CHECK_MSG(aclrtIpcMemGetExportKey(p, PAGE, k2, KEYLEN, 0), ACL_ERROR_INVALID_PARAM, "imported");
  CHECK_OK(aclrtIpcMemClose(key));     /* the oldest mapping (p) goes */
  CHECK(check_pattern(p2, a->size, 3)); /* the younger one stays */
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_MSG(aclrtIpcMemClose(key), ACL_ERROR_INVALID_PARAM, "neither");
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(round_trip_writes_seen_both_ways) {
  size_t sizes[] = {PAGE, 64 * KiB, 4 * MiB + PAGE};
  for (size_t i = 0; i < 3; i++) {
    char key[KEYLEN] = {0};
    rt_arg a = {sizes[i], 0};
    /* export a sub-range that starts one page into the block */
    char *blk = dmalloc(sizes[i] + PAGE);
    char *p = blk + PAGE;
    CHECK_OK(aclrtIpcMemGetExportKey(p, sizes[i], key, KEYLEN, EXPORT_ANY));
    fill_pattern(p, sizes[i], 1);
    chan c;
    chan_open(&c);
    int pid = chan_spawn(&c, rt_child, &a);
    to_child(&c, key, KEYLEN);
    CHECK_EQ(recv_int(c.up[0]), 1);
    CHECK(check_pattern(p, sizes[i], 2));
    fill_pattern(p, sizes[i], 3);
    send_int(c.down[1], 2);
    CHECK_EQ(th_wait(pid), 0);
    chan_close(&c);
    CHECK_OK(aclrtIpcMemClose(key));
    CHECK_OK(aclrtFree(blk));
  }
  CHECK_OK(aclFinalize());
}

/* ---- whitelist, users, forged keys ------------------------------------------------- */

static int try_import_child(chan *c, void *arg) {
  (void)arg;
  for (;;) {
    char key[KEYLEN] = {0};
    from_parent(c, key, KEYLEN);
    if (key[0] == 0) break;
    void *p = NULL;
    aclError r = aclrtIpcMemImportByKey(&p, key, 0);
    const char *m = aclGetRecentErrMsg();
    char msg[512] = "";
    if (m) snprintf(msg, sizeof msg, "%s", m);
    if (r == ACL_SUCCESS) { /* write and close before answering: the parent checks */
      ((volatile char *)p)[0] = 42;
      CHECK_OK(aclrtIpcMemClose(key));
    }
    send_int(c->up[1], r);
    th_write(c->up[1], msg, sizeof msg);
  }
  CHECK_OK(aclFinalize());
  return 0;
}

/* Asks the child to import key; returns its result and message. */
static int ask_import(chan *c, const char *key, char msg[512]) {
  char k[KEYLEN] = {0};
  snprintf(k, sizeof k, "%s", key);
  to_child(c, k, KEYLEN);
  int r = recv_int(c->up[0]);
  th_read(c->up[0], msg, 512);
  return r;
}

static void stop_child(chan *c, int pid) {
  char k[KEYLEN] = {0};
  to_child(c, k, KEYLEN);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(c);
}

TEST(whitelist_allow_and_deny) {
  char key[KEYLEN] = {0}, msg[512] = {0};
  char *p = export_new(PAGE, EXPORT_DEFAULT, key);
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, try_import_child, NULL);
  /* not on the (empty) whitelist */
  CHECK_EQ(ask_import(&c, key, msg), ACL_ERROR_RT_NO_PERMISSION);
  char pidtxt[32] = {0};
  snprintf(pidtxt, sizeof pidtxt, "process %d", pid);
  CHECK(strstr(msg, pidtxt) && strstr(msg, "whitelist"));
  /* someone else on it: still denied */
  int32_t others[2] = {pid + 100000 > 0 ? 1 : 1, 2};
  CHECK_OK(aclrtIpcMemSetImportPid(key, others, 2));
  CHECK_EQ(ask_import(&c, key, msg), ACL_ERROR_RT_NO_PERMISSION);
  /* now allowed */
  int32_t mine = pid;
  CHECK_OK(aclrtIpcMemSetImportPid(key, &mine, 1));
  CHECK_EQ(ask_import(&c, key, msg), ACL_SUCCESS);
  CHECK_EQ(p[0], 42);
  stop_child(&c, pid);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

TEST(disable_pid_validation_lets_any_process_in) {
  char key[KEYLEN] = {0}, msg[512] = {0};
  char *p = export_new(PAGE, EXPORT_ANY, key);
  for (int i = 0; i < 3; i++) {
    chan c;
    chan_open(&c);
    int pid = chan_spawn(&c, try_import_child, NULL);
    CHECK_EQ(ask_import(&c, key, msg), ACL_SUCCESS);
    stop_child(&c, pid);
  }
  CHECK_EQ(p[0], 42);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

static int other_user_child(chan *c, void *arg) {
  (void)arg;
  char key[KEYLEN] = {0};
  from_parent(c, key, KEYLEN);
  CHECK(setgroups(0, NULL) == 0);
  CHECK(setgid(65534) == 0);
  CHECK(setuid(65534) == 0);
  CHECK_EQ(geteuid(), 65534);
  void *p = NULL;
  CHECK_MSG(aclrtIpcMemImportByKey(&p, key, 0), ACL_ERROR_RT_NO_PERMISSION, "same user");
  CHECK(p == NULL);
  from_parent(c, key, KEYLEN); /* the whitelisted key */
  CHECK_MSG(aclrtIpcMemImportByKey(&p, key, 0), ACL_ERROR_RT_NO_PERMISSION, "uid 65534");
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(another_user_denied) {
  if (geteuid() != 0) {
    printf("  (skipped: needs root to run a child as nobody)\n");
    return;
  }
  char key[KEYLEN] = {0}, key2[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);       /* even with validation off */
  void *p2 = export_new(PAGE, EXPORT_DEFAULT, key2); /* even when whitelisted */
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, other_user_child, NULL);
  CHECK_OK(aclrtIpcMemSetImportPid(key2, &pid, 1));
  to_child(&c, key, KEYLEN);
  to_child(&c, key2, KEYLEN);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtIpcMemClose(key2));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclrtFree(p2));
  CHECK_OK(aclFinalize());
}

TEST(forged_keys_denied) {
  char key[KEYLEN] = {0}, key2[KEYLEN] = {0}, forged[KEYLEN] = {0}, msg[512] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  void *p2 = export_new(PAGE, EXPORT_ANY, key2);
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, try_import_child, NULL);
  char expect[128] = {0};
  snprintf(expect, sizeof expect, "key not exported by process %d (closed, never issued, or forged)", (int)getpid());
  /* right exporter, wrong secret */
  key_rec k = key_decode(key);
  k.secret[15] ^= 1;
  key_encode(&k, forged);
  CHECK_EQ(ask_import(&c, forged, msg), ACL_ERROR_RT_IPC_ERROR);
  CHECK(strstr(msg, expect));
  /* right secret, another export's id */
  k = key_decode(key);
  k.id = key_decode(key2).id;
  key_encode(&k, forged);
  CHECK_EQ(ask_import(&c, forged, msg), ACL_ERROR_RT_IPC_ERROR);
  CHECK(strstr(msg, expect));
  /* right secret, an id never issued: the same answer (no oracle) */
  k.id = 77777;
  key_encode(&k, forged);
  CHECK_EQ(ask_import(&c, forged, msg), ACL_ERROR_RT_IPC_ERROR);
  CHECK(strstr(msg, expect));
  /* the real key still works on the same connection, then is cached; a
   * forged key with the real id must not hit that cache */
  CHECK_EQ(ask_import(&c, key, msg), ACL_SUCCESS);
  k = key_decode(key);
  k.secret[0] ^= 0x80;
  key_encode(&k, forged);
  CHECK_EQ(ask_import(&c, forged, msg), ACL_ERROR_RT_IPC_ERROR);
  /* a closed key: refused at once */
  CHECK_OK(aclrtIpcMemClose(key2));
  CHECK_EQ(ask_import(&c, key2, msg), ACL_ERROR_RT_IPC_ERROR);
  stop_child(&c, pid);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclrtFree(p2));
  CHECK_OK(aclFinalize());
}

static int set_pid_child(chan *c, void *arg) {
  (void)arg;
  char key[KEYLEN] = {0};
  from_parent(c, key, KEYLEN);
  int32_t me = getpid();
  aclrtServerPid sp = {0, &me, 1};
  CHECK_MSG(aclrtIpcMemSetImportPid(key, &me, 1), ACL_ERROR_RT_NO_PERMISSION, "only the exporting process");
  CHECK_MSG(aclrtIpcMemImportPidInterServer(key, &sp, 1), ACL_ERROR_RT_NO_PERMISSION, "only the exporting");
  CHECK_MSG(aclrtIpcMemSetAttr(key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, 1), ACL_ERROR_RT_NO_PERMISSION,
            "only the exporting");
  CHECK_MSG(aclrtIpcMemClose(key), ACL_ERROR_INVALID_PARAM, "neither");
  void *p;
  CHECK_ACL(aclrtIpcMemImportByKey(&p, key, 0), ACL_ERROR_RT_NO_PERMISSION);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(only_the_exporter_changes_a_key) {
  char key[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_DEFAULT, key);
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, set_pid_child, NULL);
  to_child(&c, key, KEYLEN);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

/* ---- close ordering ------------------------------------------------------------------ */

static int hold_child(chan *c, void *arg) {
  (void)arg;
  char key[KEYLEN] = {0};
  from_parent(c, key, KEYLEN);
  void *p = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  void *p2 = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p2, key, 0));
  send_int(c->up[1], 1);
  CHECK_EQ(recv_int(c->down[0]), 2); /* the exporter closed (or tried to) */
  CHECK(check_pattern(p, 64 * KiB, 1)); /* still valid */
  fill_pattern(p, 64 * KiB, 2);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtIpcMemClose(key));
  send_int(c->up[1], 3);
  CHECK_EQ(recv_int(c->down[0]), 4);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(strict_close_with_live_importer_fails) {
  setenv("ASCEND_IPC_STRICT", "1", 1);
  char key[KEYLEN] = {0};
  void *p = export_new(64 * KiB, EXPORT_ANY, key);
  fill_pattern(p, 64 * KiB, 1);
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, hold_child, NULL);
  to_child(&c, key, KEYLEN);
  CHECK_EQ(recv_int(c.up[0]), 1);
  char who[64] = {0};
  snprintf(who, sizeof who, "%d", pid);
  CHECK_MSG(aclrtIpcMemClose(key), ACL_ERROR_RT_INTERNAL_ERROR, who);
  CHECK_MSG(aclrtFree(p), ACL_ERROR_RT_INTERNAL_ERROR, ""); /* still exported: strict free refused */
  /* the export stays open: more imports work */
  void *q;
  CHECK_OK(aclrtIpcMemImportByKey(&q, key, 0));
  CHECK_OK(aclrtIpcMemClose(key));
  send_int(c.down[1], 2);
  CHECK_EQ(recv_int(c.up[0]), 3);
  /* the importer closed (its RELEASE is queued): the strict close now succeeds at once */
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK(check_pattern(p, 64 * KiB, 2));
  CHECK_OK(aclrtFree(p));
  send_int(c.down[1], 4);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclFinalize());
}

TEST(default_close_keeps_memory_for_importers) {
  char key[KEYLEN] = {0}, msg[512] = {0};
  size_t total0 = 0, free0 = 0, free1 = 0;
  CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free0, &total0));
  void *p = export_new(64 * KiB, EXPORT_ANY, key);
  fill_pattern(p, 64 * KiB, 1);
  chan c, c2;
  chan_open(&c);
  int pid = chan_spawn(&c, hold_child, NULL);
  chan_open(&c2);
  int pid2 = chan_spawn(&c2, try_import_child, NULL);
  to_child(&c, key, KEYLEN);
  CHECK_EQ(recv_int(c.up[0]), 1);
  CHECK_OK(aclrtIpcMemClose(key)); /* with an importer: allowed, memory kept */
  CHECK_OK(aclrtFree(p));          /* deferred: the importer still uses it */
  CHECK_MSG(aclrtIpcMemClose(key), ACL_ERROR_INVALID_PARAM, "already closed");
  /* new imports are refused at once */
  CHECK_EQ(ask_import(&c2, key, msg), ACL_ERROR_RT_IPC_ERROR);
  CHECK(strstr(msg, "closed"));
  send_int(c.down[1], 2); /* the importer checks and writes its memory */
  CHECK_EQ(recv_int(c.up[0]), 3);
  /* the last importer closed: the exporter releases the block soon (however
   * late on a loaded machine; a never runs into the harness's time limit) */
  for (;;) {
    CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free1, &total0));
    if (free1 == free0) break;
    usleep(1000);
  }
  send_int(c.down[1], 4);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  stop_child(&c2, pid2);
  CHECK_OK(aclFinalize());
}

/* ---- cross-device rules -------------------------------------------------------------- */

typedef struct xdev_arg {
  int device;
} xdev_arg;

static int xdev_child(chan *c, void *arg) {
  xdev_arg *a = arg;
  char key[KEYLEN] = {0};
  from_parent(c, key, KEYLEN);
  CHECK_OK(aclrtSetDevice(a->device));
  void *imp = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&imp, key, ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS));
  void *local = dmalloc(64 * KiB);
  char *host = NULL;
  CHECK_OK(aclrtMallocHost((void **)&host, 64 * KiB));
  aclrtStream s;
  CHECK_OK(aclrtCreateStream(&s));
  if (a->device != 0) {
    /* importer on another device than the exporter (0) */
    CHECK_ACL(aclrtMemcpy(local, 64 * KiB, imp, 64 * KiB, ACL_MEMCPY_DEFAULT), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    CHECK_ACL(aclrtMemcpy(host, 64 * KiB, imp, 64 * KiB, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    CHECK_ACL(aclrtMemcpy(imp, 64 * KiB, host, 64 * KiB, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    CHECK_ACL(aclrtMemcpy(local, 64 * KiB, imp, 64 * KiB, ACL_MEMCPY_DEVICE_TO_DEVICE), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    CHECK_ACL(aclrtMemcpyAsync(host, 64 * KiB, imp, 64 * KiB, ACL_MEMCPY_DEVICE_TO_HOST, s),
              ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    /* asynchronous device-to-device on a stream works, both ways */
    CHECK_OK(aclrtMemcpyAsync(local, 64 * KiB, imp, 64 * KiB, ACL_MEMCPY_DEVICE_TO_DEVICE, s));
    CHECK_OK(aclrtSynchronizeStream(s));
    CHECK(check_pattern(local, 64 * KiB, 1));
    fill_pattern(local, 64 * KiB, 2);
    CHECK_OK(aclrtMemcpyAsync(imp, 64 * KiB, local, 64 * KiB, ACL_MEMCPY_DEVICE_TO_DEVICE, s));
    CHECK_OK(aclrtSynchronizeStream(s));
  } else {
    /* same device: no such limits */
    CHECK_OK(aclrtMemcpy(host, 64 * KiB, imp, 64 * KiB, ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(check_pattern(host, 64 * KiB, 1));
    CHECK_OK(aclrtMemcpy(local, 64 * KiB, imp, 64 * KiB, ACL_MEMCPY_DEVICE_TO_DEVICE));
    CHECK_OK(aclrtMemcpy(local, 64 * KiB, imp, 64 * KiB, ACL_MEMCPY_DEFAULT));
    fill_pattern(host, 64 * KiB, 2);
    CHECK_OK(aclrtMemcpy(imp, 64 * KiB, host, 64 * KiB, ACL_MEMCPY_HOST_TO_DEVICE));
  }
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(local));
  CHECK_OK(aclrtFreeHost(host));
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(cross_device_memcpy_rules) {
  for (int dev = 0; dev < 2; dev++) {
    char key[KEYLEN] = {0};
    void *p = export_new(64 * KiB, EXPORT_ANY, key); /* device 0 */
    fill_pattern(p, 64 * KiB, 1);
    xdev_arg a = {dev == 0 ? 0 : 3};
    chan c;
    chan_open(&c);
    int pid = chan_spawn(&c, xdev_child, &a);
    to_child(&c, key, KEYLEN);
    CHECK_EQ(th_wait(pid), 0);
    chan_close(&c);
    CHECK(check_pattern(p, 64 * KiB, 2));
    CHECK_OK(aclrtIpcMemClose(key));
    CHECK_OK(aclrtFree(p));
  }
  CHECK_OK(aclFinalize());
}

/* ---- attributes after import; super-node ids ------------------------------------------- */

TEST(set_attr_frozen_by_a_remote_import) {
  char key[KEYLEN] = {0}, msg[512] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  CHECK_OK(aclrtIpcMemSetAttr(key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_HCCS));
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, try_import_child, NULL);
  CHECK_EQ(ask_import(&c, key, msg), ACL_SUCCESS);
  CHECK_MSG(aclrtIpcMemSetAttr(key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, 0), ACL_ERROR_INVALID_PARAM, "already imported");
  stop_child(&c, pid);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

static int sdid_child(chan *c, void *arg) {
  const char *sdid = arg;
  setenv("ASCEND_IPC_SDID", sdid, 1); /* before this process's first runtime call */
  send_int(c->up[1], getpid());
  char key[KEYLEN] = {0};
  from_parent(c, key, KEYLEN);
  void *p = NULL;
  aclError r = aclrtIpcMemImportByKey(&p, key, 0);
  const char *m = aclGetRecentErrMsg();
  if (r != ACL_SUCCESS && m) fprintf(stderr, "  child (sdid %s): %s\n", sdid, m);
  if (r == ACL_SUCCESS) {
    ((volatile char *)p)[1] = 7;
    CHECK_OK(aclrtIpcMemClose(key));
  }
  CHECK_OK(aclFinalize());
  return r == ACL_SUCCESS ? 0 : r == ACL_ERROR_RT_FEATURE_NOT_SUPPORT ? 2 : r == ACL_ERROR_RT_NO_PERMISSION ? 3 : 4;
}

TEST(import_pid_inter_server_and_sdid) {
  /* children first, so each reads its own ASCEND_IPC_SDID */
  chan ca, cb, cc;
  chan_open(&ca);
  chan_open(&cb);
  chan_open(&cc);
  int a = chan_spawn(&ca, sdid_child, "5"); /* this server, whitelisted via sdid 5 */
  int b = chan_spawn(&cb, sdid_child, "7"); /* another server */
  int x = chan_spawn(&cc, sdid_child, "5"); /* this server, not whitelisted */
  CHECK_EQ(recv_int(ca.up[0]), a);
  CHECK_EQ(recv_int(cb.up[0]), b);
  CHECK_EQ(recv_int(cc.up[0]), x);
  setenv("ASCEND_IPC_SDID", "5", 1);
  char key[KEYLEN] = {0};
  char *p = export_new(PAGE, EXPORT_DEFAULT, key);
  int32_t here[1] = {a}, there[2] = {b, 12345};
  aclrtServerPid sp[2] = {{5, here, 1}, {7, there, 2}};
  CHECK_OK(aclrtIpcMemImportPidInterServer(key, sp, 2));
  to_child(&ca, key, KEYLEN);
  to_child(&cb, key, KEYLEN);
  to_child(&cc, key, KEYLEN);
  CHECK_EQ(th_wait(a), 0);
  CHECK_EQ(th_wait(b), 2); /* ACL_ERROR_RT_FEATURE_NOT_SUPPORT */
  CHECK_EQ(th_wait(x), 3); /* ACL_ERROR_RT_NO_PERMISSION */
  CHECK_EQ(p[1], 7);
  chan_close(&ca);
  chan_close(&cb);
  chan_close(&cc);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

/* ---- many importers ------------------------------------------------------------------- */

typedef struct slice_arg {
  int index, n;
  size_t size;
} slice_arg;

static int slice_child(chan *c, void *arg) {
  slice_arg *a = arg;
  char key[KEYLEN] = {0};
  from_parent(c, key, KEYLEN); /* all children get it at about the same time */
  void *p = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  size_t slice = a->size / (size_t)a->n;
  memset((char *)p + slice * (size_t)a->index, 0x10 + a->index, slice);
  send_int(c->up[1], 1);
  CHECK_EQ(recv_int(c->down[0]), 2); /* hold the import until everyone has one */
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclFinalize());
  return 0;
}

static void many_importers(int n, size_t size) {
  setenv("ASCEND_IPC_STRICT", "1", 1);
  char key[KEYLEN] = {0};
  char *p = export_new(size, EXPORT_DEFAULT, key);
  memset(p, 0, size);
  chan *cs = calloc((size_t)n, sizeof *cs);
  int *pids = calloc((size_t)n, sizeof *pids);
  slice_arg *args = calloc((size_t)n, sizeof *args);
  for (int i = 0; i < n; i++) {
    args[i] = (slice_arg){i, n, size};
    chan_open(&cs[i]);
    pids[i] = chan_spawn(&cs[i], slice_child, &args[i]);
  }
  CHECK_OK(aclrtIpcMemSetImportPid(key, pids, (size_t)n));
  for (int i = 0; i < n; i++) to_child(&cs[i], key, KEYLEN);
  for (int i = 0; i < n; i++) CHECK_EQ(recv_int(cs[i].up[0]), 1);
  /* all n hold it now */
  char who[32] = {0};
  snprintf(who, sizeof who, "%d", pids[0]);
  CHECK_MSG(aclrtIpcMemClose(key), ACL_ERROR_RT_INTERNAL_ERROR, "still imported");
  size_t slice = size / (size_t)n;
  for (int i = 0; i < n; i++)
    for (size_t j = 0; j < slice; j++) CHECK_EQ((unsigned char)p[slice * (size_t)i + j], 0x10 + i);
  for (int i = 0; i < n; i++) send_int(cs[i].down[1], 2);
  for (int i = 0; i < n; i++) {
    CHECK_EQ(th_wait(pids[i]), 0);
    chan_close(&cs[i]);
  }
  CHECK_OK(aclrtIpcMemClose(key)); /* strict: every importer closed */
  CHECK_OK(aclrtFree(p));
  free(cs);
  free(pids);
  free(args);
  CHECK_OK(aclFinalize());
}

TEST(eight_processes_import_concurrently) { many_importers(8, 8 * 64 * KiB); }

TEST(sixty_four_importers_at_once) { many_importers(64, 64 * 16 * KiB); }

/* ---- fork hygiene ----------------------------------------------------------------------- */

static int fork_child_body(chan *c, void *arg) {
  const char *key = arg; /* the parent's key, inherited */
  int32_t me = getpid();
  /* the child does not inherit the parent's export */
  CHECK_MSG(aclrtIpcMemSetImportPid(key, &me, 1), ACL_ERROR_RT_NO_PERMISSION, "only the exporting process");
  CHECK_MSG(aclrtIpcMemClose(key), ACL_ERROR_INVALID_PARAM, "neither");
  /* it is an ordinary importer of its parent's key */
  void *p = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  ((volatile char *)p)[5] = 55;
  CHECK_OK(aclrtIpcMemClose(key));
  /* and exports under its own name */
  char k2[KEYLEN] = {0};
  void *q = export_new(PAGE, EXPORT_ANY, k2);
  key_rec r = key_decode(k2), pr = key_decode(key);
  CHECK_EQ(r.pid, getpid());
  CHECK(r.nonce != pr.nonce);
  CHECK_OK(aclrtIpcMemClose(k2));
  CHECK_OK(aclrtFree(q));
  send_int(c->up[1], 1);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(fork_child_does_not_inherit_exports) {
  char key[KEYLEN] = {0};
  char *p = export_new(PAGE, EXPORT_ANY, key);
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, fork_child_body, key);
  CHECK_EQ(recv_int(c.up[0]), 1);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_EQ(p[5], 55);
  /* the parent's export is untouched by the child's exit */
  void *q;
  CHECK_OK(aclrtIpcMemImportByKey(&q, key, 0));
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

static int grandchild_sleep(void *arg) {
  /* fork() has returned here, so the runtime's atfork handlers have run */
  send_int(*(int *)arg, 1);
  pause(); /* holds whatever it inherited */
  return 0;
}

static int exporter_with_child(chan *c, void *arg) {
  (void)arg;
  char key[KEYLEN] = {0};
  export_new(PAGE, EXPORT_ANY, key);
  int ready[2];
  CHECK(pipe(ready) == 0);
  int gc = th_spawn(grandchild_sleep, &ready[1]); /* inherits the parent's fds, minus what atfork closed */
  CHECK_EQ(recv_int(ready[0]), 1);
  close(ready[0]);
  close(ready[1]);
  send_int(c->up[1], gc);
  to_parent(c, key, KEYLEN);
  pause(); /* killed by the test */
  return 0;
}

TEST(dead_exporter_not_kept_reachable_by_its_fork_child) {
  timeout_never(); /* refused at once, not after a timeout: a wait for one would hang */
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, exporter_with_child, NULL);
  int gc = recv_int(c.up[0]);
  char key[KEYLEN] = {0};
  from_child(&c, key, KEYLEN);
  kill(pid, SIGKILL);
  CHECK_EQ(th_wait(pid), 128 + SIGKILL);
  CHECK(kill(gc, 0) == 0); /* the forked child still lives */
  void *p = NULL;
  CHECK_MSG(aclrtIpcMemImportByKey(&p, key, 0), ACL_ERROR_RT_IPC_ERROR, "gone");
  kill(gc, SIGKILL);
  waitpid(gc, NULL, 0); /* reparented to us? only if we are its subreaper; harmless otherwise */
  chan_close(&c);
  CHECK_OK(aclFinalize());
}

/* ---- overlapping exports ---------------------------------------------------------- */

static int overlap_child(chan *c, void *arg) {
  (void)arg;
  char k1[KEYLEN] = {0}, k2[KEYLEN] = {0};
  from_parent(c, k1, KEYLEN);
  from_parent(c, k2, KEYLEN);
  char *a = NULL, *b = NULL;
  CHECK_OK(aclrtIpcMemImportByKey((void **)&a, k1, 0)); /* pages 0-1 of the block */
  CHECK_OK(aclrtIpcMemImportByKey((void **)&b, k2, 0)); /* pages 1-2: overlaps the first */
  /* two imports, two registered ranges that must not collide */
  CHECK(b + 2 * PAGE <= a || a + 2 * PAGE <= b);
  CHECK_EQ(a[PAGE], 11);
  CHECK_EQ(b[0], 11);
  a[PAGE + 1] = 22; /* the same byte, seen through the other import */
  CHECK_EQ(((volatile char *)b)[1], 22);
  void *host = NULL;
  CHECK_OK(aclrtMallocHost(&host, 2 * PAGE));
  CHECK_OK(aclrtMemcpy(host, 2 * PAGE, b, 2 * PAGE, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK_EQ(((char *)host)[1], 22);
  CHECK_OK(aclrtIpcMemClose(k1));
  CHECK_EQ(((volatile char *)b)[0], 11); /* the other one is unaffected */
  CHECK_OK(aclrtIpcMemClose(k2));
  CHECK_OK(aclrtFreeHost(host));
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(overlapping_exports_imported_together) {
  setenv("ASCEND_IPC_STRICT", "1", 1);
  char k1[KEYLEN] = {0}, k2[KEYLEN] = {0};
  char *p = dmalloc(4 * PAGE);
  memset(p, 0, 4 * PAGE);
  p[PAGE] = 11;
  CHECK_OK(aclrtIpcMemGetExportKey(p, 2 * PAGE, k1, KEYLEN, EXPORT_ANY));
  CHECK_OK(aclrtIpcMemGetExportKey(p + PAGE, 2 * PAGE, k2, KEYLEN, EXPORT_ANY));
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, overlap_child, NULL);
  to_child(&c, k1, KEYLEN);
  to_child(&c, k2, KEYLEN);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_EQ(p[PAGE + 1], 22);
  CHECK_OK(aclrtIpcMemClose(k1)); /* strict: both released */
  CHECK_OK(aclrtIpcMemClose(k2));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}
