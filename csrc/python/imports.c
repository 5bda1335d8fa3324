/* The order of this process's imports of each key (see imports.h). */
#include "imports.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hashmap.h"

typedef struct key_entry key_entry;

struct aipc_py_import {
  aipc_py_import *next; /* the key's next younger import */
  key_entry *entry;
  int closed;           /* its user is done; waits for the older ones */
};

struct key_entry {
  key_entry *chain; /* the next entry whose key has the same 128-bit hash */
  char key[AIPC_PY_KEY_LEN];
  aipc_py_import *oldest, *youngest;
  int busy;             /* an import or close of this key is at the runtime */
  unsigned export_closes; /* exporter closes waiting for the imports to go */
};

/* One lock for the table; each key's runtime calls are kept apart by its
 * busy flag, waited for on `idle`, so the lock is never held across a call.
 * The table maps a 128-bit hash of each key to its entries (a chain, in the
 * unlikely case that two keys share a hash). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_idle = PTHREAD_COND_INITIALIZER;
static aipc__hmap g_keys = AIPC__HMAP_INIT;

static aipc__hkey hash_key(const char *key) {
  uint64_t a = 1469598103934665603ULL, b = 0x6c62272e07bb0142ULL; /* FNV-1a, two offset bases */
  for (; *key; key++) {
    a = (a ^ (unsigned char)*key) * 1099511628211ULL;
    b = (b ^ (unsigned char)*key) * 0x100000001b3ULL;
    b ^= b >> 29;
  }
  return (aipc__hkey){a, b};
}

static key_entry *lookup(const char *key) {
  for (key_entry *e = aipc__hmap_get(&g_keys, hash_key(key)); e; e = e->chain) {
    if (strcmp(e->key, key) == 0) return e;
  }
  return NULL;
}

/* A new entry for key, or NULL when memory ran out. */
static key_entry *insert(const char *key) {
  key_entry *e = calloc(1, sizeof *e);
  if (e == NULL) return NULL;
  snprintf(e->key, sizeof e->key, "%s", key);
  aipc__hkey h = hash_key(key);
  e->chain = aipc__hmap_get(&g_keys, h);
  if (aipc__hmap_put(&g_keys, h, e) < 0) {
    free(e);
    return NULL;
  }
  return e;
}

static void remove_entry(key_entry *e) {
  aipc__hkey h = hash_key(e->key);
  key_entry *head = aipc__hmap_get(&g_keys, h);
  if (head == e) {
    if (e->chain != NULL) {
      (void)aipc__hmap_put(&g_keys, h, e->chain); /* replaces: cannot fail */
    } else {
      (void)aipc__hmap_remove(&g_keys, h);
    }
  } else {
    key_entry *at = head;
    while (at->chain != e) at = at->chain;
    at->chain = e->chain;
  }
  free(e);
}

/* Waits until no call of key is at the runtime, then claims it: the entry,
 * made if `create` (NULL if there is none, or memory ran out). Lock held. */
static key_entry *claim(const char *key, int create) {
  for (;;) {
    key_entry *e = lookup(key);
    if (e != NULL && e->busy) {
      pthread_cond_wait(&g_idle, &g_lock);
      continue;
    }
    if (e == NULL && create) e = insert(key);
    if (e != NULL) e->busy = 1;
    return e;
  }
}

/* Ends a claim; an entry with nothing left in it goes. Lock held. */
static void unclaim(key_entry *e) {
  e->busy = 0;
  if (e->oldest == NULL && e->export_closes == 0) remove_entry(e);
  pthread_cond_broadcast(&g_idle);
}

static void fail(aipc_py_failure *f, aclError code, const char *call, const char *message) {
  if (f->code != ACL_SUCCESS) return;
  f->code = code;
  f->call = call;
  snprintf(f->message, sizeof f->message, "%s", message);
}

/* ---- fork ----------------------------------------------------------------------- */

static void atfork_prepare(void) { pthread_mutex_lock(&g_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&g_lock); }

/* The child's runtime starts with no imports; so does its table. Only the
 * forking thread lives on, so nothing else holds a claim. */
static void atfork_child(void) {
  aipc__hkey h;
  void *v;
  for (size_t i = 0; aipc__hmap_next(&g_keys, &i, &h, &v);) {
    for (key_entry *e = v, *next; e; e = next) {
      next = e->chain;
      for (aipc_py_import *r = e->oldest, *rn; r; r = rn) {
        rn = r->next;
        free(r);
      }
      free(e);
    }
  }
  aipc__hmap_clear(&g_keys);
  pthread_mutex_init(&g_lock, NULL);
  pthread_cond_init(&g_idle, NULL);
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_init_rc;

static void init_once(void) { g_init_rc = pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

int aipc_py_imports_init(void) {
  pthread_once(&g_once, init_once);
  return g_init_rc == 0 ? 0 : -1;
}

/* ---- imports and closes ------------------------------------------------------------ */

aclError aipc_py_import_open(const aipc_provider *p, aipc_py_failure *f, const char *key, uint64_t flags,
                             void **ptr, aipc_py_import **rec) {
  const char *call = AIPC_CALL_NAME(ipc_import_by_key);
  aipc_py_import *r = calloc(1, sizeof *r);
  pthread_mutex_lock(&g_lock);
  key_entry *e = r != NULL ? claim(key, 1) : NULL;
  if (e == NULL) {
    pthread_mutex_unlock(&g_lock);
    free(r);
    fail(f, ACL_ERROR_BAD_ALLOC, call, "aclrtIpcMemImportByKey: out of memory recording the import");
    return f->code;
  }
  if (e->export_closes > 0) {
    /* This process ended its export of the key; only its own imports, still
     * open, hold it up. As the runtime would, refuse new ones. */
    unclaim(e);
    pthread_mutex_unlock(&g_lock);
    free(r);
    fail(f, ACL_ERROR_RT_IPC_ERROR, call,
         "aclrtIpcMemImportByKey: this process closed its export of the key: no new imports");
    return f->code;
  }
  pthread_mutex_unlock(&g_lock);

  void *got = NULL;
  aclError rc = aipc_py_note(p, f, call, p->ipc_import_by_key(&got, key, flags));

  pthread_mutex_lock(&g_lock);
  if (rc == ACL_SUCCESS) {
    r->entry = e;
    if (e->youngest != NULL) {
      e->youngest->next = r;
    } else {
      e->oldest = r;
    }
    e->youngest = r;
    *ptr = got;
    *rec = r;
    r = NULL;
  }
  unclaim(e);
  pthread_mutex_unlock(&g_lock);
  free(r);
  return rc;
}

/* Closes e's oldest imports while they are marked, then the exporter closes
 * that waited for them. Lock held and e claimed; the lock is let go around
 * each runtime call. */
static void drain(const aipc_provider *p, key_entry *e, aipc_py_import *mine, int keep_on_failure,
                  aipc_py_failure *f, aipc_py_failure *later) {
  const char *call = AIPC_CALL_NAME(ipc_close);
  while (e->oldest != NULL && e->oldest->closed) {
    aipc_py_import *head = e->oldest;
    pthread_mutex_unlock(&g_lock);
    aclError rc = aipc_py_note(p, head == mine ? f : later, call, p->ipc_close(e->key));
    pthread_mutex_lock(&g_lock);
    if (rc != ACL_SUCCESS) {
      if (head == mine && keep_on_failure) head->closed = 0;
      return;
    }
    e->oldest = head->next;
    if (e->oldest == NULL) e->youngest = NULL;
    free(head);
  }
  while (e->oldest == NULL && e->export_closes > 0) {
    e->export_closes--;
    pthread_mutex_unlock(&g_lock);
    (void)aipc_py_note(p, later, call, p->ipc_close(e->key));
    pthread_mutex_lock(&g_lock);
  }
}

aclError aipc_py_import_close(const aipc_provider *p, aipc_py_failure *f, aipc_py_import *rec,
                              int keep_on_failure, aipc_py_failure *later) {
  pthread_mutex_lock(&g_lock);
  key_entry *e = rec->entry; /* rec is in e's list, so e stays */
  while (e->busy) pthread_cond_wait(&g_idle, &g_lock);
  e->busy = 1;
  rec->closed = 1;
  drain(p, e, rec, keep_on_failure, f, later);
  unclaim(e);
  pthread_mutex_unlock(&g_lock);
  return f->code;
}

aclError aipc_py_export_close(const aipc_provider *p, aipc_py_failure *f, const char *key, int *deferred) {
  *deferred = 0;
  pthread_mutex_lock(&g_lock);
  /* Claimed, so that no import of the key slips in before the close. */
  key_entry *e = claim(key, 1);
  if (e != NULL && e->oldest != NULL) {
    e->export_closes++;
    *deferred = 1;
    unclaim(e);
    pthread_mutex_unlock(&g_lock);
    return ACL_SUCCESS;
  }
  pthread_mutex_unlock(&g_lock);
  aclError rc = aipc_py_note(p, f, AIPC_CALL_NAME(ipc_close), p->ipc_close(key));
  if (e != NULL) {
    pthread_mutex_lock(&g_lock);
    unclaim(e);
    pthread_mutex_unlock(&g_lock);
  }
  return rc;
}
