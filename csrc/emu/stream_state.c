/*
 * Stream state callbacks (aclrtRegStreamStateCallback): named registrations,
 * run on a runtime thread of their own after a stream is created and
 * before one is destroyed, for created streams and the default stream.
 *
 * The thread starts with the first notice that finds a callback. A notice
 * is handed to it and the notifying call waits until every callback has
 * run, so CREATE_POST comes before the create returns and DESTROY_PRE
 * before the stream goes; a callback that itself creates or destroys a
 * stream runs its own notices inline (waiting for itself would hang).
 *
 * One lock (g_mu) guards the registrations, the queue and the thread; it is
 * a leaf: held across nothing but the list and queue operations (callbacks
 * run without it, on a snapshot of the registrations). Notices come from
 * stream.c with no lock held.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"
#include "os/os.h"

#define MAX_CALLBACKS 64
#define MAX_NAME 128

typedef struct reg {
  char name[MAX_NAME];
  aclrtStreamStateCallback fn;
  void *args;
} reg;

typedef struct notice {
  struct notice *next;
  aclrtStream stream;
  aclrtStreamState state;
  bool done;
} notice;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER; /* queue non-empty, a notice done, or stop */
static reg g_regs[MAX_CALLBACKS];
static size_t g_nregs;
static notice *g_head, *g_tail;
static bool g_started, g_stop;
static pthread_t g_thread;

/* Runs the callbacks registered now for one notice. Called without g_mu. */
static void run_callbacks(aclrtStream stream, aclrtStreamState state) {
  reg snap[MAX_CALLBACKS];
  pthread_mutex_lock(&g_mu);
  size_t n = g_nregs;
  memcpy(snap, g_regs, n * sizeof *snap);
  pthread_mutex_unlock(&g_mu);
  for (size_t i = 0; i < n; i++) snap[i].fn(stream, state, snap[i].args);
}

static void *callback_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_mu);
  for (;;) {
    while (!g_head && !g_stop) pthread_cond_wait(&g_cv, &g_mu);
    notice *n = g_head;
    if (!n) break;
    g_head = n->next;
    if (!g_head) g_tail = NULL;
    pthread_mutex_unlock(&g_mu);
    run_callbacks(n->stream, n->state);
    pthread_mutex_lock(&g_mu);
    n->done = true;
    pthread_cond_broadcast(&g_cv);
  }
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

void aipc__stream_state_notify(aclrtStream h, aclrtStreamState state) {
  pthread_mutex_lock(&g_mu);
  if (g_nregs == 0) { /* the common case: nothing to run, no thread */
    pthread_mutex_unlock(&g_mu);
    return;
  }
  if (g_started && pthread_equal(pthread_self(), g_thread)) { /* from a callback */
    pthread_mutex_unlock(&g_mu);
    run_callbacks(h, state);
    return;
  }
  if (!g_started) {
    g_stop = false;
    if (aipc__os_thread_start(&g_thread, callback_thread, NULL) != 0) {
      /* No thread to be had: run them here rather than not at all. */
      pthread_mutex_unlock(&g_mu);
      run_callbacks(h, state);
      return;
    }
    g_started = true;
  }
  notice n = {NULL, h, state, false};
  if (g_tail)
    g_tail->next = &n;
  else
    g_head = &n;
  g_tail = &n;
  pthread_cond_broadcast(&g_cv);
  while (!n.done) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
}

aclError aipc__emu_reg_stream_state_callback(const char *regName, aclrtStreamStateCallback callback, void *args) {
  const char *call = AIPC_CALL_NAME(reg_stream_state_callback);
  if (!regName || !regName[0]) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: regName is NULL or empty", call);
  size_t len = strnlen(regName, MAX_NAME);
  if (len >= MAX_NAME)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: regName is longer than %d characters", call, MAX_NAME - 1);
  aclError rc = ACL_SUCCESS;
  pthread_mutex_lock(&g_mu);
  size_t i = 0;
  while (i < g_nregs && strcmp(g_regs[i].name, regName) != 0) i++;
  if (!callback) { /* unregister; an unknown name is nothing to do */
    if (i < g_nregs) g_regs[i] = g_regs[--g_nregs];
  } else if (i < g_nregs) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: a callback is already registered as \"%s\" (CANN registers a name once; pass NULL to remove "
                    "it first)",
                    call, regName);
  } else if (g_nregs == MAX_CALLBACKS) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %d callbacks are registered already, the most there can be",
                    call, MAX_CALLBACKS);
  } else {
    memcpy(g_regs[g_nregs].name, regName, len + 1);
    g_regs[g_nregs].fn = callback;
    g_regs[g_nregs].args = args;
    g_nregs++;
  }
  pthread_mutex_unlock(&g_mu);
  return rc;
}

/* aclFinalize: the registrations go and the thread stops. Called with no
 * stream left, from outside any callback. */
void aipc__stream_state_finalize(void) {
  pthread_mutex_lock(&g_mu);
  g_nregs = 0;
  bool started = g_started && !pthread_equal(pthread_self(), g_thread);
  if (started) {
    g_stop = true;
    pthread_cond_broadcast(&g_cv);
  }
  pthread_mutex_unlock(&g_mu);
  if (!started) return;
  pthread_join(g_thread, NULL);
  pthread_mutex_lock(&g_mu);
  g_started = false;
  g_stop = false;
  pthread_mutex_unlock(&g_mu);
}

void aipc__stream_state_atfork_prepare(void) { pthread_mutex_lock(&g_mu); }
void aipc__stream_state_atfork_parent(void) { pthread_mutex_unlock(&g_mu); }

/* The child starts clean: no thread, no registrations, no queue (a notice
 * in it belonged to a parent's thread). */
void aipc__stream_state_atfork_child(void) {
  g_nregs = 0;
  g_head = g_tail = NULL;
  g_started = g_stop = false;
  pthread_mutex_init(&g_mu, NULL);
  pthread_cond_init(&g_cv, NULL);
}
