/*
 * White-box tests of the poll window before IPC waits (emu/ipc/spin.h):
 * learnt as the haltpoll governor learns it, capped by ASCEND_IPC_POLL_US,
 * off when that is 0 or the machine has one CPU, and bounded in time; and an
 * exporter serving a burst of imports from another process, which then
 * sleeps without a deadline (no thread left polling), and never polls when
 * polling is off. None of it asserts how fast anything is: how much polling
 * saves is a figure of make bench-c, not a test's.
 * Links libaipc_internal.a.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>

#include "ipc_util.h"

#include "emu/ipc/exporter.h"
#include "emu/ipc/spin.h"
#include "os/os.h"

#define US 1000u

TEST(the_window_grows_from_nothing_to_the_cap) {
  aipc__spin s = {0};
  CHECK_EQ(aipc__spin_until(&s, 1000), 0); /* nothing learnt: block at once */
  uint64_t want[] = {10 * US, 20 * US, 40 * US, 80 * US, 100 * US, 100 * US};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    aipc__spin_learn(&s, 150 * US); /* came soon after the window: poll longer */
    CHECK_EQ(s.window_ns, want[i]);
  }
  aipc__spin_learn(&s, 30 * US); /* caught while polling: nothing to learn */
  CHECK_EQ(s.window_ns, 100 * US);
  if (aipc__os_cpus_online() >= 2) CHECK_EQ(aipc__spin_until(&s, 1000), 1000 + 100 * US);
}

TEST(waits_far_longer_than_any_window_stop_the_polling) {
  aipc__spin s = {100 * US};
  uint64_t want[] = {50 * US, 25 * US, 12500, 0, 0};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    aipc__spin_learn(&s, 5000 * US); /* 5 ms: polling never caught it */
    CHECK_EQ(s.window_ns, want[i]);
  }
  CHECK_EQ(aipc__spin_until(&s, 1000), 0);
}

TEST(the_variable_caps_the_window) {
  setenv("ASCEND_IPC_POLL_US", "30", 1); /* read once, at this process's first use */
  aipc__spin s = {0};
  for (int i = 0; i < 5; i++) aipc__spin_learn(&s, 50 * US);
  CHECK_EQ(s.window_ns, 30 * US);
  aipc__spin_learn(&s, 61 * US); /* over twice the cap: wasted */
  CHECK_EQ(s.window_ns, 15 * US);
  s.window_ns = 90 * US; /* one learnt under a larger cap still polls no longer than this one */
  if (aipc__os_cpus_online() >= 2) CHECK_EQ(aipc__spin_until(&s, 0), 30 * US);
}

TEST(zero_turns_polling_off) {
  setenv("ASCEND_IPC_POLL_US", "0", 1);
  aipc__spin s = {0};
  for (int i = 0; i < 5; i++) aipc__spin_learn(&s, 1 * US);
  CHECK_EQ(s.window_ns, 0);
  s.window_ns = 50 * US;
  CHECK_EQ(aipc__spin_until(&s, 1000), 0);
}

TEST(bad_values_keep_the_default) {
  setenv("ASCEND_IPC_POLL_US", "lots", 1);
  aipc__spin s = {0};
  for (int i = 0; i < 6; i++) aipc__spin_learn(&s, 150 * US);
  CHECK_EQ(s.window_ns, 100 * US);
}

TEST(polling_ends_at_its_deadline) {
  uint64_t start = aipc__os_now_ns(), until = start + 2000 * US;
  while (aipc__spin_again(until)) {
  }
  uint64_t took = aipc__os_now_ns() - start;
  CHECK(took >= 2000 * US);
  /* and it ends there (the loop above ended; a never runs into the harness's
   * time limit): a deadline passed, or now, says stop at once, one far ahead
   * says go on, whatever the machine's speed */
  uint64_t now = aipc__os_now_ns();
  CHECK(!aipc__spin_again(start));
  CHECK(!aipc__spin_again(now));
  CHECK(aipc__spin_again(now + 3600ull * 1000000 * US));
}

/* ---- an exporter through a burst of imports ---------------------------------------- */

/* Imports and closes key n times, then reports how many of its own waits
 * polled. */
static int burst_child(chan *c, void *arg) {
  int n = *(int *)arg;
  char key[KEYLEN] = {0};
  from_parent(c, key, KEYLEN);
  for (int i = 0; i < n; i++) {
    void *p = NULL;
    CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
    CHECK_EQ(((volatile unsigned char *)p)[i % PAGE], (unsigned char)(i % PAGE));
    CHECK_OK(aclrtIpcMemClose(key));
  }
  send_int(c->up[1], (int)aipc__spin_polled_waits());
  CHECK_OK(aclFinalize());
  return 0;
}

/* Whether thread tid of this process sleeps in epoll_wait with no deadline
 * (the server's steady wait), read from /proc: its state and the system call
 * it is blocked in, with that call's timeout argument. */
static bool sleeps_in_an_endless_epoll_wait(const char *tid) {
  char path[320], buf[512];
  snprintf(path, sizeof path, "/proc/self/task/%s/stat", tid);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *state = strrchr(buf, ')'); /* after the name, which may hold anything */
  if (!state || state[1] != ' ' || state[2] != 'S') return false;
  snprintf(path, sizeof path, "/proc/self/task/%s/syscall", tid);
  if (!(f = fopen(path, "r"))) return false;
  long nr = -1;
  unsigned long a[4] = {0};
  int got = fscanf(f, "%ld %lx %lx %lx %lx", &nr, &a[0], &a[1], &a[2], &a[3]);
  fclose(f);
  if (got != 5) return false;
  bool epoll = false;
#ifdef SYS_epoll_wait
  epoll = epoll || nr == SYS_epoll_wait;
#endif
  epoll = epoll || nr == SYS_epoll_pwait;
  return epoll && (int)(uint32_t)a[3] == -1;
}

/* Waits until a thread of this process other than the caller sleeps in an
 * epoll_wait without a deadline. A thread still polling is runnable and
 * inside epoll_wait with a timeout of 0, or in sched_yield, so this holds
 * only once polling stopped; the minute allowed is for a loaded machine. */
static bool a_thread_sleeps_in_an_endless_epoll_wait(void) {
  for (int tries = 0; tries < 60000; tries++) {
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    struct dirent *e;
    bool found = false;
    while (!found && (e = readdir(d)))
      found = e->d_name[0] != '.' && atoi(e->d_name) != (int)syscall(SYS_gettid) &&
              sleeps_in_an_endless_epoll_wait(e->d_name);
    closedir(d);
    if (found) return true;
    struct timespec ms = {0, 1000 * 1000};
    nanosleep(&ms, NULL);
  }
  return false;
}

/* A burst of n imports from another process. Returns how many waits polled
 * there; *polled_here: how many polled here (the server's). */
static int burst(int n, uint64_t *polled_here) {
  char key[KEYLEN] = {0};
  unsigned char *p = export_new(PAGE, EXPORT_ANY, key);
  for (size_t i = 0; i < PAGE; i++) p[i] = (unsigned char)i;
  chan c;
  chan_open(&c);
  uint64_t before = aipc__spin_polled_waits();
  int pid = chan_spawn(&c, burst_child, &n);
  to_child(&c, key, KEYLEN);
  int polled_there = recv_int(c.up[0]);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  /* Idle now: the server's wait must end in a blocking one without a deadline. */
  CHECK(a_thread_sleeps_in_an_endless_epoll_wait());
  *polled_here = aipc__spin_polled_waits() - before;
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
  return polled_there;
}

TEST(an_exporter_serves_a_burst_then_sleeps_without_polling) {
  int n = under_valgrind() ? 50 : 2000;
  uint64_t polled_here = 0;
  burst(n, &polled_here);
}

TEST(with_polling_off_neither_side_polls) {
  setenv("ASCEND_IPC_POLL_US", "0", 1); /* read once per process: the child inherits it */
  int n = under_valgrind() ? 20 : 500;
  uint64_t polled_here = 1;
  int polled_there = burst(n, &polled_here);
  CHECK_EQ(polled_here, 0);
  CHECK_EQ(polled_there, 0);
}

/* ---- a request announced before it comes ----------------------------------------------- */

/* One import of key from a child, after the parent announced it. */
static int one_import_child(chan *c, void *arg) {
  (void)arg;
  char key[KEYLEN] = {0};
  from_parent(c, key, KEYLEN);
  void *p = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  CHECK_OK(aclrtIpcMemClose(key));
  send_int(c->up[1], 1);
  CHECK_OK(aclFinalize());
  return 0;
}

/* A sleeping server, told a request is on its way (what pickling a handle
 * for one receiver does), wakes to poll for it, serves it, and sleeps
 * without a deadline again once the window has passed. */
TEST(an_announced_request_wakes_the_server_to_poll_for_it) {
  if (aipc__os_cpus_online() < 2 || under_valgrind()) {
    /* valgrind runs one thread at a time: a polling thread there starves the rest */
    fprintf(stderr, "skipped: one CPU (or valgrind's one thread at a time), where nothing polls\n");
    return;
  }
  char key[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  CHECK(a_thread_sleeps_in_an_endless_epoll_wait());
  uint64_t before = aipc__exporter_expected_waits();
  /* Announced again until the server has polled for one: on a loaded
   * machine its wake-up may come after a window (1 ms) has passed, and then
   * it rightly sleeps again; the property is that it wakes and polls for an
   * announcement still in force, not how soon the scheduler lets it. */
  while (aipc__exporter_expected_waits() == before) { /* (else the harness's limit) */
    aipc__exporter_expect_request();
    struct timespec us = {0, 100 * 1000};
    nanosleep(&us, NULL);
  }
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, one_import_child, NULL);
  to_child(&c, key, KEYLEN);
  CHECK_EQ(recv_int(c.up[0]), 1);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK(a_thread_sleeps_in_an_endless_epoll_wait()); /* the window ends */
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

TEST(with_polling_off_an_announced_request_changes_nothing) {
  setenv("ASCEND_IPC_POLL_US", "0", 1);
  char key[KEYLEN] = {0};
  void *p = export_new(PAGE, EXPORT_ANY, key);
  aipc__exporter_expect_request();
  CHECK(a_thread_sleeps_in_an_endless_epoll_wait());
  CHECK_EQ(aipc__exporter_expected_waits(), 0);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}
