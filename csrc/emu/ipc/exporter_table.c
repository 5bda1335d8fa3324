/*
 * Exporter side, the books (exporter_internal.h): the exporter lock and
 * this process's name as an exporter; the exports, the references that
 * importer connections hold on them, the release ledgers those references
 * are given back through, the grants an importer may still cancel, the
 * whitelists, and the list of closed exports importers still hold. Calls
 * nothing of the other exporter files: a reference's count can only go
 * down here, and what kills a connection is decided above.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu/ipc/exporter_internal.h"
#include "emu/ipc/identity.h"
#include "emu/ipc/proto.h"

/* The exporter's books; g.lock, the exporter lock, guards them and every
 * other exporter file's state. */
static struct exporter_table {
  pthread_mutex_t lock;
  aipc__exporter_name me;
  aipc__hmap exports; /* {id, 0} -> aipc__export */
  aipc__hmap refs;    /* {export id, conn serial} -> aipc__ref */
  aipc__export *closing; /* closed exports waiting for importers' releases */
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

const aipc__exporter_name *const aipc__exporter_me = &g.me;

static const uint8_t dummy_secret[AIPC_SECRET_LEN];

/* Whitelist entries: the start time of the process that had the pid when the
 * exporter whitelisted it, stored in the pointer; WL_NOBODY when no process
 * had it (the entry then matches no process). */
_Static_assert(sizeof(uintptr_t) >= sizeof(uint64_t), "start times are kept in pointers");
#define WL_NOBODY ((void *)1)
static void *wl_bound(uint64_t start) { return (void *)(uintptr_t)(start + 2); }

static aipc__hkey ekey(uint64_t id) { return (aipc__hkey){id, 0}; }
static aipc__hkey rkey(uint64_t id, uint64_t serial) { return (aipc__hkey){id, serial}; }

/* ---- the lock, the name ----------------------------------------------------- */

void aipc__exporter_lock(void) { pthread_mutex_lock(&g.lock); }

void aipc__exporter_unlock(void) { pthread_mutex_unlock(&g.lock); }

void aipc__exporter_lock_reset(void) { g.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER; }

int aipc__exporter_take_name(void) {
  if (aipc__self_rename(&g.me.pid, &g.me.nonce) != 0) return -1;
  __atomic_store_n(&g.me.place, aipc__self_place(), __ATOMIC_RELAXED);
  g.me.euid = geteuid();
  return 0;
}

void aipc__exporter_forget_name(void) {
  g.me.pid = 0;
  g.me.nonce = 0; /* the child gets a name of its own when it first exports */
}

/* ---- exports --------------------------------------------------------------- */

/* Own key, secret checked; NULL else. */
aipc__export *aipc__export_lookup(uint64_t id, const uint8_t *secret) {
  aipc__export *e = aipc__hmap_get(&g.exports, ekey(id));
  int ok = aipc__secret_equal(e ? e->secret : dummy_secret, secret);
  return e && ok ? e : NULL;
}

aipc__export *aipc__export_get(uint64_t id) { return aipc__hmap_get(&g.exports, ekey(id)); }

int aipc__export_put(aipc__export *e) { return aipc__hmap_put(&g.exports, ekey(e->id), e); }

void aipc__export_free(aipc__export *e) {
  if (e->fd >= 0) close(e->fd);
  aipc__hmap_clear(&e->whitelist);
  free(e->remote);
  memset(e->secret, 0, sizeof e->secret);
  free(e);
}

static void closing_unlink(aipc__export *e) {
  if (!e->closing) return;
  if (e->cprev) e->cprev->cnext = e->cnext; else __atomic_store_n(&g.closing, e->cnext, __ATOMIC_RELAXED);
  if (e->cnext) e->cnext->cprev = e->cprev;
  e->cprev = e->cnext = NULL;
  e->closing = false;
}

void aipc__export_maybe_finish(aipc__export *e) {
  if (!e->closed || e->refs_total != 0) return;
  closing_unlink(e);
  aipc__hmap_remove(&g.exports, ekey(e->id));
  if (e->block) aipc__mem_unpin(e->block);
  aipc__export_free(e);
}

/* A just-closed export with importers left: swept until they release. */
bool aipc__export_closing(aipc__export *e) {
  if (e->closing || e->refs_total == 0) return false;
  e->closing = true;
  e->cprev = NULL;
  e->cnext = g.closing;
  if (g.closing) g.closing->cprev = e;
  bool first = g.closing == NULL;
  __atomic_store_n(&g.closing, e, __ATOMIC_RELAXED);
  return first;
}

/* g.closing only changes under g.lock (atomically, for the server's hint). */
aipc__export *aipc__exporter_closing(void) { return __atomic_load_n(&g.closing, __ATOMIC_RELAXED); }

/* ---- ledgers, references ------------------------------------------------------ */

static void slot_free(aipc__sconn *c, uint32_t slot) {
  if (slot == AIPC_NO_SLOT) return;
  if (c->n_free == c->cap_free) {
    size_t cap = c->cap_free ? c->cap_free * 2 : 64;
    uint32_t *v = realloc(c->free_slots, cap * sizeof *v);
    if (!v) return; /* the slot is lost to this connection, nothing worse */
    c->free_slots = v;
    c->cap_free = cap;
  }
  c->ledger[slot] = 0;
  c->free_slots[c->n_free++] = slot;
}

uint32_t aipc__ledger_slot_alloc(aipc__sconn *c) {
  if (!c->ledger) return AIPC_NO_SLOT;
  if (c->n_free) return c->free_slots[--c->n_free];
  if (c->next_slot < AIPC_LEDGER_SLOTS) return c->next_slot++;
  return AIPC_NO_SLOT; /* the importer releases this one with a RELEASE message */
}

int aipc__ledger_create(aipc__sconn *c) {
  /* Sealed so the importer can neither shrink it (a SIGBUS here) nor grow it. */
  int fd = aipc__os_memfd_sealed("ascend_ipc_ledger", AIPC_LEDGER_BYTES);
  if (fd < 0) return -1;
  void *p = aipc__os_map_shared(fd, AIPC_LEDGER_BYTES);
  if (!p) {
    close(fd);
    return -1;
  }
  c->ledger = p;
  return fd;
}

aipc__ref *aipc__ref_get(uint64_t export_id, uint64_t serial) {
  return aipc__hmap_get(&g.refs, rkey(export_id, serial));
}

int aipc__ref_put(uint64_t export_id, uint64_t serial, aipc__ref *r) {
  return aipc__hmap_put(&g.refs, rkey(export_id, serial), r);
}

void aipc__ref_free(aipc__ref *r) {
  if (!r->conn->dead) slot_free(r->conn, r->slot);
  if (r->eprev) r->eprev->enext = r->enext; else r->exp->refs = r->enext;
  if (r->enext) r->enext->eprev = r->eprev;
  if (r->cprev) r->cprev->cnext = r->cnext; else r->conn->refs = r->cnext;
  if (r->cnext) r->cnext->cprev = r->cprev;
  aipc__hmap_remove(&g.refs, rkey(r->exp->id, r->conn->serial));
  free(r);
}

void aipc__ref_release(aipc__ref *r, uint32_t n) {
  aipc__export *e = r->exp;
  r->count -= n;
  e->refs_total -= n;
  if (r->count == 0) aipc__ref_free(r);
  aipc__export_maybe_finish(e);
}

/* ---- grants ------------------------------------------------------------------- */

void aipc__grants_settle(aipc__sconn *c, uint64_t settled) {
  size_t keep = 0;
  for (size_t i = 0; i < c->n_grants; i++)
    if (c->grants[2 * i] >= settled) {
      c->grants[2 * keep] = c->grants[2 * i];
      c->grants[2 * keep + 1] = c->grants[2 * i + 1];
      keep++;
    }
  c->n_grants = keep;
}

void aipc__grants_add(aipc__sconn *c, uint64_t req, uint64_t export_id) {
  if (c->n_grants == AIPC_GRANTS_MAX) {
    memmove(c->grants, c->grants + 2, (c->n_grants - 1) * 2 * sizeof *c->grants);
    c->n_grants--;
  }
  if (c->n_grants == c->cap_grants) {
    size_t cap = c->cap_grants ? c->cap_grants * 2 : 4;
    uint64_t *v = realloc(c->grants, cap * 2 * sizeof *v);
    if (!v) return; /* then a CANCEL of it is not honoured: the reference stays until EOF */
    c->grants = v;
    c->cap_grants = cap;
  }
  c->grants[2 * c->n_grants] = req;
  c->grants[2 * c->n_grants + 1] = export_id;
  c->n_grants++;
}

/* ---- whitelists ------------------------------------------------------------------ */

aipc__wl_verdict aipc__whitelisted(const aipc__export *e, pid_t pid, uint64_t start) {
  if (e->flags & ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION) return AIPC_WL_YES;
  if ((uint32_t)pid == g.me.pid) return AIPC_WL_YES; /* alive, so no other process has its pid */
  void *v = aipc__hmap_get(&e->whitelist, aipc__pkey(pid));
  if (!v) return AIPC_WL_NOT_LISTED;
  if (v == WL_NOBODY) return AIPC_WL_NEVER_RAN;
  if (wl_bound(start) != v) return AIPC_WL_GONE;
  return AIPC_WL_YES;
}

/*
 * The whitelist entry for pid: bound to the process that has the pid now,
 * by its start time, so that a process given the pid after this one ends
 * is refused. No process has it: an entry that matches none (CANN accepts
 * such pids; a process that gets the pid later is not the one meant).
 * Read before g.lock is taken: /proc is slow.
 */
aclError aipc__whitelist_value(const char *call, int32_t pid, void **value) {
  uint64_t start;
  if (aipc__os_process_start(pid, &start) == 0) {
    *value = wl_bound(start);
    return ACL_SUCCESS;
  }
  if (errno == ESRCH) {
    *value = WL_NOBODY;
    return ACL_SUCCESS;
  }
  if (errno == ENOSYS)
    return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR,
                      "%s: cannot tell which process has pid %d: /proc is not mounted, and the whitelist binds each pid "
                      "to its process's start time there",
                      call, (int)pid);
  return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: cannot read the start time of process %d: %s", call, (int)pid,
                    strerror(errno));
}

int aipc__whitelist_add(aipc__export *e, int32_t pid, void *value) {
  /* Setting a pid again binds it to the process that has it now. */
  return aipc__hmap_put(&e->whitelist, aipc__pkey(pid), value);
}

int aipc__remote_add(aipc__export *e, uint32_t sdid, int32_t pid, void *value) {
  if (e->n_remote == e->cap_remote) {
    size_t cap = e->cap_remote ? e->cap_remote * 2 : 8;
    aipc__rpeer *v = realloc(e->remote, cap * sizeof *v);
    if (!v) return -1;
    e->remote = v;
    e->cap_remote = cap;
  }
  for (size_t i = 0; i < e->n_remote; i++)
    if (e->remote[i].sdid == sdid && e->remote[i].pid == pid) {
      e->remote[i].bound = value; /* set again: bound to the process that has the pid now */
      return 0;
    }
  e->remote[e->n_remote++] = (aipc__rpeer){sdid, pid, value};
  return 0;
}

aipc__wl_verdict aipc__whitelisted_remote(const aipc__export *e, uint32_t sdid, pid_t pid, uint64_t start) {
  /* Disabled validation reaches other servers for fabric handles only (CANN's
   * sample 12); keys and notifies cross servers through the inter-server
   * whitelist alone, the one way CANN documents. */
  if (e->kind == AIPC_OBJECT_PHYSICAL && (e->flags & ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION)) return AIPC_WL_YES;
  void *v = NULL;
  for (size_t i = 0; i < e->n_remote && !v; i++)
    if (e->remote[i].sdid == sdid && e->remote[i].pid == pid) v = e->remote[i].bound;
  /* aclrtMemSetPidToShareableHandle(V2) names pids without servers */
  if (!v && e->kind == AIPC_OBJECT_PHYSICAL) v = aipc__hmap_get(&e->whitelist, aipc__pkey(pid));
  if (!v) return AIPC_WL_NOT_LISTED;
  if (v == WL_NOBODY) return AIPC_WL_NEVER_RAN;
  if (wl_bound(start) != v) return AIPC_WL_GONE;
  return AIPC_WL_YES;
}

/* ---- clear, count, audit ------------------------------------------------------------ */

static void free_exports(bool unpin) {
  aipc__hkey k;
  void *v;
  for (size_t i = 0; aipc__hmap_next(&g.exports, &i, &k, &v);) {
    aipc__export *e = v;
    aipc__hmap_remove(&g.exports, k);
    if (unpin && e->block) aipc__mem_unpin(e->block);
    aipc__export_free(e);
  }
  aipc__hmap_clear(&g.exports);
}

void aipc__exporter_table_clear(bool unpin) {
  g.closing = NULL;
  free_exports(unpin);
  aipc__hmap_clear(&g.refs);
}

void aipc__exporter_table_count(aipc__exporter_counts *out) {
  out->exports = g.exports.len;
  out->references = g.refs.len;
  out->closing = 0;
  for (aipc__export *e = g.closing; e; e = e->cnext) out->closing++;
}

/* The books: per export, references by connection plus its own make its
 * total; every reference is in the map and on a live connection; a closed
 * export lives only while it is referenced, and is then on the closing list. */
const char *aipc__exporter_table_audit(void) {
  aipc__hkey k;
  void *v;
  size_t nrefs = 0;
  for (size_t i = 0; aipc__hmap_next(&g.exports, &i, &k, &v);) {
    aipc__export *e = v;
    if (k.a != e->id) return "an export is filed under another id";
    uint64_t sum = e->self_refs;
    for (aipc__ref *r = e->refs; r; r = r->enext) {
      if (r->exp != e) return "a reference on an export's list belongs to another export";
      if (r->conn->dead) return "a reference is held by a closed connection";
      if (r->count == 0) return "a reference counts nothing";
      if (aipc__hmap_get(&g.refs, rkey(e->id, r->conn->serial)) != r) return "a reference is not in the map";
      sum += r->count;
      nrefs++;
    }
    if (sum != e->refs_total) return "an export's total is not the sum of its references";
    if (e->closed && !(e->refs_total > 0 && e->closing)) return "a closed export lives on unreferenced";
  }
  if (nrefs != g.refs.len) return "the map holds references no export lists";
  for (aipc__export *e = g.closing; e; e = e->cnext)
    if (!e->closed || !e->closing) return "an open export is on the closing list";
  return NULL;
}
