/*
 * Notifies and IPC notifies.
 *
 * A notify is a one-shot flag between streams: aclrtRecordNotify queues a
 * task that raises it, aclrtWaitAndResetNotify queues a task that holds its
 * stream back until the flag is up and then lowers it, so one record releases
 * exactly one wait (CANN: a notify counts to 1; records do not add up).
 *
 * Every notify's flag lives in a page of its own (a sealed memfd, memory.c),
 * so that aclrtNotifyGetExportKey can share it at any time through the IPC
 * layer, under a key of kind NOTIFY with the same whitelist, same-user rule
 * and isolation as memory keys. The importer maps that page and nothing
 * else. CANN's roles: the importer records; only the creator's side waits.
 *
 * Handles are checked against the registry of live notifies (handles.c);
 * queued tasks hold references, so destroying with work pending is safe.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "emu/ipc/ipc.h"
#include "emu_internal.h"
#include "handles.h"
#include "os/os.h"

#define CELL_MAGIC 0x4e504941u /* "AIPN" */

typedef struct cell { /* shared with importers: read as numbers only */
  _Atomic uint32_t word;    /* futex word: changes with every record */
  _Atomic uint32_t waiters;
  _Atomic uint32_t raised;  /* 1 between a record and the wait it releases */
  _Atomic uint32_t id;      /* the creator's notify id */
  uint32_t magic;
} cell;

typedef struct notify {
  aipc__handle h; /* first: the registry's head */
  uint64_t flags; /* ACL_NOTIFY_* */
  bool imported;
  bool exported;
  bool check_pids; /* exported with the whitelist on */
  int32_t device;
  cell *c;
  char key[AIPC_KEY_CHARS + 1];
} notify;
_Static_assert(offsetof(notify, h) == 0, "a notify's address is its registry head's");

static void release(aipc__handle *h);
static void forget(aipc__handle *h) { free(h); } /* fork child: the page and export were the parent's */
static const aipc__handle_ops g_ops = {"notify", release, forget, NULL};
/* Its lock also guards the export fields and g_next_id. */
static aipc__handles g_notifies = AIPC__HANDLES_INIT(&g_ops);
static uint32_t g_next_id;

static void put(notify *n) {
  if (!aipc__handle_unref(&n->h)) return;
  if (n->imported || n->exported) aipc__ipc_release(AIPC_CALL_NAME(destroy_notify), n->key);
  if (!n->imported) aipc__mem_sync_free(n->c);
  memset(n->key, 0, sizeof n->key);
  free(n);
}

static void release(aipc__handle *h) { put((notify *)h); }

static aclError get(const char *call, aclrtNotify h, notify **out) {
  aipc__handle *o;
  aclError rc = aipc__handles_get(&g_notifies, call, "notify", h, &o);
  if (rc == ACL_SUCCESS) *out = (notify *)o;
  return rc;
}

static aclError publish(const char *call, notify *n, aclrtNotify *out) {
  aipc__handle_init(&n->h);
  aclError rc = aipc__handles_add(&g_notifies, call, &n->h);
  if (rc == ACL_SUCCESS) *out = n;
  return rc;
}

aclError aipc__emu_create_notify(aclrtNotify *out, uint64_t flag) {
  const char *call = AIPC_CALL_NAME(create_notify);
  if (!out) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: notify is NULL", call);
  if (flag > ACL_NOTIFY_DEVICE_USE_ONLY)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: flag 0x%llx is not ACL_NOTIFY_DEFAULT (0) or ACL_NOTIFY_DEVICE_USE_ONLY (1)", call,
                      (unsigned long long)flag);
  notify *n = calloc(1, sizeof *n);
  if (!n) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  n->flags = flag;
  n->device = aipc__device_current();
  void *page;
  aclError rc = aipc__mem_sync_alloc(call, n->device, &page);
  if (rc) {
    free(n);
    return rc;
  }
  n->c = page;
  n->c->magic = CELL_MAGIC;
  aipc__handles_lock(&g_notifies);
  atomic_store(&n->c->id, ++g_next_id);
  aipc__handles_unlock(&g_notifies);
  return publish(call, n, out);
}

aclError aipc__emu_destroy_notify(aclrtNotify h) {
  aipc__handle *o;
  aclError rc = aipc__handles_remove(&g_notifies, AIPC_CALL_NAME(destroy_notify), h, &o);
  if (rc) return rc;
  put((notify *)o);
  return ACL_SUCCESS;
}

aclError aipc__emu_get_notify_id(aclrtNotify h, uint32_t *notifyId) {
  const char *call = AIPC_CALL_NAME(get_notify_id);
  if (!notifyId) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: notifyId is NULL", call);
  notify *n = NULL;
  aclError rc = get(call, h, &n);
  if (rc) return rc;
  *notifyId = atomic_load(&n->c->id);
  put(n);
  return ACL_SUCCESS;
}

static aclError host_usable(const char *call, const notify *n) {
  if (n->flags & ACL_NOTIFY_DEVICE_USE_ONLY)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: the notify was created with ACL_NOTIFY_DEVICE_USE_ONLY: only device code may use it", call);
  return ACL_SUCCESS;
}

/* ---- record and wait ------------------------------------------------------------------ */

typedef struct notify_task {
  aipc__task t;
  notify *n;
  uint32_t timeout_s; /* wait: 0 = none */
} notify_task;

static void free_task(aipc__task *t) {
  put(((notify_task *)t)->n);
  free(t);
}

static aclError run_record(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)failed; /* a notify carries no status: the recorder's stream reports its own errors */
  (void)cancel;
  cell *c = ((notify_task *)t)->n->c;
  atomic_store(&c->raised, 1);
  atomic_fetch_add(&c->word, 1);
  if (atomic_load(&c->waiters) > 0) aipc__os_futex_wake_all((const uint32_t *)&c->word);
  return ACL_SUCCESS;
}

static aclError run_wait(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)failed;
  notify_task *w = (notify_task *)t;
  cell *c = w->n->c;
  uint64_t deadline = w->timeout_s ? aipc__os_now_ms() + (uint64_t)w->timeout_s * 1000u : 0;
  for (;;) {
    uint32_t one = 1;
    atomic_fetch_add(&c->waiters, 1);
    uint32_t word = atomic_load(&c->word);
    if (atomic_compare_exchange_strong(&c->raised, &one, 0)) { /* released, and reset */
      atomic_fetch_sub(&c->waiters, 1);
      return ACL_SUCCESS;
    }
    int slice = AIPC_TASK_POLL_MS;
    if (deadline) {
      uint64_t now = aipc__os_now_ms();
      if (now >= deadline) {
        atomic_fetch_sub(&c->waiters, 1);
        return aipc__fail(ACL_ERROR_RT_WAIT_TIMEOUT,
                          "aclrtWaitAndResetNotify (running on the stream): the notify was not recorded within %u s",
                          (unsigned)w->timeout_s);
      }
      if (deadline - now < (uint64_t)slice) slice = (int)(deadline - now);
    }
    aipc__os_futex_wait((const uint32_t *)&c->word, word, slice);
    atomic_fetch_sub(&c->waiters, 1);
    if (atomic_load(cancel))
      return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "aclrtWaitAndResetNotify: the waiting stream was destroyed");
  }
}

static aclError submit(const char *call, notify *n, aclrtStream stream, bool wait, uint32_t timeout_s) {
  notify_task *t = malloc(sizeof *t);
  if (!t) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  aipc__handle_ref(&n->h);
  *t = (notify_task){{NULL, wait ? run_wait : run_record, free_task, NULL}, n, timeout_s};
  return aipc__stream_submit(call, stream, &t->t);
}

aclError aipc__emu_record_notify(aclrtNotify h, aclrtStream stream) {
  const char *call = AIPC_CALL_NAME(record_notify);
  notify *n = NULL;
  aclError rc = get(call, h, &n);
  if (rc) return rc;
  int32_t dev;
  if (!(rc = host_usable(call, n)) && !(rc = aipc__stream_device(call, stream, &dev)))
    rc = submit(call, n, stream, false, 0);
  put(n);
  return rc;
}

aclError aipc__emu_wait_and_reset_notify(aclrtNotify h, aclrtStream stream, uint32_t timeout) {
  const char *call = AIPC_CALL_NAME(wait_and_reset_notify);
  notify *n = NULL;
  aclError rc = get(call, h, &n);
  if (rc) return rc;
  int32_t dev;
  if ((rc = host_usable(call, n)) || (rc = aipc__stream_device(call, stream, &dev))) goto out;
  if (n->imported) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: the notify was imported (aclrtNotifyImportByKey): an IPC notify is waited on only by the "
                    "side that created it; the importer records it",
                    call);
  } else if (dev != n->device) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: the notify belongs to device %d and the stream to device %d: wait on a stream of the "
                    "notify's device",
                    call, (int)n->device, (int)dev);
  } else {
    rc = submit(call, n, stream, true, timeout == UINT32_MAX ? 0 : timeout);
  }
out:
  put(n);
  return rc;
}

/* ---- sharing ------------------------------------------------------------------------ */

aclError aipc__emu_notify_get_export_key(aclrtNotify h, char *key, size_t len, uint64_t flags) {
  const char *call = AIPC_CALL_NAME(notify_get_export_key);
  if (!key) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: key is NULL", call);
  if (len == 0) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: len is 0", call);
  if (len < ACL_IPC_MEM_KEY_LEN)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: len is %zu; the key buffer needs at least %d bytes", call, len,
                      ACL_IPC_MEM_KEY_LEN);
  if (flags != ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT && flags != ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: flags 0x%llx is not ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT (0) or "
                      "_DISABLE_PID_VALIDATION (0x2)",
                      call, (unsigned long long)flags);
  notify *n = NULL;
  aclError rc = get(call, h, &n);
  if (rc) return rc;
  aipc__handles_lock(&g_notifies);
  if (n->imported || n->exported) {
    rc = aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: the notify is already an IPC notify (%s)", call,
                    n->imported ? "imported with aclrtNotifyImportByKey" : "its key was issued before");
  } else {
    bool check = flags == ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT;
    rc = aipc__ipc_share(call, AIPC_OBJECT_NOTIFY, n->c, check, n->key);
    if (rc == ACL_SUCCESS) {
      n->exported = true;
      n->check_pids = check;
      memcpy(key, n->key, AIPC_KEY_CHARS + 1);
    }
  }
  aipc__handles_unlock(&g_notifies);
  put(n);
  return rc;
}

/* The exported key of n, or a recorded error. */
static aclError exported_key(const char *call, notify *n, char key[AIPC_KEY_CHARS + 1]) {
  aipc__handles_lock(&g_notifies);
  bool ok = n->exported;
  if (ok) memcpy(key, n->key, AIPC_KEY_CHARS + 1);
  aipc__handles_unlock(&g_notifies);
  if (!ok)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: the notify has no key yet: call aclrtNotifyGetExportKey first",
                      call);
  return ACL_SUCCESS;
}

aclError aipc__emu_notify_set_import_pid(aclrtNotify h, int32_t *pid, size_t num) {
  const char *call = AIPC_CALL_NAME(notify_set_import_pid);
  if (!pid) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: pid is NULL", call);
  if (num == 0) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: num is 0", call);
  for (size_t i = 0; i < num; i++)
    if (pid[i] <= 0)
      return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: pid[%zu] = %d is not a process id", call, i, (int)pid[i]);
  notify *n = NULL;
  aclError rc = get(call, h, &n);
  if (rc) return rc;
  char key[AIPC_KEY_CHARS + 1];
  if (!(rc = exported_key(call, n, key))) rc = aipc__ipc_share_allow(call, key, pid, num);
  memset(key, 0, sizeof key);
  put(n);
  return rc;
}

aclError aipc__emu_notify_set_import_pid_inter_server(aclrtNotify h, aclrtServerPid *serverPids, size_t num) {
  const char *call = AIPC_CALL_NAME(notify_set_import_pid_inter_server);
  if (!serverPids) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: serverPids is NULL", call);
  if (num == 0) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: num is 0", call);
  for (size_t i = 0; i < num; i++) {
    if (!serverPids[i].pid) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: serverPids[%zu].pid is NULL", call, i);
    if (serverPids[i].num != 1)
      return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: serverPids[%zu].num is %zu; each entry names one process",
                        call, i, serverPids[i].num);
    if (serverPids[i].pid[0] <= 0)
      return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: serverPids[%zu].pid[0] = %d is not a process id", call, i,
                        (int)serverPids[i].pid[0]);
  }
  notify *n = NULL;
  aclError rc = get(call, h, &n);
  if (rc) return rc;
  char key[AIPC_KEY_CHARS + 1];
  if (!(rc = exported_key(call, n, key))) rc = aipc__ipc_share_allow_servers(call, key, serverPids, num);
  memset(key, 0, sizeof key);
  put(n);
  return rc;
}

aclError aipc__emu_notify_import_by_key(aclrtNotify *out, const char *key, uint64_t flags) {
  const char *call = AIPC_CALL_NAME(notify_import_by_key);
  if (!out) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: notify is NULL", call);
  if (!key) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: key is NULL", call);
  if (flags > 3)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: flags 0x%llx is not ACL_RT_NOTIFY_IMPORT_FLAG_DEFAULT (0) or _ENABLE_PEER_ACCESS (0x2)",
                      call, (unsigned long long)flags);
  notify *n = calloc(1, sizeof *n);
  if (!n) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  size_t klen = strnlen(key, ACL_IPC_MEM_KEY_LEN);
  memcpy(n->key, key, klen < AIPC_KEY_CHARS ? klen : AIPC_KEY_CHARS);
  void *page;
  uint32_t owner;
  aclError rc = aipc__ipc_open(call, AIPC_OBJECT_NOTIFY, key, &page, &owner);
  if (rc) {
    memset(n->key, 0, sizeof n->key);
    free(n);
    return rc;
  }
  n->c = page;
  n->imported = true;
  n->device = aipc__device_current();
  return publish(call, n, out);
}

/* ---- teardown, fork ------------------------------------------------------------------ */

void aipc__notify_finalize(void) { aipc__handles_finalize(&g_notifies); }

void aipc__notify_atfork_prepare(void) { aipc__handles_atfork_prepare(&g_notifies); }
void aipc__notify_atfork_parent(void) { aipc__handles_atfork_parent(&g_notifies); }
void aipc__notify_atfork_child(void) { aipc__handles_atfork_child(&g_notifies); }
