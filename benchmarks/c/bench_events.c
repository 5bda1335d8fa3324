/*
 * Stream-order benchmark (make bench-c). One run, one machine, medians:
 *   (e) signal latency between processes: a pipe write waking a blocked
 *       reader (the floor); an IPC event recorded in A waking a host waiter
 *       in B; the same event with the waiter a thread of A; and an IPC
 *       notify ping-pong between the streams of A and B (per signal)
 *   (f) a hand-off of a 4 KiB buffer: import + touch + close (plain), and
 *       the same preceded by open + synchronize + destroy of the exporter's
 *       IPC event (stream-ordered), interleaved; the exporter records the
 *       event once per hand-off and lets it run first (waiting for a record
 *       still queued is what (e) measures)
 * The event cases hold the record back behind a notify on the recorder's
 * stream, so the waiter is asleep before it is released: what is timed is
 * release -> the recorder's stream runs the record -> the waiter wakes (two
 * thread wake-ups, one of them across processes).
 * Every process is pinned to one CPU, as in bench_ipc.c (BENCH_PIN=0 lets
 * them float). Prints a table and one JSON line, also written to
 * <build>/bench_events.json.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "acl/acl.h"

#define BENCH_NAME "bench_events"
#include "bench_util.h"

static void pause_us(int us) {
  struct timespec ts = {0, us * 1000L};
  nanosleep(&ts, NULL);
}

/* ---- (e) the floor: a pipe wake-up between processes ---------------------------------- */

static double bench_pipe_wake(int reps) {
  int go[2], back[2];
  if (pipe(go) || pipe(back)) exit(3);
  pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    for (;;) {
      char c;
      if (read(go[0], &c, 1) != 1) _exit(0);
      double t = now();
      xwrite(back[1], &t, sizeof t);
    }
  }
  double *v = malloc(sizeof(double) * (size_t)reps);
  for (int i = -50; i < reps; i++) {
    pause_us(200); /* the reader is asleep */
    double t0 = now(), t1;
    xwrite(go[1], "x", 1);
    xread(back[0], &t1, sizeof t1);
    if (i >= 0) v[i] = t1 - t0;
  }
  close(go[1]);
  waitpid(pid, NULL, 0);
  double m = median(v, reps);
  free(v);
  close(go[0]);
  close(back[0]);
  close(back[1]);
  return m;
}

/* ---- (e) an IPC event's record waking a waiter ------------------------------------------ */

typedef struct waiter_arg {
  aclrtIpcEventHandle h;
  int go, back;
} waiter_arg;

/* Opens the event; for each rep: says ready, sleeps in aclrtSynchronizeEvent,
 * sends the time it woke. */
static void *waiter(void *p) {
  waiter_arg *a = p;
  aclrtEvent e;
  ACL(aclrtIpcOpenEventHandle(a->h, &e));
  for (;;) {
    char c;
    if (read(a->go, &c, 1) != 1 || c == 'q') break;
    xwrite(a->back, "r", 1);
    ACL(aclrtSynchronizeEvent(e));
    double t = now();
    xwrite(a->back, &t, sizeof t);
  }
  ACL(aclrtDestroyEvent(e));
  return NULL;
}

static double bench_event_wake(int reps, int cross_process) {
  aclrtEvent e;
  aclrtNotify gate;
  aclrtStream s;
  ACL(aclrtCreateEventExWithFlag(&e, ACL_EVENT_IPC));
  ACL(aclrtCreateNotify(&gate, ACL_NOTIFY_DEFAULT));
  ACL(aclrtCreateStream(&s));
  waiter_arg a;
  ACL(aclrtIpcGetEventHandle(e, &a.h));
  int go[2], back[2];
  if (pipe(go) || pipe(back)) exit(3);
  a.go = go[0];
  a.back = back[1];
  pid_t pid = -1;
  pthread_t th;
  if (cross_process) {
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
      waiter(&a);
      aclFinalize();
      _exit(0);
    }
  } else if (pthread_create(&th, NULL, waiter, &a) != 0) {
    exit(3);
  }
  double *v = malloc(sizeof(double) * (size_t)reps);
  for (int i = -50; i < reps; i++) {
    ACL(aclrtWaitAndResetNotify(gate, s, 0)); /* holds the record back */
    ACL(aclrtRecordEvent(e, s));
    char c;
    xwrite(go[1], "g", 1);
    xread(back[0], &c, 1);
    pause_us(500); /* the waiter is asleep in its synchronize */
    double t0 = now(), t1;
    ACL(aclrtRecordNotify(gate, NULL)); /* release: the record runs, the waiter wakes */
    xread(back[0], &t1, sizeof t1);
    if (i >= 0) v[i] = t1 - t0;
  }
  xwrite(go[1], "q", 1);
  if (cross_process)
    waitpid(pid, NULL, 0);
  else
    pthread_join(th, NULL);
  double m = median(v, reps);
  free(v);
  ACL(aclrtDestroyStream(s));
  ACL(aclrtDestroyNotify(gate));
  ACL(aclrtDestroyEvent(e));
  close(go[0]);
  close(go[1]);
  close(back[0]);
  close(back[1]);
  return m;
}

/* ---- (e) notify ping-pong between two processes' streams --------------------------------- */

static double bench_notify_pingpong(int n) {
  int up[2], down[2];
  if (pipe(up) || pipe(down)) exit(3);
  aclrtNotify mine;
  ACL(aclrtCreateNotify(&mine, ACL_NOTIFY_DEFAULT));
  char key[ACL_IPC_MEM_KEY_LEN] = {0}, theirs[ACL_IPC_MEM_KEY_LEN] = {0};
  ACL(aclrtNotifyGetExportKey(mine, key, sizeof key, ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION));
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) { /* B: waits on its notify, records A's, n times */
    aclrtNotify b, a;
    char bkey[ACL_IPC_MEM_KEY_LEN] = {0};
    ACL(aclrtCreateNotify(&b, ACL_NOTIFY_DEFAULT));
    ACL(aclrtNotifyGetExportKey(b, bkey, sizeof bkey, ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION));
    xwrite(up[1], bkey, sizeof bkey);
    char akey[ACL_IPC_MEM_KEY_LEN];
    xread(down[0], akey, sizeof akey);
    ACL(aclrtNotifyImportByKey(&a, akey, 0));
    aclrtStream s;
    ACL(aclrtCreateStream(&s));
    for (int i = 0; i < n; i++) {
      ACL(aclrtWaitAndResetNotify(b, s, 0));
      ACL(aclrtRecordNotify(a, s));
    }
    ACL(aclrtSynchronizeStream(s));
    ACL(aclrtDestroyStream(s));
    ACL(aclrtDestroyNotify(a));
    xwrite(up[1], "d", 1);
    char c;
    xread(down[0], &c, 1); /* A imported b: keep it until A is done */
    ACL(aclrtDestroyNotify(b));
    aclFinalize();
    _exit(0);
  }
  xread(up[0], theirs, sizeof theirs);
  xwrite(down[1], key, sizeof key);
  aclrtNotify b;
  ACL(aclrtNotifyImportByKey(&b, theirs, 0));
  aclrtStream s;
  ACL(aclrtCreateStream(&s));
  double t0 = now();
  for (int i = 0; i < n; i++) {
    ACL(aclrtRecordNotify(b, s));
    ACL(aclrtWaitAndResetNotify(mine, s, 0));
  }
  ACL(aclrtSynchronizeStream(s));
  double per_signal = (now() - t0) / (2.0 * n);
  char c;
  xread(up[0], &c, 1);
  xwrite(down[1], "x", 1);
  waitpid(pid, NULL, 0);
  ACL(aclrtDestroyStream(s));
  ACL(aclrtDestroyNotify(b));
  ACL(aclrtDestroyNotify(mine));
  close(up[0]);
  close(up[1]);
  close(down[0]);
  close(down[1]);
  return per_signal;
}

/* ---- (f) plain and stream-ordered hand-offs ------------------------------------------------- */

static void bench_handoff(int reps, double *plain, double *ordered) {
  int up[2], down[2];
  if (pipe(up) || pipe(down)) exit(3);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) { /* the exporter: a buffer and its IPC event, recorded on request */
    void *p;
    char key[ACL_IPC_MEM_KEY_LEN] = {0};
    ACL(aclrtMalloc(&p, 4096, ACL_MEM_MALLOC_HUGE_FIRST));
    ACL(aclrtIpcMemGetExportKey(p, 4096, key, sizeof key, ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION));
    aclrtEvent e;
    aclrtIpcEventHandle h;
    aclrtStream s;
    ACL(aclrtCreateStream(&s));
    ACL(aclrtCreateEventExWithFlag(&e, ACL_EVENT_IPC));
    ACL(aclrtIpcGetEventHandle(e, &h));
    xwrite(up[1], key, sizeof key);
    xwrite(up[1], &h, sizeof h);
    for (;;) {
      char c;
      if (read(down[0], &c, 1) != 1 || c == 'q') break;
      ACL(aclrtRecordEvent(e, s));
      ACL(aclrtSynchronizeStream(s)); /* the record has run: (e) times the wait for it */
      xwrite(up[1], "k", 1);
    }
    ACL(aclrtDestroyEvent(e));
    ACL(aclrtDestroyStream(s));
    ACL(aclrtIpcMemClose(key));
    ACL(aclrtFree(p));
    aclFinalize();
    _exit(0);
  }
  char key[ACL_IPC_MEM_KEY_LEN];
  aclrtIpcEventHandle h;
  xread(up[0], key, sizeof key);
  xread(up[0], &h, sizeof h);
  double *vp = malloc(sizeof(double) * (size_t)reps), *vo = malloc(sizeof(double) * (size_t)reps);
  for (int i = -100; i < reps; i++) {
    char c;
    xwrite(down[1], "r", 1); /* a fresh record for this hand-off (not timed) */
    xread(up[0], &c, 1);
    double t0 = now();
    void *q;
    ACL(aclrtIpcMemImportByKey(&q, key, 0));
    ((volatile char *)q)[0] += 1;
    ACL(aclrtIpcMemClose(key));
    double t1 = now();
    aclrtEvent e;
    ACL(aclrtIpcOpenEventHandle(h, &e));
    ACL(aclrtSynchronizeEvent(e));
    ACL(aclrtDestroyEvent(e));
    ACL(aclrtIpcMemImportByKey(&q, key, 0));
    ((volatile char *)q)[0] += 1;
    ACL(aclrtIpcMemClose(key));
    double t2 = now();
    if (i >= 0) {
      vp[i] = t1 - t0;
      vo[i] = t2 - t1;
    }
  }
  xwrite(down[1], "q", 1);
  waitpid(pid, NULL, 0);
  *plain = median(vp, reps);
  *ordered = median(vo, reps);
  free(vp);
  free(vo);
  close(up[0]);
  close(up[1]);
  close(down[0]);
  close(down[1]);
}

int main(int argc, char **argv) {
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  int reps = quick ? 200 : 2000;
  cpu_set_t saved;
  int pinned = bench_pin(&saved);
  double pipe_wake = bench_pipe_wake(reps);
  double ev_proc = bench_event_wake(reps, 1);
  double ev_thread = bench_event_wake(reps, 0);
  double pingpong = bench_notify_pingpong(quick ? 2000 : 20000);
  double plain, ordered;
  bench_handoff(reps, &plain, &ordered);
  printf("stream order (medians; %d reps; %s)\n", reps, pinned >= 0 ? "pinned to one CPU" : "unpinned");
  printf("  (e) pipe write -> blocked reader in another process wakes   %8.1f us  (floor)\n", pipe_wake * 1e6);
  printf("  (e) IPC event released in A -> host waiter in B wakes         %8.1f us  (%.2fx floor)\n", ev_proc * 1e6,
         ev_proc / pipe_wake);
  printf("  (e) the same, waiter a thread of A                             %8.1f us\n", ev_thread * 1e6);
  printf("  (e) IPC notify ping-pong between two streams, per signal       %8.1f us\n", pingpong * 1e6);
  printf("  (f) hand-off of 4 KiB: import + touch + close                  %8.1f us\n", plain * 1e6);
  printf("  (f) stream-ordered: + open + synchronize + destroy the event   %8.1f us  (%.2fx plain)\n",
         ordered * 1e6, ordered / plain);
  char json[512];
  snprintf(json, sizeof json,
           "{\"pinned\": %s, \"pipe_wake_us\": %.2f, \"event_wake_process_us\": %.2f, \"event_wake_thread_us\": %.2f, "
           "\"notify_pingpong_per_signal_us\": %.2f, \"handoff_plain_us\": %.2f, \"handoff_ordered_us\": %.2f}",
           pinned >= 0 ? "true" : "false", pipe_wake * 1e6, ev_proc * 1e6, ev_thread * 1e6, pingpong * 1e6, plain * 1e6, ordered * 1e6);
  printf("%s\n", json);
  FILE *f = fopen(getenv("BENCH_EVENTS_JSON") ? getenv("BENCH_EVENTS_JSON") : "build/bench_events.json", "w");
  if (f) {
    fprintf(f, "%s\n", json);
    fclose(f);
  }
  ACL(aclFinalize());
  return 0;
}
