/*
 * Attacks on an exporter from the outside, by processes the kernel lets
 * reach its sockets (docs/design-ipc.md, "Security model"):
 *
 *   - a squatter: the exporter's socket name is listed in /proc/net/unix
 *     for every user; a process that binds it while the exporter is
 *     finalized must not stop the exporter from exporting again, and an
 *     import of an old key reaches the squatter only to be refused;
 *   - a guesser of shareable handles (a door number, listed too, and 32
 *     random bits): failed lookups are rate-limited per exporter and a
 *     connection that keeps failing is dropped, so a live handle takes
 *     years to find; a handle exported with pid validation answers a
 *     process that is not on its whitelist exactly as an unknown one does,
 *     so a hit cannot be recognised either.
 *
 * Bounds on rates are stated against the clock the test reads itself, so a
 * slow machine only makes them looser, never false.
 */
#define _GNU_SOURCE
#include <sys/socket.h>
#include <sys/un.h>

#include "proc_util.h"
#include "wire_util.h"

#define GRAN (2 * MiB)
#define MSG_MAX 512
/* The exporter's allowance of failed shareable-handle lookups (design-ipc.md):
 * a burst, then a rate. The test only needs upper bounds on them. */
#define GUESS_BURST 64
#define GUESS_PER_S 16

/* The abstract socket names ("@ascend_ipc.<pid>.<nonce>") process pid
 * listens on, as anyone reads them in /proc/net/unix. Returns how many
 * (at most max), written to names. */
static int listed_names(int pid, char names[][108], int max) {
  FILE *f = fopen("/proc/net/unix", "r");
  CHECK(f != NULL);
  char line[512], want[64];
  snprintf(want, sizeof want, "@ascend_ipc.%d.", pid);
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    char *at = strstr(line, want);
    if (!at || n == max) continue;
    at[strcspn(at, " \n")] = 0;
    snprintf(names[n++], 108, "%s", at);
  }
  fclose(f);
  return n;
}

/* Binds the abstract name "@..." and holds it until told; reports 1 bound. */
static int squatter(chan *c, void *arg) {
  const char *name = arg;
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t n = strlen(name + 1);
  memcpy(sa.sun_path + 1, name + 1, n);
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  CHECK(s >= 0);
  CHECK(bind(s, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) == 0);
  CHECK(listen(s, 16) == 0);
  send_int(c->up[1], 1);
  CHECK_EQ(recv_int(c->down[0]), 2);
  close(s);
  return 0;
}

/* Imports key and reports the code and the message. */
static int import_reporter(chan *c, void *arg) {
  (void)arg;
  char key[KEYLEN];
  from_parent(c, key, KEYLEN);
  void *p = NULL;
  aclError rc = aclrtIpcMemImportByKey(&p, key, 0);
  char msg[MSG_MAX] = {0};
  const char *m = aclGetRecentErrMsg();
  snprintf(msg, sizeof msg, "%s", rc != ACL_SUCCESS && m ? m : "");
  if (rc == ACL_SUCCESS) {
    CHECK(check_pattern(p, PAGE, 7));
    CHECK_OK(aclrtIpcMemClose(key));
  }
  send_int(c->up[1], rc);
  to_parent(c, msg, sizeof msg);
  CHECK_OK(aclFinalize());
  return 0;
}

static aclError import_elsewhere(const char *key, char msg[MSG_MAX]) {
  return ask_child(import_reporter, NULL, key, msg, MSG_MAX);
}

TEST(a_squatter_on_the_old_name_does_not_stop_exporting_again) {
  timeout_never();
  char old_key[KEYLEN], key[KEYLEN], names[4][108], msg[MSG_MAX];
  void *p = export_new(PAGE, EXPORT_ANY, old_key);
  CHECK_EQ(listed_names(getpid(), names, 4), 1); /* what every user can read */
  char old_name[108];
  memcpy(old_name, names[0], sizeof old_name);
  CHECK_OK(aclrtIpcMemClose(old_key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
  CHECK_EQ(listed_names(getpid(), names, 4), 0);

  /* another process takes the name the exporter had */
  chan sq;
  chan_open(&sq);
  int spid = chan_spawn(&sq, squatter, old_name);
  CHECK_EQ(recv_int(sq.up[0]), 1);

  /* the process starts again and exports: the name it binds now is a new one */
  CHECK_OK(aclInit(NULL));
  p = export_new(PAGE, EXPORT_ANY, key);
  fill_pattern(p, PAGE, 7);
  /* ours, and the squatter's (named after us) */
  CHECK_EQ(listed_names(getpid(), names, 4), 2);
  CHECK(strcmp(names[0], old_name) != 0 || strcmp(names[1], old_name) != 0);
  CHECK(strcmp(key, old_key) != 0);
  CHECK_EQ(import_elsewhere(key, msg), ACL_SUCCESS);
  /* an old key leads to the squatter, which is not the key's process */
  CHECK_EQ(import_elsewhere(old_key, msg), ACL_ERROR_RT_IPC_ERROR);
  fprintf(stderr, "  old key: %s\n", msg);
  CHECK(strstr(msg, "served by another process") != NULL);

  send_int(sq.down[1], 2);
  CHECK_EQ(th_wait(spid), 0);
  chan_close(&sq);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

TEST(every_start_binds_a_name_never_bound_before) {
  char key[KEYLEN], names[4][108], seen[8][108];
  for (int i = 0; i < 8; i++) {
    void *p = export_new(PAGE, EXPORT_ANY, key);
    CHECK_EQ(listed_names(getpid(), names, 4), 1);
    for (int j = 0; j < i; j++) CHECK(strcmp(seen[j], names[0]) != 0);
    memcpy(seen[i], names[0], sizeof seen[i]);
    CHECK_OK(aclrtIpcMemClose(key));
    CHECK_OK(aclrtFree(p));
    CHECK_OK(aclFinalize());
    CHECK_OK(aclInit(NULL));
  }
  CHECK_OK(aclFinalize());
}

/* ---- guessing shareable handles --------------------------------------------- */

/* Opens handle h once, reports the code and the message. */
static int handle_opener(chan *c, void *arg) {
  (void)arg;
  for (;;) {
    uint64_t h;
    from_parent(c, &h, sizeof h);
    if (h == 0) break;
    aclrtDrvMemHandle mine = NULL;
    aclError rc = aclrtMemImportFromShareableHandle(h, 0, &mine);
    char msg[MSG_MAX] = {0};
    const char *m = aclGetRecentErrMsg();
    snprintf(msg, sizeof msg, "%s", rc != ACL_SUCCESS && m ? m : "");
    if (rc == ACL_SUCCESS) CHECK_OK(aclrtFreePhysical(mine));
    send_int(c->up[1], rc);
    to_parent(c, msg, sizeof msg);
  }
  CHECK_OK(aclFinalize());
  return 0;
}

static aclError open_via(chan *c, uint64_t h, char msg[MSG_MAX]) {
  to_child(c, &h, sizeof h);
  aclError rc = recv_int(c->up[0]);
  from_child(c, msg, MSG_MAX);
  return rc;
}

typedef struct guess_report {
  int looked_up;   /* answered as an unknown handle */
  int held_off;    /* refused without a lookup: too many failures */
  int hits;
  int other;
  double seconds;
} guess_report;

/* Guesses handles of the door of handle h (never h itself), `n` times, as
 * fast as the calls return; reports what the answers were. */
static int guesser(chan *c, void *arg) {
  int n = *(int *)arg;
  uint64_t h;
  from_parent(c, &h, sizeof h);
  guess_report r = {0};
  uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
  double t0 = now_s();
  for (int i = 0; i < n; i++) {
    uint64_t g;
    do g = (h & ~0xffffffffull) | (xorshift64(&s) & 0xffffffffull);
    while ((g & 0xffffffffull) == 0 || g == h);
    aclrtDrvMemHandle mine = NULL;
    aclError rc = aclrtMemImportFromShareableHandle(g, 0, &mine);
    const char *m = aclGetRecentErrMsg();
    if (rc == ACL_SUCCESS) {
      r.hits++;
      CHECK_OK(aclrtFreePhysical(mine));
    } else if (m && strstr(m, "too many failed")) {
      r.held_off++;
    } else if (rc == ACL_ERROR_RT_NO_PERMISSION && m && strstr(m, "never issued")) {
      r.looked_up++;
    } else {
      if (r.other++ == 0) fprintf(stderr, "  unexpected answer %d: %s\n", rc, m ? m : "");
    }
  }
  r.seconds = now_s() - t0;
  to_parent(c, &r, sizeof r);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(guessing_a_shareable_handle_is_rate_limited) {
  timeout_never();
  aclrtDrvMemHandle ph = phys_new(GRAN);
  uint64_t h;
  CHECK_OK(aclrtMemExportToShareableHandle(ph, ACL_MEM_HANDLE_TYPE_NONE,
                                           ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION, &h));
  int n = under_valgrind() ? 300 : 2000;
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, guesser, &n);
  to_child(&c, &h, sizeof h);
  guess_report r;
  from_child(&c, &r, sizeof r);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  fprintf(stderr, "  %d guesses in %.2f s: %d looked up, %d held off, %d other\n", n, r.seconds, r.looked_up,
          r.held_off, r.other);
  CHECK_EQ(r.hits, 0);
  CHECK_EQ(r.other, 0);
  CHECK_EQ(r.looked_up + r.held_off, n);
  /* at most the burst and the rate over the time the guesser took */
  CHECK(r.looked_up <= GUESS_BURST + (int)(GUESS_PER_S * (r.seconds + 1)));

  /* the share itself still works once the guessing stops: the allowance
   * grows back with time (a lower bound on the wait, whatever the load) */
  usleep(2 * 1000000 / GUESS_PER_S);
  chan c2;
  chan_open(&c2);
  pid = chan_spawn(&c2, handle_opener, NULL);
  char msg[MSG_MAX];
  CHECK_EQ(open_via(&c2, h, msg), ACL_SUCCESS);
  uint64_t end = 0;
  to_child(&c2, &end, sizeof end);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c2);
  CHECK_OK(aclrtFreePhysical(ph));
  CHECK_OK(aclFinalize());
}

/* The message with every run of hex digits and "0x" numbers removed: what a
 * guesser could compare, beyond the handle it sent. */
static void strip_numbers(char *s) {
  char *w = s;
  for (char *r = s; *r; r++) {
    if (r[0] == '0' && r[1] == 'x') {
      r += 2;
      while (*r && strchr("0123456789abcdefABCDEF", *r)) r++;
      r--;
      continue;
    }
    *w++ = *r;
  }
  *w = 0;
}

TEST(a_whitelisted_handle_answers_a_stranger_as_an_unknown_one_does) {
  timeout_never();
  aclrtDrvMemHandle ph = phys_new(GRAN);
  uint64_t h;
  CHECK_OK(aclrtMemExportToShareableHandle(ph, ACL_MEM_HANDLE_TYPE_NONE, ACL_RT_VMM_EXPORT_FLAG_DEFAULT, &h));
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, handle_opener, NULL);
  char right[MSG_MAX], wrong[MSG_MAX], closed[MSG_MAX];
  aclError rc_right = open_via(&c, h, right);
  aclError rc_wrong = open_via(&c, h ^ 0x5a5a, wrong);
  fprintf(stderr, "  right: %d %s\n  wrong: %d %s\n", rc_right, right, rc_wrong, wrong);
  CHECK_EQ(rc_right, rc_wrong);
  CHECK_EQ(rc_right, ACL_ERROR_RT_NO_PERMISSION);
  strip_numbers(right);
  strip_numbers(wrong);
  CHECK(strcmp(right, wrong) == 0);
  /* the message still tells a legitimate importer what to do */
  CHECK(strstr(right, "aclrtMemSetPidToShareableHandle") != NULL);
  /* whitelisted, it opens */
  int32_t who = pid;
  CHECK_OK(aclrtMemSetPidToShareableHandle(h, &who, 1));
  CHECK_EQ(open_via(&c, h, right), ACL_SUCCESS);
  /* freed by the exporter: the same answer again */
  CHECK_OK(aclrtFreePhysical(ph));
  CHECK_EQ(open_via(&c, h, closed), ACL_ERROR_RT_NO_PERMISSION);
  strip_numbers(closed);
  CHECK(strcmp(closed, wrong) == 0);
  uint64_t end = 0;
  to_child(&c, &end, sizeof end);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclFinalize());
}
