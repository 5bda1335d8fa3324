/* Faults: importers and exporters that die (kill -9), stop (SIGSTOP) or
 * finalize, and a hostile client on the exporter's socket. */
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "ipc_util.h"
#include "wire_util.h"

/* ---- importer death ---------------------------------------------------------- */

static int import_and_wait(chan *c, void *arg) {
  int times = arg ? *(int *)arg : 1;
  char key[KEYLEN] = {0};
  from_parent(c, key, KEYLEN);
  void *p = NULL;
  for (int i = 0; i < times; i++) CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  send_int(c->up[1], 1);
  pause(); /* until kill -9 */
  return 0;
}

TEST(kill9_importer_releases_its_references) {
  setenv("ASCEND_IPC_STRICT", "1", 1);
  char key[KEYLEN] = {0}, key2[KEYLEN] = {0};
  void *p = export_new(64 * KiB, EXPORT_ANY, key);
  void *p2 = export_new(64 * KiB, EXPORT_ANY, key2);
  chan c, c2;
  int three = 3;
  chan_open(&c);
  int pid = chan_spawn(&c, import_and_wait, &three);
  chan_open(&c2);
  int pid2 = chan_spawn(&c2, import_and_wait, NULL);
  to_child(&c, key, KEYLEN);
  to_child(&c2, key2, KEYLEN);
  CHECK_EQ(recv_int(c.up[0]), 1);
  CHECK_EQ(recv_int(c2.up[0]), 1);
  CHECK_MSG(aclrtIpcMemClose(key), ACL_ERROR_RT_INTERNAL_ERROR, "still imported");
  kill(pid, SIGKILL);
  CHECK_EQ(th_wait(pid), 128 + SIGKILL);
  /* its socket closed with it: the strict close succeeds right away */
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  /* the other importer is unaffected */
  CHECK_MSG(aclrtIpcMemClose(key2), ACL_ERROR_RT_INTERNAL_ERROR, "still imported");
  kill(pid2, SIGKILL);
  CHECK_EQ(th_wait(pid2), 128 + SIGKILL);
  CHECK_OK(aclrtIpcMemClose(key2));
  CHECK_OK(aclrtFree(p2));
  chan_close(&c);
  chan_close(&c2);
  CHECK_OK(aclFinalize());
}

TEST(kill9_importer_default_mode_frees_closed_export) {
  char key[KEYLEN] = {0};
  size_t fr0, fr1, tot;
  CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &fr0, &tot));
  void *p = export_new(1 * MiB, EXPORT_ANY, key);
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, import_and_wait, NULL);
  to_child(&c, key, KEYLEN);
  CHECK_EQ(recv_int(c.up[0]), 1);
  CHECK_OK(aclrtIpcMemClose(key)); /* deferred: the importer holds it */
  CHECK_OK(aclrtFree(p));          /* deferred too */
  CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &fr1, &tot));
  CHECK(fr1 < fr0);
  kill(pid, SIGKILL);
  CHECK_EQ(th_wait(pid), 128 + SIGKILL);
  do { /* the server thread sees the EOF and releases the block (a never runs into the harness's limit) */
    usleep(1000);
    CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &fr1, &tot));
  } while (fr1 != fr0);
  chan_close(&c);
  CHECK_OK(aclFinalize());
}

/* ---- exporter death ------------------------------------------------------------ */

static int exporter_then_die(chan *c, void *arg) {
  (void)arg;
  char key[KEYLEN] = {0}, key2[KEYLEN] = {0};
  void *p = export_new(256 * KiB, EXPORT_ANY, key);
  export_new(PAGE, EXPORT_ANY, key2);
  fill_pattern(p, 256 * KiB, 1);
  to_parent(c, key, KEYLEN);
  to_parent(c, key2, KEYLEN);
  pause();
  return 0;
}

TEST(kill9_exporter_leaves_imports_valid) {
  timeout_never(); /* "promptly" below: a wait for a timeout would hang */
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, exporter_then_die, NULL);
  char key[KEYLEN] = {0}, key2[KEYLEN] = {0};
  from_child(&c, key, KEYLEN);
  from_child(&c, key2, KEYLEN);
  void *p = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  kill(pid, SIGKILL);
  CHECK_EQ(th_wait(pid), 128 + SIGKILL);
  /* the mapping outlives its exporter: the data is intact and writable */
  CHECK(check_pattern(p, 256 * KiB, 1));
  fill_pattern(p, 256 * KiB, 2);
  CHECK(check_pattern(p, 256 * KiB, 2));
  void *host = NULL;
  CHECK_OK(aclrtMallocHost(&host, 256 * KiB));
  CHECK_OK(aclrtMemcpy(host, 256 * KiB, p, 256 * KiB, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK(check_pattern(host, 256 * KiB, 2));
  /* new imports of its keys fail promptly (cached connection: EOF, reconnect
   * refused), for that reason, not by a timeout (a day here) */
  void *q = NULL;
  CHECK_MSG(aclrtIpcMemImportByKey(&q, key2, 0), ACL_ERROR_RT_IPC_ERROR, "gone");
  CHECK_MSG(aclrtIpcMemImportByKey(&q, key2, 0), ACL_ERROR_RT_IPC_ERROR, "gone");
  CHECK(q == NULL);
  /* closing an import of a dead exporter still succeeds */
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_MSG(aclrtIpcMemClose(key), ACL_ERROR_INVALID_PARAM, "neither");
  CHECK_OK(aclrtFreeHost(host));
  chan_close(&c);
  CHECK_OK(aclFinalize());
}

static int exporter_then_finalize(chan *c, void *arg) {
  (void)arg;
  char key[KEYLEN] = {0};
  void *p = export_new(64 * KiB, EXPORT_ANY, key);
  fill_pattern(p, 64 * KiB, 1);
  to_parent(c, key, KEYLEN);
  CHECK_EQ(recv_int(c->down[0]), 1);
  CHECK_OK(aclFinalize()); /* ends the export, stops the server */
  send_int(c->up[1], 2);
  CHECK_EQ(recv_int(c->down[0]), 3);
  return 0;
}

TEST(exporter_finalize_while_imported) {
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, exporter_then_finalize, NULL);
  char key[KEYLEN] = {0};
  from_child(&c, key, KEYLEN);
  void *p = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  send_int(c.down[1], 1);
  CHECK_EQ(recv_int(c.up[0]), 2);
  CHECK(check_pattern(p, 64 * KiB, 1));
  CHECK_OK(aclrtIpcMemClose(key));
  void *q = NULL;
  CHECK_MSG(aclrtIpcMemImportByKey(&q, key, 0), ACL_ERROR_RT_IPC_ERROR, "gone");
  send_int(c.down[1], 3);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclFinalize());
}

/* ---- a stopped exporter ------------------------------------------------------------- */

static int strict_exporter(chan *c, void *arg) {
  (void)arg;
  setenv("ASCEND_IPC_STRICT", "1", 1);
  char key[KEYLEN] = {0}, key2[KEYLEN] = {0};
  void *p = export_new(64 * KiB, EXPORT_ANY, key);
  void *p2 = export_new(64 * KiB, EXPORT_ANY, key2);
  fill_pattern(p, 64 * KiB, 1);
  to_parent(c, key, KEYLEN);
  to_parent(c, key2, KEYLEN);
  CHECK_EQ(recv_int(c->down[0]), 1); /* the importer is done and closed everything */
  CHECK_OK(aclrtIpcMemClose(key));   /* strict: so every reference came back */
  CHECK_OK(aclrtIpcMemClose(key2));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclrtFree(p2));
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(stopped_exporter_times_out_then_recovers) {
  /* long enough that the imports that must succeed do, however loaded the machine */
  int timeout_ms = under_valgrind() ? 20000 : 5000;
  char t[16] = {0};
  snprintf(t, sizeof t, "%d", timeout_ms);
  setenv("ASCEND_IPC_TIMEOUT_MS", t, 1);
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, strict_exporter, NULL);
  char key[KEYLEN] = {0}, key2[KEYLEN] = {0};
  from_child(&c, key, KEYLEN);
  from_child(&c, key2, KEYLEN);
  void *p = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p, key2, 0)); /* a live connection and a live import */
  CHECK_OK(aclrtIpcMemClose(key2));
  kill(pid, SIGSTOP);
  int st;
  CHECK(waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st)); /* every thread of it stopped */
  p = NULL;
  /* ended by the configured timeout: it waited at least that long (the
   * deadline is taken at the call), and the message names that limit; how
   * much longer it took is the machine's business (a hang would run into the
   * harness's time limit) */
  char who[48], within[32];
  snprintf(who, sizeof who, "no reply from exporter process %d", pid);
  snprintf(within, sizeof within, "within %d ms", timeout_ms);
  double t0 = now_s();
  aclError rc = aclrtIpcMemImportByKey(&p, key, 0);
  double dt = now_s() - t0;
  const char *m = aclGetRecentErrMsg(); /* (read once: reading takes it) */
  CHECK_EQ(rc, ACL_ERROR_RT_IPC_ERROR);
  CHECK(m && strstr(m, who) && strstr(m, within));
  CHECK(dt >= timeout_ms / 1000.0 * 0.9);
  CHECK(p == NULL);
  kill(pid, SIGCONT);
  /* the late reply to the abandoned request is recognised and given back;
   * this import gets its own */
  CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  CHECK(check_pattern(p, 64 * KiB, 1));
  CHECK_OK(aclrtIpcMemClose(key));
  send_int(c.down[1], 1);
  CHECK_EQ(th_wait(pid), 0); /* its strict closes succeeded: counts were right */
  chan_close(&c);
  CHECK_OK(aclFinalize());
}

/* ---- a hostile client --------------------------------------------------------------- */

static int connect_to(const char *key) {
  int fd = raw_connect(key);
  CHECK(fd >= 0);
  return fd;
}

/* 1 once the server has closed fd (EOF or reset), draining what comes
 * first. Waits without a limit of its own: a server that never closes runs
 * into the harness's time limit, one that closes late on a loaded machine
 * passes. */
static int closed_by_server(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  for (;;) {
    if (poll(&p, 1, -1) > 0) {
      uint8_t b[1024];
      ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno == ECONNRESET)) return 1;
      if (r < 0 && errno != EAGAIN) return 1;
    }
    if (p.revents & POLLHUP) return 1;
  }
}

static void good_import(const char *key) {
  void *p = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  CHECK(check_pattern(p, 64 * KiB, 1));
  CHECK_OK(aclrtIpcMemClose(key));
}

static int hostile_child(chan *c, void *arg) {
  (void)arg;
  char key[KEYLEN] = {0};
  from_parent(c, key, KEYLEN);
  key_rec k = key_decode(key);
  uint8_t b[8192];
  size_t n;
  good_import(key);

  struct {
    const char *what;
    int expect_close;
  } cases[] = {
      {"garbage", 1},        {"truncated header", 1}, {"oversized", 1},    {"bad magic", 1},
      {"length mismatch", 1}, {"unknown type", 1},     {"reply type", 1},   {"release unheld", 1},
      {"zero length", 1},    {"fd attached", 1},      {"bad flags", 1},    {"import id 0", 1},
      {"truncated import", 1}, {"reserved set", 1},    {"settles the future", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int fd = connect_to(key);
    const char *w = cases[i].what;
    n = pkt_import(b, &k, 1);
    if (!strcmp(w, "garbage")) {
      for (size_t j = 0; j < 200; j++) b[j] = (uint8_t)(j * 37 + 11);
      n = 200;
    } else if (!strcmp(w, "truncated header")) {
      n = 10;
    } else if (!strcmp(w, "oversized")) {
      memset(b + 64, 0, sizeof b - 64);
      n = sizeof b;
    } else if (!strcmp(w, "bad magic")) {
      b[0] ^= 1;
    } else if (!strcmp(w, "length mismatch")) {
      b[8] = 57;
    } else if (!strcmp(w, "unknown type")) {
      b[6] = 77;
    } else if (!strcmp(w, "reply type")) {
      b[6] = 2;
    } else if (!strcmp(w, "release unheld")) {
      n = pkt_release(b, k.id, 1, 1);
    } else if (!strcmp(w, "zero length")) {
      n = 0;
    } else if (!strcmp(w, "bad flags")) {
      b[48] = 2;
    } else if (!strcmp(w, "import id 0")) {
      memset(b + 24, 0, 8);
    } else if (!strcmp(w, "truncated import")) {
      n = 40;
      b[8] = 40;
    } else if (!strcmp(w, "reserved set")) {
      b[12] = 1;
    } else if (!strcmp(w, "settles the future")) {
      b[56] = 2; /* settled 2 > req 1 */
    }
    if (!strcmp(w, "fd attached"))
      CHECK(raw_send(fd, b, n, 0) == (ssize_t)n);
    else
      CHECK(send(fd, b, n, MSG_NOSIGNAL) == (ssize_t)n);
    if (closed_by_server(fd) != cases[i].expect_close)
      th_fail(__FILE__, __LINE__, "case \"%s\": the server %s the connection", w,
              cases[i].expect_close ? "kept" : "closed");
    close(fd);
    good_import(key); /* everyone else is still served */
  }

  /* another protocol version: an ERROR reply, then closed */
  int fd = connect_to(key);
  n = pkt_import(b, &k, 9);
  b[4] = 2;
  CHECK(send(fd, b, n, MSG_NOSIGNAL) == (ssize_t)n);
  struct pollfd pf = {fd, POLLIN, 0};
  CHECK(poll(&pf, 1, -1) == 1); /* no limit: the harness's bounds a never */
  ssize_t r = recv(fd, b, sizeof b, 0);
  CHECK(r >= 32 && b[6] == 4); /* ERROR */
  CHECK(closed_by_server(fd));
  close(fd);

  /* a key holder speaking the protocol by hand: replayed imports count, replayed
   * releases beyond what it holds get it disconnected (and its references dropped) */
  fd = connect_to(key);
  int ledger_fd = -1;
  for (int i = 0; i < 3; i++) {
    n = pkt_import(b, &k, (uint64_t)(100 + i));
    CHECK(send(fd, b, n, MSG_NOSIGNAL) == (ssize_t)n);
    uint8_t rep[1024];
    int fds[4], nf;
    r = raw_recv(fd, rep, sizeof rep, fds, &nf, 0);
    CHECK(r >= 64);
    int32_t status;
    memcpy(&status, rep + 24, 4);
    CHECK_EQ(status, 0);
    uint32_t rflags;
    memcpy(&rflags, rep + 28, 4);
    for (int j = 0; j < nf; j++) {
      if (j == nf - 1 && (rflags & 2)) ledger_fd = fds[j]; /* the ledger comes last */
      else close(fds[j]);
    }
  }
  /* the first grant on a connection carried its release ledger: a sealed
   * memfd the importer can write counts into but not resize */
  CHECK(ledger_fd >= 0);
  CHECK(ftruncate(ledger_fd, 4096) != 0);    /* cannot shrink it under the exporter */
  CHECK(ftruncate(ledger_fd, 1 << 20) != 0); /* nor grow it */
  send_int(c->up[1], 3); /* the exporter now sees references from us */
  CHECK_EQ(recv_int(c->down[0]), 4);
  n = pkt_release(b, k.id, 2, 200);
  CHECK(send(fd, b, n, MSG_NOSIGNAL) == (ssize_t)n);
  n = pkt_release(b, k.id, 2, 201); /* only 1 left */
  CHECK(send(fd, b, n, MSG_NOSIGNAL) == (ssize_t)n);
  CHECK(closed_by_server(fd));
  close(fd);
  close(ledger_fd);
  good_import(key);

  /* a ledger count larger than what the connection holds: disconnected at
   * the exporter's next look (here: its next IMPORT on that connection) */
  fd = connect_to(key);
  {
    n = pkt_import(b, &k, 300);
    CHECK(send(fd, b, n, MSG_NOSIGNAL) == (ssize_t)n);
    uint8_t rep[1024];
    int fds[4], nf;
    CHECK(raw_recv(fd, rep, sizeof rep, fds, &nf, 0) >= 64);
    uint32_t rflags, slot;
    memcpy(&rflags, rep + 28, 4);
    memcpy(&slot, rep + 60, 4);
    CHECK(rflags & 2);
    int lf = -1;
    for (int j = 0; j < nf; j++) {
      if (j == nf - 1) lf = fds[j]; else close(fds[j]);
    }
    uint32_t *ledger = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, lf, 0);
    CHECK(ledger != MAP_FAILED);
    CHECK(slot < 16384);
    ledger[slot] = 1000; /* holds 1 */
    n = pkt_import(b, &k, 301);
    CHECK(send(fd, b, n, MSG_NOSIGNAL) == (ssize_t)n);
    CHECK(closed_by_server(fd));
    munmap(ledger, 65536);
    close(lf);
  }
  close(fd);
  good_import(key);

  /* a client that floods requests and never reads its replies is dropped */
  fd = connect_to(key);
  int sndbuf = 1 << 22;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  key_rec bad = k;
  bad.secret[0] ^= 1; /* failure replies carry text: they fill the queue faster */
  int sent = 0;
  for (int i = 0; i < 200000; i++) {
    n = pkt_import(b, &bad, (uint64_t)i + 1000);
    ssize_t s = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (s < 0) {
      if (errno == EAGAIN) {
        usleep(1000);
        continue;
      }
      break; /* EPIPE / ECONNRESET: dropped */
    }
    sent++;
  }
  CHECK(closed_by_server(fd));
  close(fd);
  good_import(key);

  /* many idle connections do not stop the server either */
  int idle[100];
  for (int i = 0; i < 100; i++) idle[i] = connect_to(key);
  good_import(key);
  for (int i = 0; i < 100; i++) close(idle[i]);
  send_int(c->up[1], 5);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(hostile_client_does_not_disturb_the_exporter) {
  setenv("ASCEND_IPC_STRICT", "1", 1);
  char key[KEYLEN] = {0};
  void *p = export_new(64 * KiB, EXPORT_ANY, key);
  fill_pattern(p, 64 * KiB, 1);
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, hostile_child, NULL);
  to_child(&c, key, KEYLEN);
  CHECK_EQ(recv_int(c.up[0]), 3);
  CHECK_MSG(aclrtIpcMemClose(key), ACL_ERROR_RT_INTERNAL_ERROR, "3 reference");
  send_int(c.down[1], 4);
  CHECK_EQ(recv_int(c.up[0]), 5);
  CHECK_EQ(th_wait(pid), 0);
  /* the hostile connection was dropped with its references: strict close works */
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  chan_close(&c);
  CHECK_OK(aclFinalize());
}
