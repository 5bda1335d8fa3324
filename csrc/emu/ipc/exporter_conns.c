/*
 * Exporter side, the importers' connections (exporter_internal.h): a record
 * per accepted connection, the count each process holds open, the poller
 * the server thread watches them on, and what follows from a connection's
 * end or its ledger: a connection that closes gives every reference it
 * held back, one whose ledger gives back more than it holds is closed.
 * Records of closed connections (zombies) stay allocated until the server
 * reaps them at the end of its batch, so a caller walking a list of them
 * under the lock never sees one freed. Also the test seams on connections.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emu/ipc/exporter_internal.h"
#include "emu/ipc/proto.h"

/* The connections; the exporter lock guards them. */
static struct exporter_conns {
  uint64_t next_serial;
  int poller_fd;
  aipc__hmap peer_conns; /* {pid, 0} -> live connections that pid opened (a count as a pointer) */
  aipc__sconn *sconns, *zombies;
} g = {.poller_fd = -1};

/* ---- the poller ------------------------------------------------------------------ */

int aipc__exporter_poller(void) { return g.poller_fd; }

int aipc__exporter_poller_open(void) {
  g.poller_fd = aipc__os_poller_create();
  return g.poller_fd < 0 ? -1 : 0;
}

void aipc__exporter_poller_close(void) {
  if (g.poller_fd >= 0) close(g.poller_fd);
  g.poller_fd = -1;
}

/* ---- connections ------------------------------------------------------------ */

size_t aipc__sconns_of(pid_t pid) { return (size_t)(uintptr_t)aipc__hmap_get(&g.peer_conns, aipc__pkey(pid)); }

void aipc__sconn_kill(aipc__sconn *c) {
  if (c->dead) return;
  c->dead = true;
  size_t n = aipc__sconns_of(c->pid);
  if (n > 1)
    aipc__hmap_put(&g.peer_conns, aipc__pkey(c->pid), (void *)(uintptr_t)(n - 1)); /* replaces: cannot fail */
  else
    aipc__hmap_remove(&g.peer_conns, aipc__pkey(c->pid));
  while (c->refs) {
    aipc__ref *r = c->refs;
    aipc__export *e = r->exp;
    e->refs_total -= r->count;
    aipc__ref_free(r);
    aipc__export_maybe_finish(e);
  }
  if (c->fd >= 0) {
    aipc__os_poller_del(g.poller_fd, c->fd);
    close(c->fd);
    c->fd = -1;
  }
  if (c->pidfd >= 0) close(c->pidfd);
  c->pidfd = -1;
  if (c->ledger) munmap(c->ledger, AIPC_LEDGER_BYTES);
  c->ledger = NULL;
  if (c->prev) c->prev->next = c->next; else g.sconns = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = NULL;
  c->next = g.zombies;
  g.zombies = c;
}

void aipc__sconns_reap(void) {
  while (g.zombies) {
    aipc__sconn *c = g.zombies;
    g.zombies = c->next;
    free(c->free_slots);
    free(c->grants);
    free(c);
  }
}

aipc__sconn *aipc__sconn_add(int fd, pid_t pid, uid_t uid, int pidfd) {
  aipc__sconn *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  if (aipc__hmap_put(&g.peer_conns, aipc__pkey(pid), (void *)(uintptr_t)(aipc__sconns_of(pid) + 1)) != 0) {
    free(c);
    return NULL;
  }
  c->fd = fd;
  c->pidfd = pidfd;
  c->serial = ++g.next_serial;
  c->pid = pid;
  c->uid = uid;
  c->next = g.sconns;
  if (g.sconns) g.sconns->prev = c;
  g.sconns = c;
  return c;
}

aipc__sender_verdict aipc__sconn_sender(aipc__sconn *c, pid_t pid, uint64_t *start) {
  if (pid != c->pid) return AIPC_SENDER_OTHER;
  if (!c->start_known) {
    /* With a pidfd, the read below is the opener's if the opener is still
     * alive after it (checked next): its pid was not given again meanwhile. */
    if (aipc__os_process_start(pid, &c->start) != 0) return AIPC_SENDER_GONE;
    c->start_known = true;
  }
  bool ended = c->pidfd >= 0 ? aipc__os_pidfd_ended(c->pidfd) : !aipc__os_process_alive(pid, c->start);
  if (ended) return AIPC_SENDER_GONE;
  *start = c->start;
  return AIPC_SENDER_OPENER;
}

aipc__sconn *aipc__sconn_find(uint64_t serial) {
  aipc__sconn *c = g.sconns;
  while (c && c->serial != serial) c = c->next;
  return c;
}

/* ---- ledgers --------------------------------------------------------------------- */

/* Takes what the importer added to r's ledger slot. Returns false when that
 * was more than it holds: the connection is killed (r is gone then). */
static bool ref_consume(aipc__ref *r) {
  aipc__sconn *c = r->conn;
  if (r->slot == AIPC_NO_SLOT || !c->ledger) return true;
  uint32_t n = __atomic_exchange_n(&c->ledger[r->slot], 0, __ATOMIC_ACQ_REL);
  if (n == 0) return true;
  if (n > r->count) {
    aipc__sconn_kill(c);
    return false;
  }
  aipc__ref_release(r, n);
  return true;
}

bool aipc__sconn_consume(uint64_t id, aipc__sconn *c) {
  aipc__ref *r = aipc__ref_get(id, c->serial);
  return r ? ref_consume(r) : true;
}

/* Closed exports still held by importers: take their ledger releases, at
 * most every AIPC_SWEEP_MS. Any step may kill a connection (a bad count) and so
 * finish other exports: everything is looked up again by id. Connections
 * stay allocated (zombies) until the end of the server's batch. */
void aipc__sconns_sweep(void) {
  static uint64_t last;
  uint64_t t = aipc__os_now_ms_coarse();
  if (t - last < AIPC_SWEEP_MS) return;
  last = t;
  size_t n = 0;
  for (aipc__export *e = aipc__exporter_closing(); e; e = e->cnext) n++;
  uint64_t *ids = malloc(n * sizeof *ids);
  if (!ids) return;
  size_t k = 0;
  for (aipc__export *e = aipc__exporter_closing(); e; e = e->cnext) ids[k++] = e->id;
  for (k = 0; k < n; k++) {
    aipc__export *e = aipc__export_get(ids[k]);
    if (!e || !e->closing) continue;
    size_t m = 0;
    for (aipc__ref *r = e->refs; r; r = r->enext) m++;
    aipc__sconn **v = malloc((m ? m : 1) * sizeof *v);
    if (!v) break;
    size_t i = 0;
    for (aipc__ref *r = e->refs; r; r = r->enext) v[i++] = r->conn;
    for (i = 0; i < m && aipc__export_get(ids[k]); i++)
      if (!v[i]->dead) aipc__sconn_consume(ids[k], v[i]);
    free(v);
  }
  free(ids);
}

/* ---- clear, fork ------------------------------------------------------------------ */

void aipc__sconns_clear(void) {
  while (g.sconns) aipc__sconn_kill(g.sconns);
  aipc__sconns_reap();
  aipc__hmap_clear(&g.peer_conns);
}

void aipc__sconns_child_reset(void) {
  /* The parent's thread does not exist here; its records and descriptors
   * are ours to drop. Blocks are not touched: memory.c already forgot them. */
  while (g.sconns) {
    aipc__sconn *c = g.sconns;
    g.sconns = c->next;
    while (c->refs) {
      aipc__ref *r = c->refs;
      c->refs = r->cnext;
      free(r);
    }
    if (c->fd >= 0) close(c->fd);
    if (c->pidfd >= 0) close(c->pidfd);
    if (c->ledger) munmap(c->ledger, AIPC_LEDGER_BYTES);
    free(c->free_slots);
    free(c->grants);
    free(c);
  }
  aipc__sconns_reap();
  aipc__hmap_clear(&g.peer_conns);
}

/* ---- seams for the fuzz target and white-box tests (exporter.h) ------------------ */

uint64_t aipc__exporter_adopt(int fd, pid_t pid, uid_t uid) {
  aipc__exporter_lock();
  int pidfd = aipc__os_peer_pidfd(-1, pid); /* the stand-in's pid, not the socket's peer */
  aipc__sconn *c = aipc__sconn_add(fd, pid, uid, pidfd);
  if (!c && pidfd >= 0) close(pidfd);
  if (c) {
    c->stand_in = true;
    c->sender = (aipc__os_sender){.pid = pid, .uid = uid, .gid = getegid()};
  }
  uint64_t serial = c ? c->serial : 0;
  aipc__exporter_unlock();
  return serial;
}

void aipc__exporter_impersonate(uint64_t serial, pid_t pid, uid_t uid) {
  aipc__exporter_lock();
  aipc__sconn *c = aipc__sconn_find(serial);
  if (c && c->stand_in) c->sender = (aipc__os_sender){.pid = pid, .uid = uid, .gid = getegid()};
  aipc__exporter_unlock();
}

void aipc__exporter_sweep(void) {
  aipc__exporter_lock();
  if (aipc__exporter_closing()) aipc__sconns_sweep();
  aipc__exporter_unlock();
}

void aipc__exporter_reap(void) {
  aipc__exporter_lock();
  aipc__sconns_reap();
  aipc__exporter_unlock();
}

void aipc__exporter_count(aipc__exporter_counts *out) {
  aipc__exporter_lock();
  aipc__exporter_table_count(out);
  out->connections = 0;
  for (aipc__sconn *c = g.sconns; c; c = c->next) out->connections++;
  aipc__exporter_unlock();
}

/* The books (aipc__exporter_table_audit), then the connections: each live
 * one counted for its process, none remembering too many grants. */
static const char *audit(void) {
  const char *why = aipc__exporter_table_audit();
  if (why) return why;
  aipc__hkey k;
  void *v;
  size_t nconns = 0, counted = 0;
  for (size_t i = 0; aipc__hmap_next(&g.peer_conns, &i, &k, &v);) counted += (uintptr_t)v;
  for (aipc__sconn *c = g.sconns; c; c = c->next) {
    nconns++;
    if (!aipc__hmap_get(&g.peer_conns, aipc__pkey(c->pid))) return "a live connection is not counted for its process";
    if (c->dead) return "a closed connection is on the live list";
    if (c->n_grants > AIPC_GRANTS_MAX) return "a connection remembers too many grants";
    for (aipc__ref *r = c->refs; r; r = r->cnext)
      if (r->conn != c) return "a reference on a connection's list belongs to another connection";
  }
  if (counted != nconns) return "the per-process connection counts do not add up to the live connections";
  return NULL;
}

const char *aipc__exporter_audit(void) {
  aipc__exporter_lock();
  const char *why = audit();
  aipc__exporter_unlock();
  return why;
}
