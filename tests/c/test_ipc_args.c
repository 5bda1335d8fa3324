/* IPC calls in one process: every bad argument, key parsing, SetAttr and
 * whitelist rules, importing one's own key, close bookkeeping. */
#include <sys/random.h>

#include "ipc_util.h"

/* A buffer whose last byte is followed by an inaccessible page, so a read
 * past n bytes crashes the test instead of going unnoticed. */
typedef struct guarded {
  uint8_t *map;
  size_t maplen;
} guarded;

static char *guard_buf(guarded *gb, size_t n) {
  gb->maplen = 3 * PAGE;
  gb->map = mmap(NULL, gb->maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(gb->map != MAP_FAILED);
  CHECK(mprotect(gb->map + 2 * PAGE, PAGE, PROT_NONE) == 0);
  return (char *)gb->map + 2 * PAGE - n;
}

static void guard_free(guarded *gb) { munmap(gb->map, gb->maplen); }

/* ---- aclrtIpcMemGetExportKey -------------------------------------------- */

TEST(export_bad_args) {
  setenv("ASCEND_IPC_STRICT", "1", 1); /* so a stray pin would make aclrtFree fail below */
  char key[KEYLEN + 8] = {0};
  void *p = dmalloc(16 * KiB);
  void *host = NULL;
  CHECK_OK(aclrtMallocHost(&host, 16 * KiB));
  int on_stack[2048];
  memset(key, 'Z', sizeof key);
  CHECK_MSG(aclrtIpcMemGetExportKey(NULL, PAGE, key, KEYLEN, 0), ACL_ERROR_INVALID_PARAM, "devPtr is NULL");
  CHECK_MSG(aclrtIpcMemGetExportKey(p, PAGE, NULL, KEYLEN, 0), ACL_ERROR_INVALID_PARAM, "key is NULL");
  CHECK_MSG(aclrtIpcMemGetExportKey(p, PAGE, key, 64, 0), ACL_ERROR_INVALID_PARAM, "len");
  CHECK_MSG(aclrtIpcMemGetExportKey(p, PAGE, key, 0, 0), ACL_ERROR_INVALID_PARAM, "len");
  CHECK_MSG(aclrtIpcMemGetExportKey(p, PAGE, key, KEYLEN, 2), ACL_ERROR_INVALID_PARAM, "flags");
  CHECK_MSG(aclrtIpcMemGetExportKey(p, PAGE, key, KEYLEN, UINT64_MAX), ACL_ERROR_INVALID_PARAM, "flags");
  CHECK_MSG(aclrtIpcMemGetExportKey(p, 0, key, KEYLEN, 0), ACL_ERROR_INVALID_PARAM, "size is 0");
  CHECK_MSG(aclrtIpcMemGetExportKey((char *)p + 1, PAGE, key, KEYLEN, 0), ACL_ERROR_INVALID_PARAM, "aligned");
  CHECK_MSG(aclrtIpcMemGetExportKey((char *)p + 64, PAGE, key, KEYLEN, 0), ACL_ERROR_INVALID_PARAM, "aligned");
  CHECK_MSG(aclrtIpcMemGetExportKey(p, PAGE - 1, key, KEYLEN, 0), ACL_ERROR_INVALID_PARAM, "multiple");
  CHECK_MSG(aclrtIpcMemGetExportKey(p, PAGE + 1, key, KEYLEN, 0), ACL_ERROR_INVALID_PARAM, "multiple");
  CHECK_MSG(aclrtIpcMemGetExportKey(p, 20 * KiB, key, KEYLEN, 0), ACL_ERROR_INVALID_PARAM, "overruns");
  CHECK_MSG(aclrtIpcMemGetExportKey((char *)p + 12 * KiB, 8 * KiB, key, KEYLEN, 0), ACL_ERROR_INVALID_PARAM,
            "overruns");
  CHECK_MSG(aclrtIpcMemGetExportKey(p, SIZE_MAX & ~(PAGE - 1), key, KEYLEN, 0), ACL_ERROR_INVALID_PARAM, "overruns");
  CHECK_MSG(aclrtIpcMemGetExportKey(host, PAGE, key, KEYLEN, 0), ACL_ERROR_INVALID_PARAM, "host memory");
  void *stack_page = (void *)(((uintptr_t)on_stack + PAGE - 1) & ~(PAGE - 1));
  CHECK_MSG(aclrtIpcMemGetExportKey(stack_page, PAGE, key, KEYLEN, 0), ACL_ERROR_INVALID_PARAM, "not inside");
  CHECK_MSG(aclrtIpcMemGetExportKey((void *)(uintptr_t)PAGE, PAGE, key, KEYLEN, 0), ACL_ERROR_INVALID_PARAM,
            "not inside");
  void *q = dmalloc(PAGE);
  CHECK_OK(aclrtFree(q));
  CHECK_MSG(aclrtIpcMemGetExportKey(q, PAGE, key, KEYLEN, 0), ACL_ERROR_INVALID_PARAM, "not inside");
  for (size_t i = 0; i < sizeof key; i++) CHECK_EQ(key[i], 'Z'); /* untouched on failure */
  /* nothing was registered: the strict free succeeds at once */
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclrtFreeHost(host));
  CHECK_OK(aclFinalize());
}

TEST(export_subrange_and_key_shape) {
  void *p = dmalloc(64 * KiB);
  char keys[200][KEYLEN] = {0};
  for (int i = 0; i < 200; i++) {
    size_t off = (size_t)(i % 16) * PAGE;
    CHECK_OK(aclrtIpcMemGetExportKey((char *)p + off, 64 * KiB - off, keys[i], KEYLEN, (uint64_t)(i & 1)));
    size_t n = strlen(keys[i]);
    CHECK(n > 0 && n <= 64);
    for (size_t j = 0; j < n; j++) CHECK(keys[i][j] > 0x20 && keys[i][j] < 0x7f);
    for (int j = 0; j < i; j++) CHECK(strcmp(keys[i], keys[j]) != 0); /* never shared */
  }
  /* a key carries 128 secret bits: two exports of one range differ in all of them, almost surely */
  key_rec a = key_decode(keys[0]), b = key_decode(keys[16]);
  CHECK(memcmp(a.secret, b.secret, 16) != 0);
  CHECK(a.id != b.id);
  CHECK_EQ(a.pid, getpid());
  for (int i = 0; i < 200; i++) CHECK_OK(aclrtIpcMemClose(keys[i]));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

TEST(export_len_larger_than_needed) {
  char big[256] = {0};
  memset(big, 'Z', sizeof big);
  void *p = dmalloc(PAGE);
  CHECK_OK(aclrtIpcMemGetExportKey(p, PAGE, big, sizeof big, 0));
  CHECK(strlen(big) <= 64);
  CHECK_OK(aclrtIpcMemClose(big));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

/* ---- keys: strict, total parsing ------------------------------------------- */

static void every_call_rejects(const char *key, int allow_ipc_error) {
  void *q = (void *)0x1234;
  int32_t pid = 1;
  aclrtServerPid sp = {0, &pid, 1};
  aclError r = aclrtIpcMemImportByKey(&q, key, 0);
  const char *m = aclGetRecentErrMsg();
  if (!(r == ACL_ERROR_INVALID_PARAM || (allow_ipc_error && r == ACL_ERROR_RT_IPC_ERROR)) || !m || !*m)
    th_fail(__FILE__, __LINE__, "import of a bad key returned %d (%s)", r, m ? m : "no message");
  CHECK(q == (void *)0x1234);
  CHECK(aclrtIpcMemClose(key) == ACL_ERROR_INVALID_PARAM);
  r = aclrtIpcMemSetImportPid(key, &pid, 1);
  CHECK(r == ACL_ERROR_INVALID_PARAM || r == ACL_ERROR_RT_NO_PERMISSION);
  r = aclrtIpcMemImportPidInterServer(key, &sp, 1);
  CHECK(r == ACL_ERROR_INVALID_PARAM || r == ACL_ERROR_RT_NO_PERMISSION);
  r = aclrtIpcMemSetAttr(key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, 0);
  CHECK(r == ACL_ERROR_INVALID_PARAM || r == ACL_ERROR_RT_NO_PERMISSION);
  CHECK(aclGetRecentErrMsg() != NULL);
}

TEST(garbage_and_truncated_keys) {
  char key[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  const char *garbage[] = {"", "x", "aipc2.", "aipc2", "AIPC2." "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                           "aipc1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", /* the old version */
                           "hello world", "aipc3.AAAA", "\x01\x02\x03", "\xff\xfe\xfd\xfc"};
  for (size_t i = 0; i < sizeof garbage / sizeof *garbage; i++) every_call_rejects(garbage[i], 0);
  guarded gb;
  /* every prefix of a real key */
  for (size_t n = 0; n < strlen(key); n++) {
    char *b = guard_buf(&gb, n + 1);
    memcpy(b, key, n);
    b[n] = '\0';
    every_call_rejects(b, 0);
    guard_free(&gb);
  }
  /* the key with one character replaced by one outside the alphabet, at every position */
  const char bad[] = {' ', '=', '+', '/', '.', '\x7f', '\x80', '\n', '~'};
  for (size_t i = 0; i < strlen(key); i++) {
    for (size_t j = 0; j < sizeof bad; j++) {
      char b[KEYLEN] = {0};
      strcpy(b, key);
      if (b[i] == bad[j]) continue;
      b[i] = bad[j];
      every_call_rejects(b, 0);
    }
  }
  /* the key with one character too many */
  char longer[KEYLEN + 1] = {0};
  snprintf(longer, sizeof longer, "%sA", key);
  every_call_rejects(longer, 0);
  /* 65 bytes with no NUL, right before an inaccessible page: no over-read */
  char *b = guard_buf(&gb, KEYLEN);
  memset(b, 'A', KEYLEN);
  memcpy(b, key, strlen(key));
  every_call_rejects(b, 0);
  guard_free(&gb);
  /* (no non-canonical spelling to try: 42 bytes are 56 whole characters) */
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

TEST(ten_thousand_random_byte_strings) {
  guarded gb;
  uint8_t rnd[128];
  int n = under_valgrind() ? 2000 : 10000;
  for (int i = 0; i < n; i++) {
    CHECK(getrandom(rnd, sizeof rnd, 0) == (ssize_t)sizeof rnd);
    size_t len = rnd[0] % 80; /* bytes before a NUL; >= 65 means no NUL in reach */
    char *b = guard_buf(&gb, len + 1);
    memcpy(b, rnd + 1, len);
    for (size_t j = 0; j < len; j++)
      if (b[j] == 0) b[j] = 1;
    b[len] = '\0';
    if (i % 4 == 1 && len >= 6) memcpy(b, KEY_PREFIX, 6); /* get past the prefix check */
    void *q = NULL;
    aclError r = aclrtIpcMemImportByKey(&q, b, 0);
    CHECK(r == ACL_ERROR_INVALID_PARAM);
    CHECK(aclGetRecentErrMsg() != NULL);
    CHECK(aclrtIpcMemClose(b) == ACL_ERROR_INVALID_PARAM);
    CHECK(aclGetRecentErrMsg() != NULL);
    guard_free(&gb);
  }
  CHECK_OK(aclFinalize());
}

TEST(random_well_formed_keys) {
  /* Well-formed keys of processes that do not exist (or do not serve):
   * a code, promptly, never a hang: with a timeout of a day, any import
   * that waited for one would run into the harness's time limit. */
  timeout_never();
  int n = under_valgrind() ? 300 : 3000;
  for (int i = 0; i < n; i++) {
    key_rec k;
    CHECK(getrandom(&k, sizeof k, 0) == (ssize_t)sizeof k);
    k.sdid = 0;
    k.pid = (k.pid % 4000000) + 1;
    k.nonce |= 1;
    k.id |= 1;
    k.place = own_place(); /* here: nothing says the exporter is elsewhere, so it is gone */
    if (i % 3 == 0) k.pid = (uint32_t)getppid(); /* a live process that exports nothing */
    char key[KEYLEN] = {0};
    key_encode(&k, key);
    void *q = NULL;
    CHECK_MSG(aclrtIpcMemImportByKey(&q, key, 0), ACL_ERROR_RT_IPC_ERROR, "gone");
    CHECK(q == NULL);
    CHECK_MSG(aclrtIpcMemClose(key), ACL_ERROR_INVALID_PARAM, "neither");
  }
  /* decoded field checks: pid 0, pid > INT32_MAX, nonce 0, export id 0 */
  key_rec z = {1, 0, 1, 1, {0}, 0};
  char key[KEYLEN] = {0};
  z.pid = 0;
  key_encode(&z, key);
  every_call_rejects(key, 0);
  z.pid = 0x80000000u;
  key_encode(&z, key);
  every_call_rejects(key, 0);
  z.pid = 1;
  z.nonce = 0;
  key_encode(&z, key);
  every_call_rejects(key, 0);
  z.nonce = 1;
  z.id = 0;
  key_encode(&z, key);
  every_call_rejects(key, 0);
  CHECK_OK(aclFinalize());
}

/* ---- import / close arguments ------------------------------------------------ */

TEST(import_and_close_bad_args) {
  char key[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  void *q = (void *)0x1;
  CHECK_MSG(aclrtIpcMemImportByKey(NULL, key, 0), ACL_ERROR_INVALID_PARAM, "devPtr is NULL");
  CHECK_MSG(aclrtIpcMemImportByKey(&q, NULL, 0), ACL_ERROR_INVALID_PARAM, "key is NULL");
  CHECK_MSG(aclrtIpcMemImportByKey(&q, key, 2), ACL_ERROR_INVALID_PARAM, "flags");
  CHECK_MSG(aclrtIpcMemImportByKey(&q, key, UINT64_MAX), ACL_ERROR_INVALID_PARAM, "flags");
  CHECK(q == (void *)0x1);
  CHECK_MSG(aclrtIpcMemClose(NULL), ACL_ERROR_INVALID_PARAM, "key is NULL");
  CHECK_OK(aclrtIpcMemImportByKey(&q, key, ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS));
  CHECK(q == p);
  CHECK_OK(aclrtIpcMemClose(key)); /* the import */
  CHECK_OK(aclrtIpcMemClose(key)); /* the export */
  CHECK_MSG(aclrtIpcMemClose(key), ACL_ERROR_INVALID_PARAM, "neither");
  CHECK_MSG(aclrtIpcMemImportByKey(&q, key, 0), ACL_ERROR_RT_IPC_ERROR, "not exported");
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

TEST(import_own_key_counts_references) {
  setenv("ASCEND_IPC_STRICT", "1", 1);
  char key[KEYLEN] = {0};
  void *p = export_new(8 * KiB, EXPORT_DEFAULT, key); /* own pid always allowed */
  void *a = NULL, *b = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&a, key, 0));
  CHECK_OK(aclrtIpcMemImportByKey(&b, key, 0));
  CHECK(a == p && b == p);
  CHECK_OK(aclrtIpcMemClose(key)); /* import 2 */
  CHECK_OK(aclrtIpcMemClose(key)); /* import 1 */
  CHECK_OK(aclrtIpcMemClose(key)); /* the export: strict, nothing open */
  CHECK_MSG(aclrtIpcMemClose(key), ACL_ERROR_INVALID_PARAM, "neither");
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

TEST(own_key_forged_secret_or_id) {
  char key[KEYLEN] = {0}, key2[KEYLEN] = {0}, forged[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  void *p2 = export_new(PAGE, EXPORT_ANY, key2);
  key_rec k = key_decode(key);
  k.secret[3] ^= 0x40;
  key_encode(&k, forged);
  void *q = NULL;
  CHECK_MSG(aclrtIpcMemImportByKey(&q, forged, 0), ACL_ERROR_RT_IPC_ERROR, "forged");
  CHECK_MSG(aclrtIpcMemClose(forged), ACL_ERROR_INVALID_PARAM, "neither");
  int32_t pid = 5;
  CHECK_MSG(aclrtIpcMemSetImportPid(forged, &pid, 1), ACL_ERROR_INVALID_PARAM, "not a live export");
  /* the right secret with another export's id */
  k = key_decode(key);
  k.id = key_decode(key2).id;
  key_encode(&k, forged);
  CHECK_MSG(aclrtIpcMemImportByKey(&q, forged, 0), ACL_ERROR_RT_IPC_ERROR, "forged");
  k.id = 999999;
  key_encode(&k, forged);
  CHECK_MSG(aclrtIpcMemImportByKey(&q, forged, 0), ACL_ERROR_RT_IPC_ERROR, "forged");
  CHECK(q == NULL);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtIpcMemClose(key2));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclrtFree(p2));
  CHECK_OK(aclFinalize());
}

TEST(import_of_freed_export_refused) {
  char key[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  CHECK_OK(aclrtFree(p)); /* default mode: deferred while exported */
  void *q = NULL;
  CHECK_MSG(aclrtIpcMemImportByKey(&q, key, 0), ACL_ERROR_RT_IPC_ERROR, "freed");
  CHECK_OK(aclrtIpcMemClose(key)); /* now the block goes */
  CHECK_OK(aclFinalize());
}

/* ---- whitelist calls ------------------------------------------------------------- */

TEST(set_import_pid_bad_args) {
  char key[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_DEFAULT, key);
  int32_t pids[3] = {100, 200, 300};
  int32_t bad0[2] = {100, 0}, badneg[1] = {-5};
  CHECK_MSG(aclrtIpcMemSetImportPid(NULL, pids, 1), ACL_ERROR_INVALID_PARAM, "key is NULL");
  CHECK_MSG(aclrtIpcMemSetImportPid("nonsense", pids, 1), ACL_ERROR_INVALID_PARAM, "key");
  CHECK_MSG(aclrtIpcMemSetImportPid(key, NULL, 1), ACL_ERROR_INVALID_PARAM, "pid is NULL");
  CHECK_MSG(aclrtIpcMemSetImportPid(key, pids, 0), ACL_ERROR_INVALID_PARAM, "num is 0");
  CHECK_MSG(aclrtIpcMemSetImportPid(key, bad0, 2), ACL_ERROR_INVALID_PARAM, "pid[1]");
  CHECK_MSG(aclrtIpcMemSetImportPid(key, badneg, 1), ACL_ERROR_INVALID_PARAM, "pid[0]");
  CHECK_OK(aclrtIpcMemSetImportPid(key, pids, 3));
  CHECK_OK(aclrtIpcMemSetImportPid(key, pids, 3)); /* again: harmless */
  /* a key of another process: only its exporter may change the whitelist */
  key_rec k = key_decode(key);
  char other[KEYLEN] = {0};
  k.pid = (uint32_t)getppid();
  key_encode(&k, other);
  CHECK_MSG(aclrtIpcMemSetImportPid(other, pids, 1), ACL_ERROR_RT_NO_PERMISSION, "only the exporting process");
  /* ours, but an export id never issued */
  k = key_decode(key);
  k.id += 1000;
  key_encode(&k, other);
  CHECK_MSG(aclrtIpcMemSetImportPid(other, pids, 1), ACL_ERROR_INVALID_PARAM, "not a live export");
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_MSG(aclrtIpcMemSetImportPid(key, pids, 1), ACL_ERROR_INVALID_PARAM, "not a live export");
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

TEST(import_pid_inter_server_bad_args) {
  char key[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_DEFAULT, key);
  int32_t pids[2] = {100, 200}, bad[1] = {0};
  aclrtServerPid ok[2] = {{0, pids, 2}, {9, pids, 1}};
  aclrtServerPid nullpid[1] = {{0, NULL, 1}}, zero[1] = {{0, pids, 0}}, badpid[2] = {{0, pids, 2}, {3, bad, 1}};
  CHECK_MSG(aclrtIpcMemImportPidInterServer(NULL, ok, 1), ACL_ERROR_INVALID_PARAM, "key is NULL");
  CHECK_MSG(aclrtIpcMemImportPidInterServer(key, NULL, 1), ACL_ERROR_INVALID_PARAM, "serverPids is NULL");
  CHECK_MSG(aclrtIpcMemImportPidInterServer(key, ok, 0), ACL_ERROR_INVALID_PARAM, "num is 0");
  CHECK_MSG(aclrtIpcMemImportPidInterServer(key, nullpid, 1), ACL_ERROR_INVALID_PARAM, "pid is NULL");
  CHECK_MSG(aclrtIpcMemImportPidInterServer(key, zero, 1), ACL_ERROR_INVALID_PARAM, "num is 0");
  CHECK_MSG(aclrtIpcMemImportPidInterServer(key, badpid, 2), ACL_ERROR_INVALID_PARAM, "serverPids[1].pid[0]");
  CHECK_OK(aclrtIpcMemImportPidInterServer(key, ok, 2));
  key_rec k = key_decode(key);
  char other[KEYLEN] = {0};
  k.pid = (uint32_t)getppid();
  key_encode(&k, other);
  CHECK_MSG(aclrtIpcMemImportPidInterServer(other, ok, 1), ACL_ERROR_RT_NO_PERMISSION, "only the exporting");
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_MSG(aclrtIpcMemImportPidInterServer(key, ok, 1), ACL_ERROR_INVALID_PARAM, "not a live export");
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

/* ---- SetAttr ----------------------------------------------------------------------- */

TEST(set_attr_rules) {
  char key[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  CHECK_MSG(aclrtIpcMemSetAttr(NULL, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, 0), ACL_ERROR_INVALID_PARAM, "key is NULL");
  CHECK_MSG(aclrtIpcMemSetAttr(key, (aclrtIpcMemAttrType)1, 0), ACL_ERROR_INVALID_PARAM, "attribute type");
  CHECK_MSG(aclrtIpcMemSetAttr(key, (aclrtIpcMemAttrType)-1, 0), ACL_ERROR_INVALID_PARAM, "attribute type");
  CHECK_OK(aclrtIpcMemSetAttr(key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_SIO));
  CHECK_OK(aclrtIpcMemSetAttr(key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_HCCS));
  CHECK_MSG(aclrtIpcMemSetAttr(key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_UB_ONE_PORT_PATH),
            ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED, "UB");
  CHECK_MSG(aclrtIpcMemSetAttr(key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_UB_MULTI_PORT_PATH),
            ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED, "UB");
  CHECK_MSG(aclrtIpcMemSetAttr(key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, 4), ACL_ERROR_INVALID_PARAM, "access link");
  CHECK_MSG(aclrtIpcMemSetAttr(key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, UINT64_MAX), ACL_ERROR_INVALID_PARAM,
            "access link");
  key_rec k = key_decode(key);
  char other[KEYLEN] = {0};
  k.pid = (uint32_t)getppid();
  key_encode(&k, other);
  CHECK_MSG(aclrtIpcMemSetAttr(other, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, 0), ACL_ERROR_RT_NO_PERMISSION,
            "only the exporting");
  void *q;
  CHECK_OK(aclrtIpcMemImportByKey(&q, key, 0));
  CHECK_MSG(aclrtIpcMemSetAttr(key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, 0), ACL_ERROR_INVALID_PARAM, "already imported");
  CHECK_OK(aclrtIpcMemClose(key));
  /* still frozen after the importer is gone */
  CHECK_MSG(aclrtIpcMemSetAttr(key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, 0), ACL_ERROR_INVALID_PARAM, "already imported");
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_MSG(aclrtIpcMemSetAttr(key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, 0), ACL_ERROR_INVALID_PARAM, "not a live export");
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

/* ---- server identity ---------------------------------------------------------------- */

TEST(sdid_mismatch_checked_locally) {
  setenv("ASCEND_IPC_SDID", "3", 1);
  char key[KEYLEN] = {0}, other[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  key_rec k = key_decode(key);
  CHECK_EQ(k.sdid, 3);
  k.sdid = 4;
  key_encode(&k, other);
  void *q = NULL;
  CHECK_MSG(aclrtIpcMemImportByKey(&q, other, 0), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "super-node");
  k.pid = 1; /* even for a process that is not there: no connection is tried */
  key_encode(&k, other);
  CHECK_MSG(aclrtIpcMemImportByKey(&q, other, 0), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "super-node");
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

TEST(finalize_ends_exports_and_allows_reuse) {
  setenv("ASCEND_IPC_STRICT", "1", 1);
  char key[KEYLEN] = {0};
  for (int round = 0; round < 3; round++) {
    void *p[50];
    (void)p;
    char keys[50][KEYLEN] = {0};
    for (int i = 0; i < 50; i++) {
      p[i] = export_new(PAGE, EXPORT_ANY, keys[i]);
      void *q;
      CHECK_OK(aclrtIpcMemImportByKey(&q, keys[i], 0));
    }
    int fds = fd_count();
    CHECK_OK(aclFinalize()); /* unpins, stops the server, frees everything */
    CHECK(fd_count() < fds);
    void *q;
    CHECK_MSG(aclrtIpcMemImportByKey(&q, keys[0], 0), ACL_ERROR_RT_IPC_ERROR, "not exported");
  }
  void *p = export_new(PAGE, EXPORT_ANY, key);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}
