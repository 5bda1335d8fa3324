/*
 * Load: one exporter with 256 live exports; N importer processes, each doing
 * open / read / write / close cycles on random keys (each importer owns one
 * page, its "stripe", of every export, so every write is checkable); one
 * process that keeps exporting and closing (its keys are imported too, racing
 * its closes); and a thread in the exporter that exports and closes private
 * keys all along. At the end every byte is checked, no call failed, every
 * reference came back (strict closes succeed), and every process's
 * descriptors and memory mappings are what they were at the start.
 *
 * The sizes come from the environment, so one binary serves CI (small, the
 * defaults) and `make stress` (large):
 *   STRESS_EXPORTS    live exports of the exporter        (256)
 *   STRESS_IMPORTERS  importer processes                  (4;  make stress: 16)
 *   STRESS_CYCLES     cycles per importer                 (400; make stress: 5000)
 *   STRESS_DEVICES    devices the exports are spread over (4)
 *   STRESS_CHURN      key slots of the churning process   (8)
 *   STRESS_SEED       random seed                         (pid-based)
 * It prints its figures (cycles/s, IPC calls/s) on stderr.
 */
#include <pthread.h>
#include <sys/resource.h>

#include "proc_util.h"

/* ---- configuration ----------------------------------------------------------- */

typedef struct stress_cfg {
  int exports, importers, cycles, devices, churn;
  uint64_t seed;
} stress_cfg;

static int env_int(const char *name, int dflt, int lo, int hi) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  long v = strtol(s, NULL, 10);
  return v < lo ? lo : v > hi ? hi : (int)v;
}

static stress_cfg cfg_load(void) {
  stress_cfg c;
  int vg = under_valgrind();
  c.exports = env_int("STRESS_EXPORTS", vg ? 32 : 256, 1, 100000);
  c.importers = env_int("STRESS_IMPORTERS", vg ? 2 : 4, 1, 256);
  c.cycles = env_int("STRESS_CYCLES", vg ? 40 : 400, 1, 100000000);
  c.devices = env_int("STRESS_DEVICES", 4, 1, 8);
  c.churn = env_int("STRESS_CHURN", 8, 1, 64);
  const char *s = getenv("STRESS_SEED");
  c.seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)getpid() * 0x9E3779B97F4A7C15ull;
  return c;
}

/* Export k: a header page (written once by the exporter), then one page per
 * importer (stripe i belongs to importer i). */
static size_t export_size(const stress_cfg *c) { return PAGE * (size_t)(1 + c->importers); }
static uint32_t header_seed(int k) { return 0x10000u + (uint32_t)k; }
static uint32_t stripe_seed(int k, int who, uint32_t gen) {
  return (uint32_t)k * 7919u + (uint32_t)who * 104729u + gen * 15485863u + 1u;
}

/* ---- the churning process's published keys ---------------------------------- */

typedef struct churn_slot {
  uint64_t seq; /* odd while being written */
  uint32_t gen, size;
  char key[KEYLEN];
} churn_slot;

typedef struct shared_page {
  int stop_churn;
  churn_slot slot[64];
} shared_page;

static void slot_publish(churn_slot *s, const char *key, uint32_t gen, uint32_t size) {
  __atomic_add_fetch(&s->seq, 1, __ATOMIC_ACQ_REL);
  volatile char *d = s->key;
  for (int i = 0; i < KEYLEN; i++) d[i] = key ? key[i] : 0;
  __atomic_store_n(&s->gen, gen, __ATOMIC_RELAXED);
  __atomic_store_n(&s->size, size, __ATOMIC_RELAXED);
  __atomic_add_fetch(&s->seq, 1, __ATOMIC_ACQ_REL);
}

/* A consistent copy of the slot, or 0 (being written, or empty). */
static int slot_read(churn_slot *s, char key[KEYLEN], uint32_t *gen, uint32_t *size) {
  uint64_t a = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
  if (a & 1) return 0;
  volatile char *src = s->key;
  for (int i = 0; i < KEYLEN; i++) key[i] = src[i];
  *gen = __atomic_load_n(&s->gen, __ATOMIC_RELAXED);
  *size = __atomic_load_n(&s->size, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  uint64_t b = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
  return a == b && key[0] != 0 && key[KEYLEN - 1] == 0;
}

/* ---- the importers ------------------------------------------------------------ */

typedef struct imp_stats {
  uint64_t cycles, imports, closes, second_imports, memcpys, bytes_checked, bytes_written;
  uint64_t churn_ok, churn_refused;
  double seconds;
} imp_stats;

typedef struct imp_arg {
  stress_cfg cfg;
  int index;
  shared_page *shared;
} imp_arg;

#define HOLD_MAX 8
#define HOLD_PER_KEY 8 /* mappings of one key held at once */

/* A key's live mappings in this process, oldest first: a close releases the
 * oldest (CANN's rule), which this model follows. */
typedef struct key_maps {
  void *p[HOLD_PER_KEY + 1];
  uint32_t n;
} key_maps;

static void maps_push(key_maps *m, void *p) {
  CHECK(m->n <= HOLD_PER_KEY);
  for (uint32_t i = 0; i < m->n; i++) CHECK(m->p[i] != p); /* every import a mapping of its own */
  m->p[m->n++] = p;
}

static void maps_pop_oldest(key_maps *m) {
  CHECK(m->n > 0);
  memmove(m->p, m->p + 1, (m->n - 1) * sizeof m->p[0]);
  m->n--;
}

static void import_ok(void **p, const char *key, imp_stats *st) {
  CHECK_OK(aclrtIpcMemImportByKey(p, key, 0));
  CHECK(*p != NULL);
  st->imports++;
}

static void close_ok(const char *key, imp_stats *st) {
  CHECK_OK(aclrtIpcMemClose(key));
  st->closes++;
}

/* Warm-up: one import of a key on every device of the exporter, and one of
 * the churning process, so that the caches (connections, arena descriptors,
 * windows) exist before the steady-state snapshot. */
static void importer_warm_up(const stress_cfg *c, char (*keys)[KEYLEN], shared_page *sh, imp_stats *st) {
  for (int k = 0; k < c->devices && k < c->exports; k++) {
    void *p = NULL;
    import_ok(&p, keys[k], st);
    close_ok(keys[k], st);
  }
  /* until one works, however long the churn takes on a loaded machine (a
   * never runs into the harness's time limit) */
  for (int s = 0;; s = (s + 1) % c->churn) {
    char key[KEYLEN] = {0};
    uint32_t gen, size;
    if (!slot_read(&sh->slot[s], key, &gen, &size)) continue;
    void *p = NULL;
    if (aclrtIpcMemImportByKey(&p, key, 0) == ACL_SUCCESS) {
      CHECK_OK(aclrtIpcMemClose(key));
      break;
    }
  }
}

static int importer_main(chan *ch, void *argp) {
  imp_arg *a = argp;
  const stress_cfg *c = &a->cfg;
  int me = a->index;
  child_deadline();
  proc_snap start, warm;
  proc_snap_take(&start, 0); /* before any IPC */

  char(*keys)[KEYLEN] = calloc((size_t)c->exports, KEYLEN);
  uint32_t *gen = calloc((size_t)c->exports, sizeof *gen);
  key_maps *maps = calloc((size_t)c->exports, sizeof *maps);
  int held[HOLD_MAX], n_held = 0;
  uint8_t *host = malloc(PAGE);
  CHECK(keys && gen && maps && host);
  from_parent(ch, keys, (size_t)c->exports * KEYLEN);
  uint64_t rs = c->seed ^ ((uint64_t)(me + 1) * 0xD1B54A32D192ED03ull);
  imp_stats st;
  memset(&st, 0, sizeof st);
  importer_warm_up(c, keys, a->shared, &st);
  proc_snap_take(&warm, 0);

  size_t stripe = PAGE * (size_t)(1 + me);
  double t0 = now_s();
  for (int cyc = 0; cyc < c->cycles; cyc++) {
    uint64_t r = xorshift64(&rs);
    int k = (int)((r >> 8) % (uint64_t)c->exports);
    unsigned what = (unsigned)(r % 100);
    if (what < 70) {
      /* open, read, write, (read back), close */
      void *p = NULL;
      import_ok(&p, keys[k], &st);
      if (maps[k].n) st.second_imports++;
      maps_push(&maps[k], p);
      uint8_t *q = p;
      CHECK(check_pattern(q, PAGE, header_seed(k)));
      CHECK(check_pattern(q + stripe, PAGE, stripe_seed(k, me, gen[k])));
      st.bytes_checked += 2 * PAGE;
      uint32_t ng = gen[k] + 1;
      /* host<->device copies of imported memory: on the exporter's device */
      CHECK_OK(aclrtSetDevice(k % c->devices));
      if (r & (1u << 20)) {
        fill_pattern(q + stripe, PAGE, stripe_seed(k, me, ng));
      } else {
        fill_pattern(host, PAGE, stripe_seed(k, me, ng));
        CHECK_OK(aclrtMemcpy(q + stripe, PAGE, host, PAGE, ACL_MEMCPY_HOST_TO_DEVICE));
        st.memcpys++;
      }
      st.bytes_written += PAGE;
      gen[k] = ng;
      if (r & (1u << 21)) {
        memset(host, 0, PAGE);
        CHECK_OK(aclrtMemcpy(host, PAGE, q + stripe, PAGE, ACL_MEMCPY_DEVICE_TO_HOST));
        CHECK(check_pattern(host, PAGE, stripe_seed(k, me, ng)));
        st.memcpys++;
        st.bytes_checked += PAGE;
      }
      close_ok(keys[k], &st);
      maps_pop_oldest(&maps[k]);
      /* what stays mapped (held ones, or this one when an older one went) is intact */
      for (uint32_t i = 0; i < maps[k].n; i++) CHECK(check_pattern(maps[k].p[i], PAGE, header_seed(k)));
      st.cycles++;
    } else if (what < 85) {
      /* hold one more reference (a second one of a held key counts too) */
      if ((!maps[k].n && n_held == HOLD_MAX) || maps[k].n == HOLD_PER_KEY) continue;
      void *p = NULL;
      import_ok(&p, keys[k], &st);
      if (maps[k].n)
        st.second_imports++;
      else
        held[n_held++] = k;
      maps_push(&maps[k], p);
      CHECK(check_pattern(p, PAGE, header_seed(k)));
      st.bytes_checked += PAGE;
    } else if (what < 95) {
      /* let go of a held reference */
      if (!n_held) continue;
      int i = (int)((r >> 24) % (uint64_t)n_held);
      int hk = held[i];
      close_ok(keys[hk], &st);
      maps_pop_oldest(&maps[hk]);
      if (maps[hk].n == 0) held[i] = held[--n_held];
    } else {
      /* a key of the churning process, which may be closing it right now */
      char key[KEYLEN] = {0};
      uint32_t g, size;
      int s = (int)((r >> 16) % (uint64_t)c->churn);
      if (!slot_read(&a->shared->slot[s], key, &g, &size)) continue;
      void *p = NULL;
      aclError rc = aclrtIpcMemImportByKey(&p, key, 0);
      if (rc == ACL_SUCCESS) {
        st.imports++;
        /* valid until we close it, whatever the exporter does meanwhile */
        CHECK(check_pattern(p, size, 0xC0000000u + g));
        st.bytes_checked += size;
        close_ok(key, &st);
        st.churn_ok++;
      } else {
        const char *m = aclGetRecentErrMsg();
        if (rc != ACL_ERROR_RT_IPC_ERROR || !m || !(strstr(m, "closed") || strstr(m, "not exported") || strstr(m, "freed")))
          th_fail(__FILE__, __LINE__, "importer %d: churn key refused with %d (%s)", me, rc, m ? m : "no message");
        CHECK(p == NULL);
        st.churn_refused++;
      }
    }
  }
  for (int i = 0; i < n_held; i++)
    while (maps[held[i]].n) {
      close_ok(keys[held[i]], &st);
      maps_pop_oldest(&maps[held[i]]);
    }
  st.seconds = now_s() - t0;
  /* every byte of my stripes, once more, through a fresh import */
  for (int k = 0; k < c->exports; k++) {
    void *p = NULL;
    import_ok(&p, keys[k], &st);
    CHECK(check_pattern((uint8_t *)p + stripe, PAGE, stripe_seed(k, me, gen[k])));
    st.bytes_checked += PAGE;
    close_ok(keys[k], &st);
  }
  /* steady state: the caches of the warm-up, nothing more */
  proc_snap_expect(&warm, 0, 0, "importer (steady state)");
  to_parent(ch, &st, sizeof st);
  to_parent(ch, gen, (size_t)c->exports * sizeof *gen);
  CHECK_EQ(recv_int(ch->down[0]), 1); /* the exporter's strict closes are done */
  CHECK_OK(aclFinalize());
  proc_snap_expect(&start, 0, 0, "importer (after aclFinalize)");
  send_int(ch->up[1], 2);
  proc_snap_free(&start);
  proc_snap_free(&warm);
  free(keys);
  free(gen);
  free(maps);
  free(host);
  return 0;
}

/* ---- exporters' warm-up ------------------------------------------------------------ */

static int warm_importer(void *key) {
  void *p = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  CHECK_OK(aclrtIpcMemClose(key));
  return 0;
}

static void *warm_thread(void *arg) {
  (void)arg;
  char key[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  return NULL;
}

/* The first start of a thread leaves its stack in glibc's cache for good;
 * so does the first connection the server thread serves (its malloc arena).
 * An exporter counts its descriptors and mappings from after one round of
 * everything it will do: a served importer, and with extra_thread a second
 * thread of its own exporting at the same time. */
static void warm_up_exporter(int extra_thread) {
  char key[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  int pid = th_spawn(warm_importer, key);
  pthread_t t;
  if (extra_thread) CHECK(pthread_create(&t, NULL, warm_thread, NULL) == 0);
  CHECK_EQ(th_wait(pid), 0);
  if (extra_thread) pthread_join(t, NULL);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

/* ---- the churning process ------------------------------------------------------- */

typedef struct churn_stats {
  uint64_t exports, closes, deferred;
} churn_stats;

static int churn_main(chan *ch, void *argp) {
  imp_arg *a = argp;
  const stress_cfg *c = &a->cfg;
  shared_page *sh = a->shared;
  child_deadline();
  /* closes while imported are the point here: the default (deferred) mode */
  setenv("ASCEND_IPC_STRICT", "0", 1);
  warm_up_exporter(0);
  proc_snap start;
  proc_snap_take(&start, 0);
  size_t free0, tot;
  CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free0, &tot));
  uint64_t rs = c->seed ^ 0xC4C4C4C4ull;
  void **ptr = calloc((size_t)c->churn, sizeof *ptr);
  char(*keys)[KEYLEN] = calloc((size_t)c->churn, KEYLEN);
  churn_stats st = {0, 0, 0};
  uint32_t g = 0;
  send_int(ch->up[1], 1);
  for (int s = 0; !__atomic_load_n(&sh->stop_churn, __ATOMIC_ACQUIRE); s = (s + 1) % c->churn) {
    if (ptr[s]) {
      slot_publish(&sh->slot[s], NULL, 0, 0);
      CHECK_OK(aclrtIpcMemClose(keys[s])); /* deferred if someone holds it */
      CHECK_OK(aclrtFree(ptr[s]));
      st.closes++;
      ptr[s] = NULL;
    }
    size_t size = PAGE * (1 + xorshift64(&rs) % 8);
    ptr[s] = export_new(size, EXPORT_ANY, keys[s]);
    fill_pattern(ptr[s], size, 0xC0000000u + ++g);
    slot_publish(&sh->slot[s], keys[s], g, (uint32_t)size);
    st.exports++;
    if (s == 0) usleep(200); /* leave the importers a chance at a live key */
  }
  for (int s = 0; s < c->churn; s++) {
    if (!ptr[s]) continue;
    slot_publish(&sh->slot[s], NULL, 0, 0);
    CHECK_OK(aclrtIpcMemClose(keys[s]));
    CHECK_OK(aclrtFree(ptr[s]));
    st.closes++;
  }
  /* the importers are done: every deferred free has happened, or happens now
   * (soon; a never runs into the harness's time limit) */
  size_t fr = 0;
  do {
    CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &fr, &tot));
    if (fr != free0) usleep(2000);
  } while (fr != free0);
  CHECK_OK(aclFinalize());
  proc_snap_expect(&start, 0, 5, "churning exporter (after aclFinalize)");
  proc_snap_free(&start);
  to_parent(ch, &st, sizeof st);
  free(ptr);
  free(keys);
  return 0;
}

/* ---- the exporter's own churn thread ------------------------------------------------- */

typedef struct thread_churn {
  int stop;
  int devices;
  uint64_t n;
} thread_churn;

static void *exporter_churn_thread(void *arg) {
  thread_churn *t = arg;
  int32_t me = getpid();
  while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
    CHECK_OK(aclrtSetDevice((int32_t)(t->n % (uint64_t)t->devices)));
    char key[KEYLEN] = {0};
    void *p = export_new(PAGE, t->n & 1 ? EXPORT_ANY : EXPORT_DEFAULT, key);
    if (!(t->n & 1)) CHECK_OK(aclrtIpcMemSetImportPid(key, &me, 1));
    void *q = NULL;
    if (t->n % 4 == 0) { /* an import of one's own key, now and then */
      CHECK_OK(aclrtIpcMemImportByKey(&q, key, 0));
      CHECK(q == p);
      CHECK_OK(aclrtIpcMemClose(key));
    }
    CHECK_OK(aclrtIpcMemClose(key));
    CHECK_OK(aclrtFree(p));
    t->n++;
  }
  return NULL;
}

/* ---- the test -------------------------------------------------------------------------- */

TEST(load_many_importers_random_cycles_nothing_lost) {
  stress_cfg c = cfg_load();
  /* Children first, before this process touches the runtime (so they start
   * with nothing of it), and before ASCEND_IPC_STRICT is set for us. */
  shared_page *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(sh != MAP_FAILED);
  memset(sh, 0, sizeof *sh);
  struct rlimit rl;
  CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
  CHECK((rlim_t)(4 * c.importers + 64) < rl.rlim_cur);
  chan *ch = calloc((size_t)c.importers + 1, sizeof *ch);
  int *pid = calloc((size_t)c.importers + 1, sizeof *pid);
  imp_arg *args = calloc((size_t)c.importers + 1, sizeof *args);
  for (int i = 0; i <= c.importers; i++) {
    args[i] = (imp_arg){c, i, sh};
    chan_open(&ch[i]);
    pid[i] = chan_spawn(&ch[i], i == c.importers ? churn_main : importer_main, &args[i]);
  }
  chan *churn = &ch[c.importers];
  CHECK_EQ(recv_int(churn->up[0]), 1);

  setenv("ASCEND_IPC_STRICT", "1", 1);
  warm_up_exporter(1);
  proc_snap start;
  proc_snap_take(&start, 0);

  size_t esz = export_size(&c);
  char(*keys)[KEYLEN] = calloc((size_t)c.exports, KEYLEN);
  uint8_t **ptr = calloc((size_t)c.exports, sizeof *ptr);
  for (int k = 0; k < c.exports; k++) {
    CHECK_OK(aclrtSetDevice(k % c.devices));
    ptr[k] = export_new(esz, EXPORT_ANY, keys[k]);
    fill_pattern(ptr[k], PAGE, header_seed(k));
    for (int i = 0; i < c.importers; i++) fill_pattern(ptr[k] + PAGE * (size_t)(1 + i), PAGE, stripe_seed(k, i, 0));
  }
  CHECK_OK(aclrtSetDevice(0));
  thread_churn tc = {0, c.devices, 0};
  pthread_t tt;
  CHECK(pthread_create(&tt, NULL, exporter_churn_thread, &tc) == 0);
  double t0 = now_s();
  for (int i = 0; i < c.importers; i++) to_child(&ch[i], keys, (size_t)c.exports * KEYLEN);

  imp_stats tot;
  memset(&tot, 0, sizeof tot);
  uint32_t **gens = calloc((size_t)c.importers, sizeof *gens);
  double slowest = 0;
  for (int i = 0; i < c.importers; i++) {
    imp_stats st;
    from_child(&ch[i], &st, sizeof st);
    gens[i] = calloc((size_t)c.exports, sizeof **gens);
    from_child(&ch[i], gens[i], (size_t)c.exports * sizeof **gens);
    tot.cycles += st.cycles;
    tot.imports += st.imports;
    tot.closes += st.closes;
    tot.second_imports += st.second_imports;
    tot.memcpys += st.memcpys;
    tot.bytes_checked += st.bytes_checked;
    tot.bytes_written += st.bytes_written;
    tot.churn_ok += st.churn_ok;
    tot.churn_refused += st.churn_refused;
    if (st.seconds > slowest) slowest = st.seconds;
  }
  double wall = now_s() - t0;
  __atomic_store_n(&tc.stop, 1, __ATOMIC_RELEASE);
  pthread_join(tt, NULL);
  __atomic_store_n(&sh->stop_churn, 1, __ATOMIC_RELEASE);

  /* every byte, as the exporter sees it */
  uint64_t checked = 0;
  for (int k = 0; k < c.exports; k++) {
    CHECK(check_pattern(ptr[k], PAGE, header_seed(k)));
    for (int i = 0; i < c.importers; i++)
      if (!check_pattern(ptr[k] + PAGE * (size_t)(1 + i), PAGE, stripe_seed(k, i, gens[i][k])))
        th_fail(__FILE__, __LINE__, "export %d, stripe of importer %d: not generation %u", k, i, gens[i][k]);
    checked += esz;
  }
  /* every reference came back: strict closes succeed while the importers
   * are still connected (their releases went through the ledgers) */
  for (int k = 0; k < c.exports; k++) {
    CHECK_OK(aclrtIpcMemClose(keys[k]));
    CHECK_OK(aclrtFree(ptr[k]));
  }
  for (int i = 0; i < c.importers; i++) send_int(ch[i].down[1], 1);
  for (int i = 0; i < c.importers; i++) CHECK_EQ(recv_int(ch[i].up[0]), 2);
  churn_stats cs;
  from_child(churn, &cs, sizeof cs);
  for (int i = 0; i <= c.importers; i++) CHECK_EQ(th_wait(pid[i]), 0);
  CHECK_OK(aclFinalize());
  proc_snap_expect(&start, 0, 5, "exporter (after aclFinalize)");
  for (int i = 0; i <= c.importers; i++) chan_close(&ch[i]);

  double ops = (double)(tot.imports + tot.closes);
  fprintf(stderr,
          "  load: %d exports on %d devices, %d importer processes x %d cycles, churn of %d keys\n"
          "  load: %llu open/read/write/close cycles, %llu imports (%llu of held keys), %llu closes, %llu memcpys\n"
          "  load: %.2f s (slowest importer %.2f s): %.0f cycles/s, %.0f IPC calls/s (import+close)\n"
          "  load: churning process: %llu exports, %llu closes; its keys imported %llu times, refused %llu "
          "times (closed meanwhile)\n"
          "  load: exporter thread: %llu private export/close rounds\n"
          "  load: %.1f MiB checked by importers, %.1f MiB written, %.1f MiB checked by the exporter at the end;\n"
          "  load: 0 failed calls, strict closes of all %d exports succeeded, descriptors and mappings of all "
          "%d processes back to their start\n",
          c.exports, c.devices, c.importers, c.cycles, c.churn, (unsigned long long)tot.cycles,
          (unsigned long long)tot.imports, (unsigned long long)tot.second_imports, (unsigned long long)tot.closes,
          (unsigned long long)tot.memcpys, wall, slowest, (double)tot.cycles / wall, ops / wall,
          (unsigned long long)cs.exports, (unsigned long long)cs.closes, (unsigned long long)tot.churn_ok,
          (unsigned long long)tot.churn_refused, (unsigned long long)tc.n, (double)tot.bytes_checked / MiB,
          (double)tot.bytes_written / MiB, (double)checked / MiB, c.exports, c.importers + 2);
  const char *report = getenv("STRESS_REPORT");
  if (report && *report) {
    FILE *f = fopen(report, "w");
    if (f) {
      fprintf(f,
              "{\"exports\": %d, \"devices\": %d, \"importers\": %d, \"cycles_per_importer\": %d, "
              "\"cycles\": %llu, \"imports\": %llu, \"closes\": %llu, \"memcpys\": %llu, \"seconds\": %.3f, "
              "\"cycles_per_s\": %.0f, \"ipc_calls_per_s\": %.0f, \"churn_exports\": %llu, "
              "\"churn_imports_ok\": %llu, \"churn_imports_refused\": %llu, \"exporter_thread_rounds\": %llu, "
              "\"mib_checked\": %.1f, \"failed_calls\": 0}\n",
              c.exports, c.devices, c.importers, c.cycles, (unsigned long long)tot.cycles,
              (unsigned long long)tot.imports, (unsigned long long)tot.closes, (unsigned long long)tot.memcpys, wall,
              (double)tot.cycles / wall, ops / wall, (unsigned long long)cs.exports,
              (unsigned long long)tot.churn_ok, (unsigned long long)tot.churn_refused, (unsigned long long)tc.n,
              (double)(tot.bytes_checked + checked) / MiB);
      fclose(f);
    }
  }
  for (int i = 0; i < c.importers; i++) free(gens[i]);
  free(gens);
  free(keys);
  free(ptr);
  free(ch);
  free(pid);
  free(args);
  proc_snap_free(&start);
  munmap(sh, sizeof *sh);
}
