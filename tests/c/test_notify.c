/* Notifies and IPC notifies: CANN's rules for each call, one record per
 * wait, stream order proven with long queued work, and sharing between real
 * processes with and without the whitelist. */
#include "ipc_util.h"

static size_t big(void) { return under_valgrind() ? 16 * MiB : 256 * MiB; }

static aclrtNotify notify_new(void) {
  aclrtNotify n = NULL;
  CHECK_OK(aclrtCreateNotify(&n, ACL_NOTIFY_DEFAULT));
  CHECK(n != NULL);
  return n;
}

TEST(argument_rules) {
  aclrtNotify n, dev_only;
  int not_a_notify = 0;
  char key[KEYLEN];
  uint32_t id;
  CHECK_ACL(aclrtCreateNotify(NULL, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtCreateNotify(&n, 2), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_OK(aclrtCreateNotify(&dev_only, ACL_NOTIFY_DEVICE_USE_ONLY));
  CHECK_MSG(aclrtRecordNotify(dev_only, NULL), ACL_ERROR_RT_PARAM_INVALID, "DEVICE_USE_ONLY");
  n = notify_new();
  CHECK_ACL(aclrtDestroyNotify(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtDestroyNotify(&not_a_notify), ACL_ERROR_INVALID_PARAM, "not a live notify");
  CHECK_ACL(aclrtRecordNotify(&not_a_notify, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtRecordNotify(n, &not_a_notify), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtGetNotifyId(n, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtGetNotifyId(n, &id));
  uint32_t id2;
  CHECK_OK(aclrtGetNotifyId(dev_only, &id2));
  CHECK(id != id2);
  CHECK_ACL(aclrtNotifyGetExportKey(n, NULL, KEYLEN, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtNotifyGetExportKey(n, key, 0, 0), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_MSG(aclrtNotifyGetExportKey(n, key, KEYLEN - 1, 0), ACL_ERROR_INVALID_PARAM, "at least 65");
  CHECK_MSG(aclrtNotifyGetExportKey(n, key, KEYLEN, 1), ACL_ERROR_RT_PARAM_INVALID, "DISABLE_PID_VALIDATION");
  int32_t pid = getpid();
  CHECK_MSG(aclrtNotifySetImportPid(n, &pid, 1), ACL_ERROR_RT_PARAM_INVALID, "aclrtNotifyGetExportKey first");
  CHECK_OK(aclrtNotifyGetExportKey(n, key, KEYLEN, 0));
  CHECK(strncmp(key, "aipn2.", 6) == 0 && strlen(key) == KEY_CHARS);
  CHECK_MSG(aclrtNotifyGetExportKey(n, key, KEYLEN, 0), ACL_ERROR_RT_INTERNAL_ERROR, "already an IPC notify");
  CHECK_ACL(aclrtNotifySetImportPid(n, NULL, 1), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtNotifySetImportPid(n, &pid, 0), ACL_ERROR_RT_PARAM_INVALID);
  int32_t bad = -3;
  CHECK_ACL(aclrtNotifySetImportPid(n, &bad, 1), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_OK(aclrtNotifySetImportPid(n, &pid, 1));
  int32_t two[2] = {pid, pid};
  aclrtServerPid sp = {0, two, 2};
  CHECK_MSG(aclrtNotifySetImportPidInterServer(n, &sp, 1), ACL_ERROR_RT_PARAM_INVALID, "one process");
  sp.num = 1;
  CHECK_OK(aclrtNotifySetImportPidInterServer(n, &sp, 1));
  CHECK_ACL(aclrtNotifySetImportPidInterServer(n, NULL, 1), ACL_ERROR_RT_PARAM_INVALID);
  aclrtNotify imp;
  CHECK_ACL(aclrtNotifyImportByKey(NULL, key, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtNotifyImportByKey(&imp, NULL, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtNotifyImportByKey(&imp, key, 4), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_ACL(aclrtNotifyImportByKey(&imp, "aipn2.nonsense", 0), ACL_ERROR_INVALID_PARAM);
  /* the kinds of key do not mix */
  void *q;
  CHECK_MSG(aclrtIpcMemImportByKey(&q, key, 0), ACL_ERROR_INVALID_PARAM, "IPC notify key");
  char mkey[KEYLEN];
  void *p = export_new(PAGE, EXPORT_ANY, mkey);
  CHECK_MSG(aclrtNotifyImportByKey(&imp, mkey, 0), ACL_ERROR_INVALID_PARAM, "IPC memory key");
  /* relabelled: the exporter checks what the key names, whatever its prefix says */
  char relabel[KEYLEN];
  strcpy(relabel, mkey);
  memcpy(relabel, "aipn2.", 6);
  CHECK_MSG(aclrtNotifyImportByKey(&imp, relabel, 0), ACL_ERROR_INVALID_PARAM, "not an IPC notify key");
  CHECK_OK(aclrtIpcMemClose(mkey));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclrtDestroyNotify(n));
  CHECK_OK(aclrtDestroyNotify(dev_only));
  CHECK_OK(aclFinalize());
}

TEST(one_record_releases_one_wait) {
  aclrtNotify n = notify_new();
  aclrtStream waiter = stream_new();
  unsigned char *b = dmalloc(PAGE);
  CHECK_OK(aclrtRecordNotify(n, NULL));
  CHECK_OK(aclrtRecordNotify(n, NULL)); /* the flag is up already: records do not add up */
  CHECK_OK(aclrtSynchronizeStream(NULL));
  CHECK_OK(aclrtWaitAndResetNotify(n, waiter, 0));
  CHECK_OK(aclrtMemsetAsync(b, PAGE, 1, PAGE, waiter));
  CHECK_OK(aclrtSynchronizeStream(waiter));
  CHECK_EQ(b[0], 1);
  CHECK_OK(aclrtWaitAndResetNotify(n, waiter, 1)); /* nothing left: times out after 1 s */
  CHECK_OK(aclrtMemsetAsync(b, PAGE, 2, PAGE, waiter));
  CHECK_MSG(aclrtSynchronizeStream(waiter), ACL_ERROR_RT_WAIT_TIMEOUT, "within 1 s");
  CHECK_EQ(b[0], 2); /* ACL_CONTINUE_ON_FAILURE (the default): the work behind the failed wait ran */
  CHECK_OK(aclrtDestroyStream(waiter));
  CHECK_OK(aclrtDestroyNotify(n));
  CHECK_OK(aclrtFree(b));
  CHECK_OK(aclFinalize());
}

TEST(wait_queued_before_the_record_holds_the_stream) {
  size_t n = big();
  unsigned char *a = dmalloc(n);
  CHECK_OK(aclrtMemset(a, n, 0, n));
  aclrtNotify nt = notify_new();
  aclrtStream s1 = stream_new(), s2 = stream_new();
  unsigned char host[PAGE];
  for (int round = 1; round <= 3; round++) {
    /* CANN's own order: the wait is queued first */
    CHECK_OK(aclrtWaitAndResetNotify(nt, s2, 0));
    CHECK_OK(aclrtMemcpyAsync(host, PAGE, a + n - PAGE, PAGE, ACL_MEMCPY_DEVICE_TO_HOST, s2));
    CHECK_OK(aclrtMemsetAsync(a, n, round, n, s1));
    CHECK_OK(aclrtRecordNotify(nt, s1));
    CHECK_OK(aclrtSynchronizeStream(s1));
    CHECK_OK(aclrtSynchronizeStream(s2));
    for (size_t i = 0; i < PAGE; i++) CHECK_EQ(host[i], round);
  }
  CHECK_OK(aclrtSetDevice(1));
  aclrtStream other = stream_new();
  CHECK_MSG(aclrtWaitAndResetNotify(nt, other, 0), ACL_ERROR_RT_PARAM_INVALID, "device 0");
  CHECK_OK(aclrtRecordNotify(nt, other)); /* records may come from any device */
  CHECK_OK(aclrtDestroyStream(other));
  CHECK_OK(aclrtSetDevice(0));
  CHECK_OK(aclrtDestroyNotify(nt));
  CHECK_OK(aclrtDestroyStream(s1));
  CHECK_OK(aclrtDestroyStream(s2));
  CHECK_OK(aclrtFree(a));
  CHECK_OK(aclFinalize());
}

/* The CANN samples' shape: the importer (device 3) writes the exporter's
 * memory and records; the exporter (device 2) waits, then reads. */
typedef struct share_arg {
  size_t n;
  int whitelist;
} share_arg;

static int notify_importer(chan *c, void *arg) {
  share_arg *a = arg;
  CHECK_OK(aclrtSetDevice(3));
  char mkey[KEYLEN], nkey[KEYLEN];
  from_parent(c, mkey, KEYLEN);
  from_parent(c, nkey, KEYLEN);
  aclrtNotify n;
  if (a->whitelist) {
    CHECK_MSG(aclrtNotifyImportByKey(&n, nkey, 0), ACL_ERROR_RT_NO_PERMISSION, "whitelist");
    send_int(c->up[1], 0);             /* please whitelist me */
    CHECK_EQ(recv_int(c->down[0]), 1); /* done */
  }
  CHECK_OK(aclrtNotifyImportByKey(&n, nkey, ACL_RT_NOTIFY_IMPORT_FLAG_ENABLE_PEER_ACCESS));
  unsigned char *p;
  CHECK_OK(aclrtIpcMemImportByKey((void **)&p, mkey, ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS));
  aclrtStream s = stream_new();
  CHECK_MSG(aclrtWaitAndResetNotify(n, s, 0), ACL_ERROR_RT_PARAM_INVALID, "the importer records");
  uint32_t id, theirs;
  CHECK_OK(aclrtGetNotifyId(n, &id));
  from_parent(c, &theirs, sizeof theirs);
  CHECK_EQ(id, theirs); /* the creator's id */
  for (int round = 1; round <= 3; round++) {
    CHECK_EQ(recv_int(c->down[0]), round); /* the exporter queued its wait */
    CHECK_OK(aclrtMemsetAsync(p, a->n, 0x60 + round, a->n, s));
    CHECK_OK(aclrtRecordNotify(n, s));
  }
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtIpcMemClose(mkey));
  CHECK_OK(aclrtDestroyNotify(n));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclFinalize());
  return 0;
}

static void share_between_processes(int whitelist) {
  size_t n = big();
  CHECK_OK(aclrtSetDevice(2));
  char mkey[KEYLEN] = {0}, nkey[KEYLEN] = {0};
  unsigned char *p = export_new(n, EXPORT_ANY, mkey);
  CHECK_OK(aclrtMemset(p, n, 0, n));
  aclrtNotify nt = notify_new();
  CHECK_OK(aclrtNotifyGetExportKey(nt, nkey, KEYLEN,
                                   whitelist ? ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT
                                             : ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION));
  share_arg a = {n, whitelist};
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, notify_importer, &a);
  to_child(&c, mkey, KEYLEN);
  to_child(&c, nkey, KEYLEN);
  if (whitelist) {
    CHECK_EQ(recv_int(c.up[0]), 0);
    int32_t p32 = pid;
    CHECK_OK(aclrtNotifySetImportPid(nt, &p32, 1));
    send_int(c.down[1], 1);
  }
  uint32_t id;
  CHECK_OK(aclrtGetNotifyId(nt, &id));
  to_child(&c, &id, sizeof id);
  aclrtStream s = stream_new();
  for (int round = 1; round <= 3; round++) {
    unsigned char host[PAGE];
    CHECK_OK(aclrtWaitAndResetNotify(nt, s, 0));
    CHECK_OK(aclrtMemcpyAsync(host, PAGE, p + n - PAGE, PAGE, ACL_MEMCPY_DEVICE_TO_HOST, s));
    send_int(c.down[1], round);
    CHECK_OK(aclrtSynchronizeStream(s));
    for (size_t i = 0; i < PAGE; i++) CHECK_EQ(host[i], 0x60 + round);
  }
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclrtDestroyNotify(nt));
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtIpcMemClose(mkey));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

TEST(ipc_notify_with_whitelist) { share_between_processes(1); }
TEST(ipc_notify_without_whitelist) { share_between_processes(0); }

static int import_expect(chan *c, void *arg) {
  aclError want = *(aclError *)arg;
  char key[KEYLEN];
  from_parent(c, key, KEYLEN);
  aclrtNotify n;
  CHECK_ACL(aclrtNotifyImportByKey(&n, key, 0), want);
  if (want == ACL_SUCCESS) CHECK_OK(aclrtDestroyNotify(n));
  CHECK_OK(aclFinalize());
  return 0;
}

static void import_in_child(const char *key, aclError want) {
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, import_expect, &want);
  char k[KEYLEN] = {0};
  strncpy(k, key, KEYLEN - 1);
  to_child(&c, k, KEYLEN);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
}

TEST(forged_and_stale_keys_are_refused) {
  aclrtNotify nt = notify_new();
  char key[KEYLEN] = {0};
  CHECK_OK(aclrtNotifyGetExportKey(nt, key, KEYLEN, ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION));
  import_in_child(key, ACL_SUCCESS);
  char forged[KEYLEN];
  strcpy(forged, key);
  forged[40] = forged[40] == 'A' ? 'B' : 'A';
  import_in_child(forged, ACL_ERROR_RT_IPC_ERROR);
  /* CANN: the creator must not destroy before the importer imports */
  CHECK_OK(aclrtDestroyNotify(nt));
  import_in_child(key, ACL_ERROR_RT_IPC_ERROR);
  CHECK_OK(aclFinalize());
}
