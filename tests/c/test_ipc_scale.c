/* Scale and concurrency: many threads at once, 10,000 live exports and
 * imports, many exporters, descriptor use. */
#include <pthread.h>

#include "ipc_util.h"

/* ---- threads in one process ------------------------------------------------------ */

typedef struct remote_keys {
  int n;
  char (*keys)[KEYLEN];
  pthread_barrier_t round; /* the shared-key threads, in step */
} remote_keys;

static int iters(int n) { return under_valgrind() ? n / 10 : n; }

static void *own_worker(void *arg) {
  (void)arg;
  for (int i = 0; i < iters(2000); i++) {
    char key[KEYLEN] = {0};
    void *p = export_new(PAGE, i & 1 ? EXPORT_ANY : EXPORT_DEFAULT, key);
    ((volatile char *)p)[0] = (char)i;
    void *q = NULL;
    CHECK_OK(aclrtIpcMemImportByKey(&q, key, 0));
    CHECK(q == p);
    CHECK_OK(aclrtIpcMemClose(key)); /* the import */
    CHECK_OK(aclrtIpcMemClose(key)); /* the export */
    CHECK_OK(aclrtFree(p));
  }
  return NULL;
}

typedef struct remote_share {
  remote_keys *rk;
  int index, of; /* this thread's keys: index, index + of, ... */
} remote_share;

/* Keys of its own: a close releases the key's oldest mapping in the process,
 * which must be this thread's. */
static void *remote_worker(void *arg) {
  remote_keys *rk = ((remote_share *)arg)->rk;
  int first = ((remote_share *)arg)->index, step = ((remote_share *)arg)->of;
  for (int r = 0; r < iters(20); r++) {
    for (int i = 1 + first; i < rk->n; i += step) { /* key 0 is the shared-key threads' */
      void *p = NULL;
      CHECK_OK(aclrtIpcMemImportByKey(&p, rk->keys[i], 0));
      CHECK_EQ(((volatile uint32_t *)p)[0], (uint32_t)i);
      CHECK_OK(aclrtIpcMemClose(rk->keys[i]));
    }
  }
  return NULL;
}

/* Threads importing one key at once, each a mapping of its own. A close
 * releases the key's oldest mapping in the process (CANN's rule), whoever's
 * it is: so they read between two barriers, and close after. */
static void *same_key_worker(void *arg) {
  remote_keys *rk = arg;
  for (int r = 0; r < iters(500); r++) {
    void *p = NULL;
    CHECK_OK(aclrtIpcMemImportByKey(&p, rk->keys[0], 0));
    pthread_barrier_wait(&rk->round);
    CHECK_EQ(((volatile uint32_t *)p)[0], 0);
    pthread_barrier_wait(&rk->round);
    CHECK_OK(aclrtIpcMemClose(rk->keys[0]));
  }
  return NULL;
}

static int remote_exporter(chan *c, void *arg) {
  int n = *(int *)arg;
  setenv("ASCEND_IPC_STRICT", "1", 1);
  char(*keys)[KEYLEN] = calloc((size_t)n, KEYLEN);
  void **ps = calloc((size_t)n, sizeof *ps);
  for (int i = 0; i < n; i++) {
    ps[i] = export_new(PAGE, EXPORT_ANY, keys[i]);
    ((uint32_t *)ps[i])[0] = (uint32_t)i;
  }
  th_write(c->up[1], keys, (size_t)n * KEYLEN);
  CHECK_EQ(recv_int(c->down[0]), 1);
  for (int i = 0; i < n; i++) {
    CHECK_OK(aclrtIpcMemClose(keys[i])); /* strict: every reference came back */
    CHECK_OK(aclrtFree(ps[i]));
  }
  free(keys);
  free(ps);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(many_threads_export_import_close_at_once) {
  int n = 64;
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, remote_exporter, &n);
  remote_keys rk = {n, calloc((size_t)n, KEYLEN), {{0}}};
  pthread_barrier_init(&rk.round, NULL, 4);
  th_read(c.up[0], rk.keys, (size_t)n * KEYLEN);
  pthread_t t[12];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, own_worker, NULL) == 0);
  remote_share share[4];
  for (int i = 4; i < 8; i++) {
    share[i - 4] = (remote_share){&rk, i - 4, 4};
    CHECK(pthread_create(&t[i], NULL, remote_worker, &share[i - 4]) == 0);
  }
  for (int i = 8; i < 12; i++) CHECK(pthread_create(&t[i], NULL, same_key_worker, &rk) == 0);
  for (int i = 0; i < 12; i++) pthread_join(t[i], NULL);
  send_int(c.down[1], 1);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  free(rk.keys);
  pthread_barrier_destroy(&rk.round);
  CHECK_OK(aclFinalize());
}

typedef struct same_ptr_arg {
  const char *key;
  void *got;
} same_ptr_arg;

static void *import_hold(void *arg) {
  same_ptr_arg *a = arg;
  CHECK_OK(aclrtIpcMemImportByKey(&a->got, a->key, 0));
  return NULL;
}

TEST(threads_importing_one_key_each_get_a_mapping) {
  int n = 1;
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, remote_exporter, &n);
  char key[KEYLEN] = {0};
  th_read(c.up[0], key, KEYLEN);
  for (int round = 0; round < iters(50); round++) {
    pthread_t t[8];
    same_ptr_arg a[8];
    for (int i = 0; i < 8; i++) {
      a[i] = (same_ptr_arg){key, NULL};
      CHECK(pthread_create(&t[i], NULL, import_hold, &a[i]) == 0);
    }
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 8; i++) {
      CHECK_EQ(((volatile uint32_t *)a[i].got)[0], 0); /* the same bytes */
      for (int j = 0; j < i; j++) CHECK(a[i].got != a[j].got); /* eight mappings */
    }
    for (int i = 0; i < 8; i++) CHECK_OK(aclrtIpcMemClose(key));
    CHECK_MSG(aclrtIpcMemClose(key), ACL_ERROR_INVALID_PARAM, "neither");
  }
  send_int(c.down[1], 1);
  CHECK_EQ(th_wait(pid), 0); /* strict close in the exporter: the wire counts match */
  chan_close(&c);
  CHECK_OK(aclFinalize());
}

/* ---- 10,000 live exports and 10,000 live imports --------------------------------------- */

#define TEN_K 10000

static int ten_k_exporter(chan *c, void *arg) {
  (void)arg;
  setenv("ASCEND_IPC_STRICT", "1", 1);
  int fds0 = fd_count();
  char(*keys)[KEYLEN] = calloc(TEN_K, KEYLEN);
  void **ps = calloc(TEN_K, sizeof *ps);
  double t0 = now_s();
  for (int i = 0; i < TEN_K; i++) {
    ps[i] = export_new(PAGE, EXPORT_ANY, keys[i]);
    ((uint32_t *)ps[i])[0] = (uint32_t)i * 7u;
  }
  double dt = now_s() - t0;
  fprintf(stderr, "  10,000 allocations + exports: %.3f s\n", dt);
  CHECK(fd_count() <= fds0 + TEN_K + 8); /* a memfd per allocation; a socket, an epoll, an eventfd */
  th_write(c->up[1], keys, (size_t)TEN_K * KEYLEN);
  CHECK_EQ(recv_int(c->down[0]), 1); /* the importer holds all of them */
  CHECK(fd_count() <= fds0 + TEN_K + 9); /* + its one connection */
  /* one strict close fails, naming the importer; the rest are fine afterwards */
  CHECK_ACL(aclrtIpcMemClose(keys[0]), ACL_ERROR_RT_INTERNAL_ERROR);
  send_int(c->up[1], 2);
  CHECK_EQ(recv_int(c->down[0]), 3); /* the importer closed everything */
  t0 = now_s();
  for (int i = 0; i < TEN_K; i++) {
    CHECK_OK(aclrtIpcMemClose(keys[i]));
    CHECK_OK(aclrtFree(ps[i]));
  }
  fprintf(stderr, "  10,000 closes + frees: %.3f s\n", now_s() - t0);
  free(keys);
  free(ps);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(ten_thousand_live_exports_and_imports) {
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, ten_k_exporter, NULL);
  char(*keys)[KEYLEN] = calloc(TEN_K, KEYLEN);
  void **ps = calloc(TEN_K, sizeof *ps);
  th_read(c.up[0], keys, (size_t)TEN_K * KEYLEN);
  int fds0 = fd_count();
  double t0 = now_s();
  for (int i = 0; i < TEN_K; i++) {
    CHECK_OK(aclrtIpcMemImportByKey(&ps[i], keys[i], 0));
    if (i % 1000 == 999) CHECK(fd_count() <= fds0 + 1); /* one connection: no memfd is kept */
  }
  double dt = now_s() - t0;
  fprintf(stderr, "  10,000 imports: %.3f s (%.1f us each)\n", dt, dt / TEN_K * 1e6);
  for (int i = 0; i < TEN_K; i++) CHECK_EQ(((uint32_t *)ps[i])[0], (uint32_t)i * 7u);
  /* lookups stay O(1): 10,000 more imports, a second mapping of every key,
   * cost what the first ones did */
  void *again = NULL;
  t0 = now_s();
  for (int i = 0; i < TEN_K; i++) CHECK_OK(aclrtIpcMemImportByKey(&again, keys[i], 0));
  fprintf(stderr, "  10,000 second imports: %.3f s\n", now_s() - t0);
  CHECK(fd_count() <= fds0 + 1);
  for (int i = 0; i < TEN_K; i++) CHECK_OK(aclrtIpcMemClose(keys[i]));
  send_int(c.down[1], 1);
  CHECK_EQ(recv_int(c.up[0]), 2);
  t0 = now_s();
  for (int i = 0; i < TEN_K; i++) CHECK_OK(aclrtIpcMemClose(keys[i]));
  fprintf(stderr, "  10,000 import closes: %.3f s\n", now_s() - t0);
  send_int(c.down[1], 3);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  free(keys);
  free(ps);
  CHECK_OK(aclFinalize());
}

/* ---- many exporters, one importer -------------------------------------------------------- */

static int small_exporter(chan *c, void *arg) {
  int dev = *(int *)arg;
  CHECK_OK(aclrtSetDevice(dev));
  char key[KEYLEN] = {0}, key2[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  void *p2 = export_new(PAGE, EXPORT_ANY, key2);
  ((uint32_t *)p)[0] = (uint32_t)getpid();
  ((uint32_t *)p2)[0] = (uint32_t)getpid() + 1;
  to_parent(c, key, KEYLEN);
  to_parent(c, key2, KEYLEN);
  CHECK_EQ(recv_int(c->down[0]), 1);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(many_exporters_one_importer_bounded_fds) {
  enum { N = 40 };
  chan c[N];
  int pid[N], dev[N];
  char keys[N][2][KEYLEN];
  for (int i = 0; i < N; i++) {
    dev[i] = i % 4;
    chan_open(&c[i]);
    pid[i] = chan_spawn(&c[i], small_exporter, &dev[i]);
    from_child(&c[i], keys[i][0], KEYLEN);
    from_child(&c[i], keys[i][1], KEYLEN);
  }
  int fds0 = fd_count();
  void *p[N][2];
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < 2; j++) {
      CHECK_OK(aclrtIpcMemImportByKey(&p[i][j], keys[i][j], 0));
      CHECK_EQ(((uint32_t *)p[i][j])[0], (uint32_t)pid[i] + (uint32_t)j);
    }
  }
  /* one connection and one arena fd per exporter, however many keys */
  CHECK(fd_count() <= fds0 + 2 * N);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < 2; j++) CHECK_OK(aclrtIpcMemClose(keys[i][j]));
  /* idle connections are kept for reuse, but only so many */
  CHECK(fd_count() <= fds0 + 2 * 32);
  for (int i = 0; i < N; i++) {
    send_int(c[i].down[1], 1);
    CHECK_EQ(th_wait(pid[i]), 0);
    chan_close(&c[i]);
  }
  CHECK_OK(aclFinalize());
  CHECK(fd_count() <= fds0);
}

/* ---- more live imports on one connection than the release ledger has slots --------- */

#define OVER_SLOTS 16500 /* the ledger has 16384 */

static int many_exporter(chan *c, void *arg) {
  (void)arg;
  setenv("ASCEND_IPC_STRICT", "1", 1);
  char(*keys)[KEYLEN] = calloc(OVER_SLOTS, KEYLEN);
  char *blk = dmalloc((size_t)OVER_SLOTS * PAGE);
  for (int i = 0; i < OVER_SLOTS; i++) {
    ((uint32_t *)(blk + (size_t)i * PAGE))[0] = (uint32_t)i;
    CHECK_OK(aclrtIpcMemGetExportKey(blk + (size_t)i * PAGE, PAGE, keys[i], KEYLEN, EXPORT_ANY));
  }
  th_write(c->up[1], keys, (size_t)OVER_SLOTS * KEYLEN);
  CHECK_EQ(recv_int(c->down[0]), 1);
  for (int i = 0; i < OVER_SLOTS; i++) CHECK_OK(aclrtIpcMemClose(keys[i])); /* strict */
  CHECK_OK(aclrtFree(blk));
  free(keys);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(more_imports_than_ledger_slots) {
  if (under_valgrind()) {
    printf("  (skipped under valgrind: 16,500 round trips)\n");
    return;
  }
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, many_exporter, NULL);
  char(*keys)[KEYLEN] = calloc(OVER_SLOTS, KEYLEN);
  th_read(c.up[0], keys, (size_t)OVER_SLOTS * KEYLEN);
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < OVER_SLOTS; i++) {
      void *p = NULL;
      CHECK_OK(aclrtIpcMemImportByKey(&p, keys[i], 0));
      CHECK_EQ(((uint32_t *)p)[0], (uint32_t)i);
    }
    /* the last ones released with RELEASE messages, the rest through the ledger */
    for (int i = 0; i < OVER_SLOTS; i++) CHECK_OK(aclrtIpcMemClose(keys[i]));
  }
  send_int(c.down[1], 1);
  CHECK_EQ(th_wait(pid), 0); /* every strict close succeeded: every release arrived */
  chan_close(&c);
  free(keys);
  CHECK_OK(aclFinalize());
}
