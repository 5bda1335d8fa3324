/*
 * Exporter side: the export table, and the server thread that answers
 * importers on this process's abstract Unix socket.
 *
 * Every socket operation of the server happens under g.lock and never
 * blocks (MSG_DONTWAIT): the thread waits on its poller with the lock
 * released, then takes it and serves what is ready. Because receiving is
 * done under the lock, an exporter's aclrtIpcMemClose can process what an
 * importer already sent (its RELEASE, its EOF) before it decides, in order
 * and without racing the thread (export_drain).
 *
 * Who is served is decided from what the kernel says: the peer's uid at
 * accept (SO_PEERCRED; other users are refused there), and the sender's
 * uid and pid with every IMPORT (SCM_CREDENTIALS), the pid bound to its
 * process by start time. docs/design-ipc.md, "Security model".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/hashmap.h"
#include "emu/emu.h"
#include "emu/ipc/exporter.h"
#include "emu/ipc/identity.h"
#include "emu/ipc/proto.h"
#include "emu/ipc/spin.h"
#include "os/os.h"

typedef struct aipc__sconn aipc__sconn;
typedef struct aipc__export aipc__export;

/* The references one importer connection holds on one export. */
typedef struct aipc__ref {
  aipc__export *exp;
  aipc__sconn *conn;
  uint32_t count;
  uint32_t slot;                   /* in conn->ledger, or AIPC_NO_SLOT */
  struct aipc__ref *eprev, *enext; /* in exp->refs */
  struct aipc__ref *cprev, *cnext; /* in conn->refs */
} aipc__ref;

typedef struct aipc__rpeer {
  uint32_t sdid;
  int32_t pid;
} aipc__rpeer;

struct aipc__export {
  uint64_t id;
  aipc__object_kind kind; /* what the key names: memory, a notify, an event */
  uint8_t secret[AIPC_SECRET_LEN];
  void *ptr;          /* exported address in this process */
  size_t size;
  int32_t device;
  uint64_t offset;    /* of ptr in its allocation (and memfd) */
  aipc__block *block; /* pinned while this record lives; NULL for PHYSICAL */
  int fd;             /* PHYSICAL: the allocation's memfd, this record's own; -1 else */
  uint64_t flags;     /* ACL_RT_IPC_MEM_EXPORT_FLAG_* */
  uint32_t attr;      /* ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_* */
  bool imported;      /* any import ever happened: attributes are frozen */
  bool closed;        /* the exporter closed it: no new imports */
  uint64_t refs_total; /* importer references, own-process ones included */
  uint32_t self_refs;  /* imports by this process of its own key */
  aipc__ref *refs;     /* per importer connection */
  aipc__hmap whitelist; /* pid -> its process's start time (wl_bound), or WL_NOBODY */
  aipc__rpeer *remote;  /* ImportPidInterServer entries of other servers */
  size_t n_remote, cap_remote;
  bool closing;         /* closed with importers left: in g.closing */
  aipc__export *cprev, *cnext;
};

struct aipc__sconn {
  int fd;
  uint64_t serial; /* never reused; keys the refs map */
  pid_t pid;       /* SO_PEERCRED at accept: who opened it (counted in g.peer_conns) */
  uid_t uid;
  bool dead;       /* closed; freed by the server thread at the end of its batch */
  /* The start time last read for a pid that sent on this connection: a
   * process with that pid sending here later is the same process, since a
   * recycled pid would need this very socket handed to it. */
  pid_t start_pid; /* 0: none read yet */
  uint64_t start;
  bool stand_in;        /* test seam: messages carry `sender`, not the kernel's credentials */
  aipc__os_sender sender;
  uint32_t *ledger; /* AIPC_LEDGER_SLOTS counters the importer adds releases to */
  bool ledger_sent;
  uint32_t next_slot; /* slots never used yet start here */
  uint32_t *free_slots;
  size_t n_free, cap_free;
  aipc__ref *refs;
  /* Grants the importer may still CANCEL: {request id, export id} pairs,
   * forgotten once an IMPORT says every request below theirs is settled. */
  uint64_t *grants;
  size_t n_grants, cap_grants; /* in pairs */
  aipc__sconn *prev, *next; /* in g.sconns or g.zombies */
};

/* Everything the exporter knows. g.lock guards all of it (see exporter.h). */
static struct exporter_state {
  pthread_mutex_t lock;
  uint32_t pid;   /* this process's name, once the server started */
  uint64_t nonce;
  uint32_t place; /* where its socket is: keys carry it */
  uid_t euid;
  uint64_t next_export_id;
  uint64_t next_serial;
  bool server_running;
  bool stop;
  pthread_t thread;
  int listen_fd, poller_fd, wake_fd;
  int door_fd;   /* the socket shareable handles are imported through, once one is issued */
  uint32_t door; /* its random number (the top half of every shareable handle), 0 before; read without the lock */
  bool listen_paused;
  aipc__hmap exports; /* {id, 0} -> aipc__export */
  aipc__hmap refs;    /* {export id, conn serial} -> aipc__ref */
  aipc__hmap peer_conns; /* {pid, 0} -> live connections that pid opened (a count as a pointer) */
  aipc__sconn *sconns, *zombies;
  aipc__export *closing; /* closed exports waiting for importers' releases */
} g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .listen_fd = -1,
    .door_fd = -1,
    .poller_fd = -1,
    .wake_fd = -1,
};

static char listen_tag, door_tag, wake_tag; /* epoll data of the non-connection fds */
static const uint8_t dummy_secret[AIPC_SECRET_LEN];

#define LISTEN_BACKLOG 4096
#define DRAIN_MAX 4096          /* messages per connection when a close drains it */
#define SWEEP_MS 20             /* how often closed exports with importers look at the ledgers */
/* Unsettled grants remembered per connection. A well-behaved importer has
 * at most one per thread waiting on the connection; past this the oldest
 * is forgotten, and a CANCEL of it can no longer be honoured. */
#define GRANTS_MAX 4096
/* Connections one process may hold open to this exporter. An importer needs
 * one (every thread shares it; a lost one is closed before the next); the
 * cap keeps a runaway or hostile process from taking the exporter's
 * descriptors, which aclrtMalloc and other importers need. */
#define PEER_CONNS_MAX 64

/* Whitelist entries: the start time of the process that had the pid when the
 * exporter whitelisted it, stored in the pointer; WL_NOBODY when no process
 * had it (the entry then matches no process). */
_Static_assert(sizeof(uintptr_t) >= sizeof(uint64_t), "start times are kept in pointers");
#define WL_NOBODY ((void *)1)
static void *wl_bound(uint64_t start) { return (void *)(uintptr_t)(start + 2); }

static aipc__hkey ekey(uint64_t id) { return (aipc__hkey){id, 0}; }
static aipc__hkey rkey(uint64_t id, uint64_t serial) { return (aipc__hkey){id, serial}; }
static aipc__hkey pkey(pid_t pid) { return (aipc__hkey){(uint64_t)(uint32_t)pid, 0}; }

/* ---- exports --------------------------------------------------------------- */

/* Own key, secret checked; NULL else. */
static aipc__export *export_lookup(const aipc__key *k) {
  aipc__export *e = aipc__hmap_get(&g.exports, ekey(k->export_id));
  int ok = aipc__secret_equal(e ? e->secret : dummy_secret, k->secret);
  return e && ok ? e : NULL;
}

static void export_free(aipc__export *e) {
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

static void export_maybe_finish(aipc__export *e) {
  if (!e->closed || e->refs_total != 0) return;
  closing_unlink(e);
  aipc__hmap_remove(&g.exports, ekey(e->id));
  if (e->block) aipc__mem_unpin(e->block);
  export_free(e);
}

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

static uint32_t slot_alloc(aipc__sconn *c) {
  if (!c->ledger) return AIPC_NO_SLOT;
  if (c->n_free) return c->free_slots[--c->n_free];
  if (c->next_slot < AIPC_LEDGER_SLOTS) return c->next_slot++;
  return AIPC_NO_SLOT; /* the importer releases this one with a RELEASE message */
}

static void ref_free(aipc__ref *r) {
  if (!r->conn->dead) slot_free(r->conn, r->slot);
  if (r->eprev) r->eprev->enext = r->enext; else r->exp->refs = r->enext;
  if (r->enext) r->enext->eprev = r->eprev;
  if (r->cprev) r->cprev->cnext = r->cnext; else r->conn->refs = r->cnext;
  if (r->cnext) r->cnext->cprev = r->cprev;
  aipc__hmap_remove(&g.refs, rkey(r->exp->id, r->conn->serial));
  free(r);
}

/* Formats up to a few importer pids of e into buf. */
static void export_importers(aipc__export *e, char *buf, size_t cap) {
  size_t n = 0, shown = 0;
  buf[0] = '\0';
  for (aipc__ref *r = e->refs; r; r = r->enext) {
    if (shown < 8) {
      int w = snprintf(buf + n, cap - n, "%s%d", shown ? ", " : "", (int)r->conn->pid);
      if (w > 0 && (size_t)w < cap - n) n += (size_t)w;
      shown++;
    } else if (shown == 8) {
      int w = snprintf(buf + n, cap - n, ", ...");
      if (w > 0 && (size_t)w < cap - n) n += (size_t)w;
      shown++;
    }
  }
  if (e->self_refs && n + 16 < cap) snprintf(buf + n, cap - n, "%s%d", n ? ", " : "", (int)g.pid);
}

/* ---- connections ------------------------------------------------------------ */

static size_t peer_conns(pid_t pid) { return (size_t)(uintptr_t)aipc__hmap_get(&g.peer_conns, pkey(pid)); }

static void conn_kill(aipc__sconn *c) {
  if (c->dead) return;
  c->dead = true;
  size_t n = peer_conns(c->pid);
  if (n > 1)
    aipc__hmap_put(&g.peer_conns, pkey(c->pid), (void *)(uintptr_t)(n - 1)); /* replaces: cannot fail */
  else
    aipc__hmap_remove(&g.peer_conns, pkey(c->pid));
  while (c->refs) {
    aipc__ref *r = c->refs;
    aipc__export *e = r->exp;
    e->refs_total -= r->count;
    ref_free(r);
    export_maybe_finish(e);
  }
  if (c->fd >= 0) {
    aipc__os_poller_del(g.poller_fd, c->fd);
    close(c->fd);
    c->fd = -1;
  }
  if (c->ledger) munmap(c->ledger, AIPC_LEDGER_BYTES);
  c->ledger = NULL;
  if (c->prev) c->prev->next = c->next; else g.sconns = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = NULL;
  c->next = g.zombies;
  g.zombies = c;
}

static void free_zombies(void) {
  while (g.zombies) {
    aipc__sconn *c = g.zombies;
    g.zombies = c->next;
    free(c->free_slots);
    free(c->grants);
    free(c);
  }
}

static int conn_send2(aipc__sconn *c, aipc__msg *m, int fd, int fd2);

static int conn_send(aipc__sconn *c, aipc__msg *m, int fd) { return conn_send2(c, m, fd, -1); }

static int conn_send2(aipc__sconn *c, aipc__msg *m, int fd, int fd2) {
  uint8_t buf[AIPC_PROTO_MAX];
  size_t len = aipc__proto_encode(m, buf);
  int fds[2], nfd = 0;
  if (fd >= 0) fds[nfd++] = fd;
  if (fd2 >= 0) fds[nfd++] = fd2;
  /* Never blocks: an importer that does not read its replies is dropped. */
  return aipc__os_send_fds(c->fd, buf, len, fds, nfd, MSG_DONTWAIT) == (ssize_t)len ? 0 : -1;
}

/* The start time of process pid, which just sent on c. 0 or -1. */
static int sender_start(aipc__sconn *c, pid_t pid, uint64_t *start) {
  if (c->start_pid == pid) {
    *start = c->start;
    return 0;
  }
  if (aipc__os_process_start(pid, start) != 0) return -1;
  c->start_pid = pid;
  c->start = *start;
  return 0;
}

typedef enum { WL_YES, WL_NOT_LISTED, WL_NEVER_RAN, WL_GONE } wl_verdict;

/* Whether process pid, sender of a request on c, may import e. */
static wl_verdict whitelisted(aipc__sconn *c, aipc__export *e, pid_t pid) {
  if (e->flags & ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION) return WL_YES;
  if ((uint32_t)pid == g.pid) return WL_YES; /* alive, so no other process has its pid */
  void *v = aipc__hmap_get(&e->whitelist, pkey(pid));
  if (!v) return WL_NOT_LISTED;
  if (v == WL_NOBODY) return WL_NEVER_RAN;
  uint64_t now;
  if (sender_start(c, pid, &now) != 0 || wl_bound(now) != v) return WL_GONE;
  return WL_YES;
}

/* Creates c's ledger; returns its fd (to send once), or -1 (then c has none). */
static int ledger_create(aipc__sconn *c) {
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

static void release_refs(aipc__ref *r, uint32_t n) {
  aipc__export *e = r->exp;
  r->count -= n;
  e->refs_total -= n;
  if (r->count == 0) ref_free(r);
  export_maybe_finish(e);
}

/* Takes what the importer added to r's ledger slot. Returns false when that
 * was more than it holds: the connection is killed (r is gone then). */
static bool ref_consume(aipc__ref *r) {
  aipc__sconn *c = r->conn;
  if (r->slot == AIPC_NO_SLOT || !c->ledger) return true;
  uint32_t n = __atomic_exchange_n(&c->ledger[r->slot], 0, __ATOMIC_ACQ_REL);
  if (n == 0) return true;
  if (n > r->count) {
    conn_kill(c);
    return false;
  }
  release_refs(r, n);
  return true;
}

/* Takes the ledger counts of export id's reference from c, if any. Returns false if c died. */
static bool consume_for(uint64_t id, aipc__sconn *c) {
  aipc__ref *r = aipc__hmap_get(&g.refs, rkey(id, c->serial));
  return r ? ref_consume(r) : true;
}

/* Forgets the grants of requests the importer says are settled. */
static void grants_settle(aipc__sconn *c, uint64_t settled) {
  size_t keep = 0;
  for (size_t i = 0; i < c->n_grants; i++)
    if (c->grants[2 * i] >= settled) {
      c->grants[2 * keep] = c->grants[2 * i];
      c->grants[2 * keep + 1] = c->grants[2 * i + 1];
      keep++;
    }
  c->n_grants = keep;
}

static void grants_add(aipc__sconn *c, uint64_t req, uint64_t export_id) {
  if (c->n_grants == GRANTS_MAX) {
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

/* q came from `from` (the kernel's record of its sender at send time). */
static void handle_import(aipc__sconn *c, const aipc__msg *q, const aipc__os_sender *from) {
  grants_settle(c, q->settled);
  aipc__msg a;
  /* Releases this importer already noted count first (keeps counts small). */
  if (!consume_for(q->export_id, c)) return;
  aipc__export *e = aipc__hmap_get(&g.exports, ekey(q->export_id));
  int secret_ok = aipc__secret_equal(e ? e->secret : dummy_secret, q->secret);
  int fd = -1, ledger_fd = -1;
  wl_verdict wl = WL_YES;
  if (from->uid != g.euid) {
    /* Checked per request: a process that changed its uid since it connected is refused now. */
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_NO_PERMISSION,
                     "process %d sent this request as uid %u but the exporter (process %d) runs as uid %u: "
                     "IPC memory is shared only between processes of the same user",
                     (int)from->pid, (unsigned)from->uid, (int)g.pid, (unsigned)g.euid);
  } else if (!e || !secret_ok) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_IPC_ERROR, "key not exported by process %d (closed, never issued, or forged)", (int)g.pid);
  } else if (e->closed) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_IPC_ERROR, "key was closed by its exporter (process %d): no new imports", (int)g.pid);
  } else if ((aipc__object_kind)(q->flags >> AIPC_IMPORT_KIND_SHIFT) != e->kind) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_INVALID_PARAM, "the key is %s, not %s", aipc__object_what(e->kind),
                     aipc__object_what((aipc__object_kind)(q->flags >> AIPC_IMPORT_KIND_SHIFT)));
  } else if (q->sdid != aipc__config_get()->sdid) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "importer is on server %u, the exporter on server %u: cross-server import needs the "
                         "super-node fabric; the emulator has none",
                         q->sdid, aipc__config_get()->sdid);
  } else if ((wl = whitelisted(c, e, from->pid)) == WL_NOT_LISTED) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_NO_PERMISSION,
                     "process %d is not on the whitelist of this key: the exporter (process %d) must %s", (int)from->pid,
                     (int)g.pid, aipc__object_allow(e->kind));
  } else if (wl == WL_NEVER_RAN) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_NO_PERMISSION,
                     "pid %d is on the whitelist of this key, but no process had that pid when the exporter (process %d) "
                     "whitelisted it, so the entry matches no process: whitelist a running process",
                     (int)from->pid, (int)g.pid);
  } else if (wl == WL_GONE) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_NO_PERMISSION,
                     "pid %d was whitelisted for this key, but the process that had it then is gone: the process "
                     "sending as pid %d now is another one, and is refused (the exporter is process %d)",
                     (int)from->pid, (int)from->pid, (int)g.pid);
  } else if (e->kind == AIPC_OBJECT_PHYSICAL) {
    /* The importer gets a descriptor of its own, its handle on the memory
     * for as long as it keeps it: nothing to count or release here. */
    e->imported = true;
    fd = e->fd;
    aipc__msg_grant(&a, q->req, e->device, e->attr, 0, e->size, AIPC_NO_SLOT, AIPC_REPLY_FD);
  } else {
    /* The block's memfd stays open while the export pins the block. */
    int memfd;
    bool freed = aipc__mem_pinned_freed(e->block, &memfd);
    aipc__ref *r = aipc__hmap_get(&g.refs, rkey(e->id, c->serial));
    if (freed) {
      aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_IPC_ERROR, "the memory of this key was freed by its exporter (process %d)", (int)g.pid);
    } else if (r && r->count == UINT32_MAX) {
      aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_INTERNAL_ERROR, "too many references from process %d", (int)c->pid);
    } else if (!r && (!(r = calloc(1, sizeof *r)) || aipc__hmap_put(&g.refs, rkey(e->id, c->serial), r) != 0)) {
      free(r);
      r = NULL;
      aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_INTERNAL_ERROR, "exporter (process %d) is out of memory", (int)g.pid);
    } else {
      if (r->count == 0) {
        if (!c->ledger && !c->ledger_sent) ledger_fd = ledger_create(c);
        r->slot = slot_alloc(c);
        r->exp = e;
        r->conn = c;
        r->enext = e->refs;
        if (e->refs) e->refs->eprev = r;
        e->refs = r;
        r->cnext = c->refs;
        if (c->refs) c->refs->cprev = r;
        c->refs = r;
      }
      r->count++;
      e->refs_total++;
      e->imported = true;
      fd = memfd; /* every grant carries the allocation's memfd: the importer keeps none */
      uint32_t flags = AIPC_REPLY_FD | (ledger_fd >= 0 ? AIPC_REPLY_LEDGER : 0);
      aipc__msg_grant(&a, q->req, e->device, e->attr, e->offset, e->size, r->slot, flags);
    }
  }
  int sent = conn_send2(c, &a, fd, ledger_fd);
  if (ledger_fd >= 0) {
    close(ledger_fd); /* the mapping stays; the importer has its own descriptor */
    c->ledger_sent = true;
  }
  if (sent != 0) {
    conn_kill(c); /* drops the reference just counted too */
    return;
  }
  if (a.status == ACL_SUCCESS && e->kind != AIPC_OBJECT_PHYSICAL) grants_add(c, q->req, q->export_id);
}

/* The importer gave up on request q->req: the reference it may have been
 * granted goes back. A CANCEL of a request not granted (refused, settled,
 * never sent) changes nothing. */
static void handle_cancel(aipc__sconn *c, const aipc__msg *q) {
  for (size_t i = 0; i < c->n_grants; i++) {
    if (c->grants[2 * i] != q->req) continue;
    uint64_t id = c->grants[2 * i + 1];
    c->n_grants--;
    c->grants[2 * i] = c->grants[2 * c->n_grants];
    c->grants[2 * i + 1] = c->grants[2 * c->n_grants + 1];
    if (!consume_for(id, c)) return;
    aipc__ref *r = aipc__hmap_get(&g.refs, rkey(id, c->serial));
    if (!r) {
      conn_kill(c); /* it released the very reference it cancels: a broken or hostile peer */
      return;
    }
    release_refs(r, 1);
    return;
  }
}

static void handle_release(aipc__sconn *c, const aipc__msg *q) {
  aipc__ref *r = aipc__hmap_get(&g.refs, rkey(q->export_id, c->serial));
  if (!r || q->count > r->count) {
    conn_kill(c); /* releasing what it does not hold: a broken or hostile peer */
    return;
  }
  release_refs(r, q->count);
}

static void send_version_error(aipc__sconn *c, const aipc__msg *q) {
  aipc__msg a;
  aipc__msg_error(&a, q->req, ACL_ERROR_RT_IPC_ERROR, "exporter (process %d) speaks IPC protocol version %d, not %u", (int)g.pid,
                       AIPC_PROTO_VERSION, (unsigned)q->version);
  (void)conn_send(c, &a, -1);
}

/* Serves up to max messages queued on c. g.lock held. */
static void conn_service(aipc__sconn *c, int max) {
  for (int i = 0; i < max && !c->dead; i++) {
    uint8_t buf[AIPC_PROTO_MAX];
    int fds[AIPC_PROTO_MAX_FDS], nfd;
    unsigned seen;
    aipc__os_sender from;
    ssize_t r = aipc__proto_recv_from(c->fd, buf, MSG_DONTWAIT, fds, &nfd, &seen, &from);
    if (r < 0) {
      if (errno == EINTR) {
        i--;
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) conn_kill(c);
      return;
    }
    for (int k = 0; k < nfd; k++) close(fds[k]);
    if (c->stand_in) from = c->sender;
    /* No credentials: SO_PASSCRED (inherited from the listening socket) makes
     * the kernel attach them to every packet, so this does not happen. */
    if (r == 0 || nfd || seen || from.pid <= 0) {
      conn_kill(c); /* EOF (the importer is gone), or a packet no importer sends */
      return;
    }
    aipc__msg m;
    const char *why;
    aipc__decode_result d = aipc__proto_decode(buf, (size_t)r, &m, &why);
    if (d == AIPC_DECODE_VERSION) {
      send_version_error(c, &m);
      conn_kill(c);
      return;
    }
    if (d != AIPC_DECODE_OK) {
      conn_kill(c);
      return;
    }
    /* Releases and cancels are taken from whoever holds the connection, with
     * any credentials: they can only give back what the connection holds. */
    if (m.type == AIPC_MSG_IMPORT)
      handle_import(c, &m, &from);
    else if (m.type == AIPC_MSG_RELEASE)
      handle_release(c, &m);
    else if (m.type == AIPC_MSG_CANCEL)
      handle_cancel(c, &m);
    else
      conn_kill(c); /* a reply type sent to the exporter */
  }
}

/* Processes what importers holding e already sent (their RELEASEs, EOFs). */
static void export_drain(aipc__export *e) {
  size_t n = 0;
  for (aipc__ref *r = e->refs; r; r = r->enext) n++;
  if (n == 0) return;
  aipc__sconn *one, **v = n == 1 ? &one : malloc(n * sizeof *v);
  if (!v) return;
  size_t i = 0;
  for (aipc__ref *r = e->refs; r; r = r->enext) v[i++] = r->conn;
  /* The connections stay allocated until the server thread frees zombies,
   * which it cannot do while we hold g.lock. */
  uint64_t id = e->id;
  for (i = 0; i < n; i++) {
    if (!v[i]->dead) conn_service(v[i], DRAIN_MAX);
    if (!v[i]->dead) consume_for(id, v[i]);
  }
  if (v != &one) free(v);
}

/* A just-closed export with importers left: swept until they release. */
static void export_closing(aipc__export *e) {
  if (e->closing || e->refs_total == 0) return;
  e->closing = true;
  e->cprev = NULL;
  e->cnext = g.closing;
  if (g.closing) g.closing->cprev = e;
  bool first = g.closing == NULL;
  __atomic_store_n(&g.closing, e, __ATOMIC_RELAXED);
  if (first && g.wake_fd >= 0) aipc__os_waker_wake(g.wake_fd); /* the server starts sweeping */
}

/* Closed exports still held by importers: take their ledger releases, at
 * most every SWEEP_MS. Any step may kill a connection (a bad count) and so
 * finish other exports: everything is looked up again by id. Connections
 * stay allocated (zombies) until the end of the server's batch. */
static void sweep_closing(void) {
  static uint64_t last;
  uint64_t t = aipc__os_now_ms_coarse();
  if (t - last < SWEEP_MS) return;
  last = t;
  size_t n = 0;
  for (aipc__export *e = g.closing; e; e = e->cnext) n++;
  uint64_t *ids = malloc(n * sizeof *ids);
  if (!ids) return;
  size_t k = 0;
  for (aipc__export *e = g.closing; e; e = e->cnext) ids[k++] = e->id;
  for (k = 0; k < n; k++) {
    aipc__export *e = aipc__hmap_get(&g.exports, ekey(ids[k]));
    if (!e || !e->closing) continue;
    size_t m = 0;
    for (aipc__ref *r = e->refs; r; r = r->enext) m++;
    aipc__sconn **v = malloc((m ? m : 1) * sizeof *v);
    if (!v) break;
    size_t i = 0;
    for (aipc__ref *r = e->refs; r; r = r->enext) v[i++] = r->conn;
    for (i = 0; i < m && aipc__hmap_get(&g.exports, ekey(ids[k])); i++)
      if (!v[i]->dead) consume_for(ids[k], v[i]);
    free(v);
  }
  free(ids);
}

/* A connection record for fd from (pid, uid), first in g.sconns. NULL when out of memory. */
static aipc__sconn *conn_add(int fd, pid_t pid, uid_t uid) {
  aipc__sconn *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  if (aipc__hmap_put(&g.peer_conns, pkey(pid), (void *)(uintptr_t)(peer_conns(pid) + 1)) != 0) {
    free(c);
    return NULL;
  }
  c->fd = fd;
  c->serial = ++g.next_serial;
  c->pid = pid;
  c->uid = uid;
  c->next = g.sconns;
  if (g.sconns) g.sconns->prev = c;
  g.sconns = c;
  return c;
}

/* Refuses a connection as soon as it is accepted: one ERROR, with request id
 * 0 since no request was read (it answers whatever the peer asked), then
 * closed so that the peer still reads it. The peer gets no record, no
 * ledger, nothing that outlives this call. */
static void refuse_at_accept(int fd, aclError status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void refuse_at_accept(int fd, aclError status, const char *fmt, ...) {
  char text[AIPC_PROTO_TEXT_MAX + 1];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  aipc__msg m;
  aipc__msg_error(&m, 0, status, "%s", text);
  uint8_t buf[AIPC_PROTO_MAX];
  size_t len = aipc__proto_encode(&m, buf);
  (void)aipc__os_send_fds(fd, buf, len, NULL, 0, MSG_DONTWAIT); /* a fresh socket has room */
  aipc__os_close_after_reply(fd);
}

static void accept_all(int listen_fd) {
  for (int i = 0; i < 64; i++) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* Out of descriptors: stop listening for a while instead of spinning. */
        aipc__os_poller_del(g.poller_fd, g.listen_fd);
        if (g.door_fd >= 0) aipc__os_poller_del(g.poller_fd, g.door_fd);
        g.listen_paused = true;
      }
      return;
    }
    pid_t pid;
    uid_t uid;
    aipc__sconn *c = NULL;
    if (aipc__os_peer_cred(fd, &pid, &uid) != 0) {
      close(fd);
      continue;
    }
    /* Other users are refused before they cost anything; so are a process's
     * connections beyond the cap. */
    if (uid != g.euid) {
      refuse_at_accept(fd, ACL_ERROR_RT_NO_PERMISSION,
                       "process %d runs as uid %u but the exporter (process %d) runs as uid %u: "
                       "IPC memory is shared only between processes of the same user",
                       (int)pid, (unsigned)uid, (int)g.pid, (unsigned)g.euid);
      continue;
    }
    if (peer_conns(pid) >= PEER_CONNS_MAX) {
      refuse_at_accept(fd, ACL_ERROR_RT_IPC_ERROR,
                       "process %d already has %d connections open to exporter process %d, the most one process "
                       "may have (an importer needs one): connection refused",
                       (int)pid, PEER_CONNS_MAX, (int)g.pid);
      continue;
    }
    if (!(c = conn_add(fd, pid, uid))) {
      close(fd);
      continue;
    }
    if (aipc__os_poller_add(g.poller_fd, fd, c) != 0) {
      conn_kill(c); /* closes fd */
      continue;
    }
  }
}

/* Either socket may already be back (a resume that failed half way). */
static bool poll_again(int fd, void *tag) { return aipc__os_poller_add(g.poller_fd, fd, tag) == 0 || errno == EEXIST; }

static void resume_listen(void) {
  if (!poll_again(g.listen_fd, &listen_tag)) return;
  if (g.door_fd >= 0 && !poll_again(g.door_fd, &door_tag)) return;
  g.listen_paused = false;
}

static void *server_main(void *arg) {
  /* Running: from here on this thread allocates only under g.lock, which a
   * fork's prepare handler holds, so a forked child never inherits an
   * allocator lock held by it (glibc's malloc handles that itself; the
   * sanitizers' allocators do not). */
  sem_post((sem_t *)arg);
  void *tags[64];
  aipc__spin spin = {0}; /* this thread's alone */
  for (;;) {
    /* listen_paused is written only by this thread while it runs. */
    /* g.closing only changes under g.lock, and its first entry wakes us. */
    int timeout = g.listen_paused ? 50 : -1;
    if (__atomic_load_n(&g.closing, __ATOMIC_RELAXED)) timeout = SWEEP_MS;
    /* Only the steady wait learns and polls: the others are timed on purpose. */
    uint64_t start = aipc__os_now_ns(), until = timeout < 0 ? aipc__spin_until(&spin, start) : 0;
    int n = 0;
    if (until)
      while ((n = aipc__os_poller_wait(g.poller_fd, tags, 64, 0)) == 0 && aipc__spin_again(until)) {
      }
    if (n == 0) n = aipc__os_poller_wait(g.poller_fd, tags, 64, timeout);
    if (timeout < 0 && n > 0) aipc__spin_learn(&spin, aipc__os_now_ns() - start);
    pthread_mutex_lock(&g.lock);
    if (g.stop) {
      pthread_mutex_unlock(&g.lock);
      break;
    }
    if (g.listen_paused) resume_listen();
    for (int i = 0; i < n; i++) {
      void *tag = tags[i];
      if (tag == &listen_tag) {
        accept_all(g.listen_fd);
      } else if (tag == &door_tag) {
        accept_all(g.door_fd);
      } else if (tag == &wake_tag) {
        aipc__os_waker_drain(g.wake_fd);
      } else {
        /* One message per wake-up: the poller is level-triggered, and reading
         * on until EAGAIN would cost an extra recvmsg per request. */
        aipc__sconn *c = tag;
        if (!c->dead) conn_service(c, 1);
      }
    }
    if (g.closing) sweep_closing();
    free_zombies();
    pthread_mutex_unlock(&g.lock);
  }
  return NULL;
}

/* ---- start, stop, fork ------------------------------------------------------- */

static void close_fds(void) {
  if (g.listen_fd >= 0) close(g.listen_fd);
  if (g.door_fd >= 0) close(g.door_fd);
  g.door_fd = -1;
  __atomic_store_n(&g.door, 0, __ATOMIC_RELEASE);
  if (g.poller_fd >= 0) close(g.poller_fd);
  if (g.wake_fd >= 0) close(g.wake_fd);
  g.listen_fd = g.poller_fd = g.wake_fd = -1;
}

/* Starts the server thread once. g.lock held. */
/* Makes the bound socket fd a listener whose every packet carries its
 * sender's credentials (checked per request). 0, or -1 with errno and *what. */
static int start_listening(int fd, const char **what) {
  *what = "setsockopt(SO_PASSCRED)";
  if (aipc__os_pass_credentials(fd) != 0) return -1;
  *what = "listen";
  return listen(fd, LISTEN_BACKLOG);
}

static aclError server_start(const char *call) {
  if (g.server_running) return ACL_SUCCESS;
  if (aipc__self_get(&g.pid, &g.nonce) != 0)
    return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: getrandom failed: %s", call, strerror(errno));
  __atomic_store_n(&g.place, aipc__self_place(), __ATOMIC_RELAXED);
  g.euid = geteuid();
  g.listen_fd = g.poller_fd = g.wake_fd = g.door_fd = -1;
  struct sockaddr_un sa;
  unsigned salen = aipc__self_sockaddr(&sa, g.pid, g.nonce);
  const char *what = "socket";
  g.listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (g.listen_fd < 0) goto fail;
  what = "bind";
  if (bind(g.listen_fd, (struct sockaddr *)&sa, salen) != 0) goto fail;
  if (start_listening(g.listen_fd, &what) != 0) goto fail;
  what = "epoll_create1";
  g.poller_fd = aipc__os_poller_create();
  if (g.poller_fd < 0) goto fail;
  what = "eventfd";
  g.wake_fd = aipc__os_waker_create();
  if (g.wake_fd < 0) goto fail;
  what = "epoll_ctl";
  if (aipc__os_poller_add(g.poller_fd, g.listen_fd, &listen_tag) != 0) goto fail;
  if (aipc__os_poller_add(g.poller_fd, g.wake_fd, &wake_tag) != 0) goto fail;

  g.stop = false;
  g.listen_paused = false;
  sem_t started;
  sem_init(&started, 0, 0);
  int rc = aipc__os_thread_start(&g.thread, server_main, &started);
  if (rc != 0) {
    sem_destroy(&started);
    errno = rc;
    what = "pthread_create";
    goto fail;
  }
  while (sem_wait(&started) != 0 && errno == EINTR) {
  }
  sem_destroy(&started);
  g.server_running = true;
  return ACL_SUCCESS;
fail:;
  int e = errno;
  close_fds();
  return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: cannot start the IPC server of process %d: %s: %s", call,
                    (int)g.pid, what, strerror(e));
}

/* Stops and joins the server thread. g.lock not held. */
static void server_stop_thread(void) {
  pthread_mutex_lock(&g.lock);
  if (!g.server_running || g.stop) {
    pthread_mutex_unlock(&g.lock);
    return;
  }
  g.stop = true;
  pthread_t t = g.thread;
  aipc__os_waker_wake(g.wake_fd);
  pthread_mutex_unlock(&g.lock);
  pthread_join(t, NULL);
}

static void free_exports(bool unpin) {
  aipc__hkey k;
  void *v;
  for (size_t i = 0; aipc__hmap_next(&g.exports, &i, &k, &v);) {
    aipc__export *e = v;
    aipc__hmap_remove(&g.exports, k);
    if (unpin && e->block) aipc__mem_unpin(e->block);
    export_free(e);
  }
  aipc__hmap_clear(&g.exports);
}

/* After server_stop_thread: closes, unpins and frees everything. g.lock held. */
static void server_clear(void) {
  while (g.sconns) conn_kill(g.sconns);
  free_zombies();
  g.closing = NULL;
  free_exports(true);
  aipc__hmap_clear(&g.refs);
  aipc__hmap_clear(&g.peer_conns);
  close_fds();
  g.server_running = false;
  g.stop = false;
  g.listen_paused = false;
}

/* A forked child: forget, close fds, free. */
static void server_child_reset(void) {
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
    if (c->ledger) munmap(c->ledger, AIPC_LEDGER_BYTES);
    free(c->free_slots);
    free(c->grants);
    free(c);
  }
  free_zombies();
  g.closing = NULL;
  free_exports(false);
  aipc__hmap_clear(&g.refs);
  aipc__hmap_clear(&g.peer_conns);
  close_fds(); /* the listening socket above all: it must not keep the parent's name alive */
  g.server_running = false;
  g.stop = false;
  g.listen_paused = false;
}

/* ---- the calls (exporter.h) ------------------------------------------------------ */

aclError aipc__exporter_export(const char *call, aipc__object_kind kind, void *devPtr, size_t size, uint64_t flags,
                               char key[AIPC_KEY_CHARS + 1]) {
  if (kind != AIPC_OBJECT_MEMORY) {
    /* The runtime's own call for an event's or notify's state page */
    aipc__block b;
    bool ok = aipc__mem_lookup(devPtr, &b) && b.kind == AIPC_MEM_SYNC && b.base == (uintptr_t)devPtr && size == b.size;
    if (!ok) return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: %p is not an event's or notify's state", call, devPtr);
  }
#define C "%s"
  pthread_mutex_lock(&g.lock);
  aclError rc = ACL_SUCCESS;
  aipc__export *e = NULL;
  /* Checked and pinned under memory's lock; the server starts outside it. */
  aipc__mem_pinned pin = {0};
  if ((rc = aipc__mem_export_pin(call, devPtr, size, kind == AIPC_OBJECT_MEMORY ? AIPC_MEM_DEVICE : AIPC_MEM_SYNC,
                                 &pin)) != ACL_SUCCESS) {
    /* message recorded */
  } else if ((rc = server_start(call)) != ACL_SUCCESS) {
    /* message recorded */
  } else if (!(e = calloc(1, sizeof *e))) {
    rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, C ": out of memory", call);
  } else if (aipc__random(e->secret, AIPC_SECRET_LEN) != 0) {
    rc = aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, C ": getrandom failed: %s", call, strerror(errno));
  } else {
    e->id = ++g.next_export_id;
    e->fd = -1;
    e->kind = kind;
    e->ptr = devPtr;
    e->size = size;
    e->device = pin.device;
    e->offset = pin.offset;
    e->block = pin.block;
    e->flags = flags;
    e->attr = ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_SIO;
    if (aipc__hmap_put(&g.exports, ekey(e->id), e) != 0)
      rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, C ": out of memory", call);
  }
  if (rc == ACL_SUCCESS) {
    aipc__key_write(kind, g.pid, aipc__config_get()->sdid, g.nonce, g.place, e->id, e->secret, key);
  } else {
    if (pin.block) aipc__mem_unpin(pin.block);
    free(e);
  }
  pthread_mutex_unlock(&g.lock);
  return rc;
#undef C
}

/* Opens the door: a second listening socket, named by a random number
 * that every shareable handle of this process carries (a 64-bit handle has
 * no room for the process's nonce). Nobody can take the name first without
 * guessing it; a name in use (another process drew the same number) is
 * drawn again. The importer checks that the door is served by a process of
 * its user, and the server treats both sockets alike. g.lock held, server
 * running. */
static aclError door_open(const char *call) {
  if (g.door_fd >= 0) return ACL_SUCCESS;
  const char *what = "socket";
  uint32_t door = 0;
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) goto fail;
  for (int tries = 0;; tries++) {
    what = "getrandom";
    door = 0;
    while (door == 0)
      if (aipc__random(&door, sizeof door) != 0) goto fail;
    what = "bind";
    struct sockaddr_un sa;
    unsigned salen = aipc__self_sockaddr(&sa, door, 0);
    if (bind(fd, (struct sockaddr *)&sa, salen) == 0) break;
    if (errno != EADDRINUSE || tries == 16) goto fail;
  }
  if (start_listening(fd, &what) != 0) goto fail;
  what = "epoll_ctl";
  /* While accepting is paused for lack of descriptors, resume_listen adds it. */
  if (!g.listen_paused && aipc__os_poller_add(g.poller_fd, fd, &door_tag) != 0) goto fail;
  g.door_fd = fd;
  __atomic_store_n(&g.door, door, __ATOMIC_RELEASE);
  return ACL_SUCCESS;
fail:;
  int e = errno;
  if (fd >= 0) close(fd);
  return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: cannot open the shareable-handle socket of process %d: %s: %s", call,
                    (int)g.pid, what, strerror(e));
}

aclError aipc__exporter_export_physical(const char *call, int fd, uint64_t size, int32_t device, uint64_t flags,
                                        uint64_t *handle) {
  pthread_mutex_lock(&g.lock);
  aclError rc = server_start(call);
  aipc__export *e = NULL;
  if (rc != ACL_SUCCESS) goto out;
  if ((rc = door_open(call)) != ACL_SUCCESS) goto out;
  if (!(e = calloc(1, sizeof *e))) {
    rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
    goto out;
  }
  e->fd = -1;
  /* A fresh random part, unlike any live export's id (counters stay far below 2^32). */
  uint64_t id = 0;
  for (int tries = 0; tries < 16 && id == 0; tries++) {
    uint64_t r;
    if (aipc__random(&r, sizeof r) != 0) break;
    r &= AIPC_SHAREABLE_RANDOM_MASK;
    uint64_t cand = (uint64_t)g.door << AIPC_SHAREABLE_DOOR_SHIFT | r;
    if (r != 0 && !aipc__hmap_get(&g.exports, ekey(cand))) id = cand;
  }
  if (id == 0) {
    rc = aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: getrandom failed: %s", call, strerror(errno));
    goto out;
  }
  if ((e->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
    rc = aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: cannot keep the allocation's descriptor: %s", call,
                    strerror(errno));
    goto out;
  }
  e->id = id;
  e->kind = AIPC_OBJECT_PHYSICAL;
  e->size = size;
  e->device = device;
  e->flags = flags;
  e->attr = ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_SIO;
  if (aipc__hmap_put(&g.exports, ekey(e->id), e) != 0) {
    rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
    goto out;
  }
  *handle = id;
  e = NULL;
out:
  if (e) export_free(e);
  pthread_mutex_unlock(&g.lock);
  return rc;
}

bool aipc__exporter_owns(const aipc__key *k) {
  /* A shareable handle names its exporter by door (nonce 0). */
  if (k->kind == AIPC_OBJECT_PHYSICAL && k->nonce == 0)
    return k->pid != 0 && k->pid == __atomic_load_n(&g.door, __ATOMIC_ACQUIRE);
  /* The place too: a key has one spelling, and that is the one issued here. */
  return aipc__self_is(k->pid, k->nonce) && k->place == __atomic_load_n(&g.place, __ATOMIC_RELAXED);
}

/* g.lock held: the live export of this process that k names, or a recorded error. */
static aclError own_export(const char *call, const aipc__key *k, aipc__export **out) {
  if (!aipc__exporter_owns(k) && k->nonce == 0)
    return aipc__fail(ACL_ERROR_RT_NO_PERMISSION,
                      "%s: only the exporting process may do this, and this process (%d) did not export the handle",
                      call, (int)getpid());
  if (!aipc__exporter_owns(k))
    return aipc__fail(ACL_ERROR_RT_NO_PERMISSION,
                      "%s: only the exporting process (%u) may do this; this is process %d", call, k->pid,
                      (int)getpid());
  aipc__export *e = export_lookup(k);
  if (e && e->kind != k->kind) e = NULL; /* an id of another kind's export: no such key */
  if (!e || e->closed)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: key is not a live export of this process (%s)", call,
                      e ? "it was closed" : "closed, never issued, or forged");
  *out = e;
  return ACL_SUCCESS;
}

/*
 * The whitelist entry for pid: bound to the process that has the pid now,
 * by its start time, so that a process given the pid after this one ends
 * is refused. No process has it: an entry that matches none (CANN accepts
 * such pids; a process that gets the pid later is not the one meant).
 * Read before g.lock is taken: /proc is slow.
 */
static aclError whitelist_value(const char *call, int32_t pid, void **value) {
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

static int whitelist_add(aipc__export *e, int32_t pid, void *value) {
  /* Setting a pid again binds it to the process that has it now. */
  return aipc__hmap_put(&e->whitelist, pkey(pid), value);
}

/* The whitelist values of pids (whitelist_value), in a new array, or a recorded error. */
static aclError whitelist_values(const char *call, const aipc__key *k, const int32_t *pids, size_t num,
                                 void ***out) {
  *out = NULL;
  if (!aipc__exporter_owns(k)) { /* the cheap refusal before any /proc read */
    pthread_mutex_lock(&g.lock);
    aipc__export *e;
    aclError rc = own_export(call, k, &e);
    pthread_mutex_unlock(&g.lock);
    return rc;
  }
  void **v = malloc((num ? num : 1) * sizeof *v);
  if (!v) return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
  for (size_t i = 0; i < num; i++) {
    aclError rc = whitelist_value(call, pids[i], &v[i]);
    if (rc != ACL_SUCCESS) {
      free(v);
      return rc;
    }
  }
  *out = v;
  return ACL_SUCCESS;
}

aclError aipc__exporter_allow(const char *call, const aipc__key *k, const int32_t *pids, size_t num) {
  void **values;
  aclError rc = whitelist_values(call, k, pids, num, &values);
  if (rc != ACL_SUCCESS) return rc;
  pthread_mutex_lock(&g.lock);
  aipc__export *e = NULL;
  rc = own_export(call, k, &e);
  for (size_t i = 0; rc == ACL_SUCCESS && i < num; i++)
    if (whitelist_add(e, pids[i], values[i]) != 0)
      rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
  pthread_mutex_unlock(&g.lock);
  free(values);
  return rc;
}

/* Records an importer of another server (it would need the fabric). 0 or -1. */
static int remote_add(aipc__export *e, uint32_t sdid, int32_t pid) {
  if (e->n_remote == e->cap_remote) {
    size_t cap = e->cap_remote ? e->cap_remote * 2 : 8;
    aipc__rpeer *v = realloc(e->remote, cap * sizeof *v);
    if (!v) return -1;
    e->remote = v;
    e->cap_remote = cap;
  }
  e->remote[e->n_remote++] = (aipc__rpeer){sdid, pid};
  return 0;
}

aclError aipc__exporter_allow_servers(const char *call, const aipc__key *k, const aclrtServerPid *servers,
                                      size_t num, uint32_t here) {
  /* This server's pids, in order, bound to their processes first. */
  size_t nlocal = 0;
  for (size_t i = 0; i < num; i++)
    if (servers[i].sdid == here) nlocal += servers[i].num;
  int32_t *local = calloc(nlocal ? nlocal : 1, sizeof *local);
  if (!local) return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
  nlocal = 0;
  for (size_t i = 0; i < num; i++)
    if (servers[i].sdid == here)
      for (size_t j = 0; j < servers[i].num; j++) local[nlocal++] = servers[i].pid[j];
  void **values;
  aclError rc = whitelist_values(call, k, local, nlocal, &values);
  if (rc != ACL_SUCCESS) {
    free(local);
    return rc;
  }
  pthread_mutex_lock(&g.lock);
  aipc__export *e = NULL;
  rc = own_export(call, k, &e);
  size_t next_local = 0;
  for (size_t i = 0; rc == ACL_SUCCESS && i < num; i++) {
    const aclrtServerPid *sp = &servers[i];
    for (size_t j = 0; rc == ACL_SUCCESS && j < sp->num; j++) {
      int bad = sp->sdid == here ? whitelist_add(e, sp->pid[j], values[next_local++])
                                 : remote_add(e, sp->sdid, sp->pid[j]);
      if (bad) rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
    }
  }
  pthread_mutex_unlock(&g.lock);
  free(values);
  free(local);
  return rc;
}

aclError aipc__exporter_set_attr(const char *call, const aipc__key *k, uint32_t attr) {
  pthread_mutex_lock(&g.lock);
  aipc__export *e = NULL;
  aclError rc = own_export(call, k, &e);
  if (rc == ACL_SUCCESS && e->imported)
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM,
                    "%s: the key was already imported; attributes must be set before the first import", call);
  if (rc == ACL_SUCCESS) e->attr = attr;
  pthread_mutex_unlock(&g.lock);
  return rc;
}

bool aipc__exporter_get_attr(const aipc__key *k, uint64_t *attr) {
  if (!aipc__exporter_owns(k)) return false;
  pthread_mutex_lock(&g.lock);
  aipc__export *e = export_lookup(k);
  if (e) *attr = e->attr;
  pthread_mutex_unlock(&g.lock);
  return e != NULL;
}

aclError aipc__exporter_import_own(const char *call, const aipc__key *k, void **devPtr) {
  aclError rc = ACL_SUCCESS;
  pthread_mutex_lock(&g.lock);
  aipc__export *e = export_lookup(k);
  if (!e)
    rc = aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: key not exported by process %d (closed, never issued, or forged)",
                    call, (int)g.pid);
  else if (e->closed)
    rc = aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: key was closed by its exporter (process %d): no new imports", call,
                    (int)g.pid);
  else if (e->kind != k->kind)
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: the key is %s, not %s", call, aipc__object_what(e->kind),
                    aipc__object_what(k->kind));
  else if (aipc__mem_pinned_freed(e->block, NULL))
    rc = aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: the memory of this key was freed by its exporter (aclrtFree)", call);
  else if (e->self_refs == UINT32_MAX)
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: key imported too many times", call);
  if (rc == ACL_SUCCESS) {
    e->self_refs++;
    e->refs_total++;
    e->imported = true;
    *devPtr = e->ptr;
  }
  pthread_mutex_unlock(&g.lock);
  return rc;
}

aclError aipc__exporter_close(const char *call, const aipc__key *k, bool lenient, bool *found) {
  *found = false;
  if (!aipc__exporter_owns(k)) return ACL_ERROR_INVALID_PARAM;
  aclError rc = ACL_SUCCESS;
  pthread_mutex_lock(&g.lock);
  aipc__export *e = export_lookup(k);
  if (!e || e->kind != k->kind) {
    rc = ACL_ERROR_INVALID_PARAM;
    goto out;
  }
  *found = true;
  if (e->self_refs) {
    e->self_refs--;
    e->refs_total--;
    export_maybe_finish(e);
    goto out;
  }
  if (e->closed) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM,
                    "%s: key was already closed by this process (%llu importer reference(s) still hold the memory)",
                    call, (unsigned long long)e->refs_total);
    goto out;
  }
  /* What importers already sent (RELEASE, EOF) counts before deciding. */
  export_drain(e);
  if (e->refs_total && aipc__config_get()->strict && !lenient) {
    char who[160];
    export_importers(e, who, sizeof who);
    rc = aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR,
                    "%s: key is still imported by process(es) %s (%llu reference(s)); every importer must call "
                    "aclrtIpcMemClose first (ASCEND_IPC_STRICT=1)",
                    call, who, (unsigned long long)e->refs_total);
    goto out;
  }
  e->closed = true;
  export_closing(e);
  export_maybe_finish(e);
out:
  pthread_mutex_unlock(&g.lock);
  return rc;
}

/* ---- finalize, fork ------------------------------------------------------------- */

void aipc__exporter_finalize(void) {
  server_stop_thread();
  pthread_mutex_lock(&g.lock);
  server_clear();
  pthread_mutex_unlock(&g.lock);
}

void aipc__exporter_atfork_prepare(void) { pthread_mutex_lock(&g.lock); }

void aipc__exporter_atfork_parent(void) { pthread_mutex_unlock(&g.lock); }

void aipc__exporter_atfork_child(void) {
  g.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  server_child_reset();
  g.pid = 0;
  g.nonce = 0; /* the child gets a name of its own when it first exports */
}

/* ---- seams for the fuzz target and white-box tests ------------------------------ */

void aipc__exporter_stop_server(void) { server_stop_thread(); }

uint64_t aipc__exporter_adopt(int fd, pid_t pid, uid_t uid) {
  pthread_mutex_lock(&g.lock);
  aipc__sconn *c = conn_add(fd, pid, uid);
  if (c) {
    c->stand_in = true;
    c->sender = (aipc__os_sender){.pid = pid, .uid = uid, .gid = getegid()};
  }
  uint64_t serial = c ? c->serial : 0;
  pthread_mutex_unlock(&g.lock);
  return serial;
}

void aipc__exporter_impersonate(uint64_t serial, pid_t pid, uid_t uid) {
  pthread_mutex_lock(&g.lock);
  aipc__sconn *c = g.sconns;
  while (c && c->serial != serial) c = c->next;
  if (c && c->stand_in) c->sender = (aipc__os_sender){.pid = pid, .uid = uid, .gid = getegid()};
  pthread_mutex_unlock(&g.lock);
}

bool aipc__exporter_serve(uint64_t serial, int max) {
  pthread_mutex_lock(&g.lock);
  aipc__sconn *c = g.sconns;
  while (c && c->serial != serial) c = c->next;
  if (c) conn_service(c, max);
  bool open = c && !c->dead;
  pthread_mutex_unlock(&g.lock);
  return open;
}

void aipc__exporter_sweep(void) {
  pthread_mutex_lock(&g.lock);
  if (g.closing) sweep_closing();
  pthread_mutex_unlock(&g.lock);
}

void aipc__exporter_reap(void) {
  pthread_mutex_lock(&g.lock);
  free_zombies();
  pthread_mutex_unlock(&g.lock);
}

void aipc__exporter_count(aipc__exporter_counts *out) {
  pthread_mutex_lock(&g.lock);
  out->exports = g.exports.len;
  out->references = g.refs.len;
  out->connections = 0;
  for (aipc__sconn *c = g.sconns; c; c = c->next) out->connections++;
  out->closing = 0;
  for (aipc__export *e = g.closing; e; e = e->cnext) out->closing++;
  pthread_mutex_unlock(&g.lock);
}

/* The books: per export, references by connection plus its own make its
 * total; every reference is in the map and on a live connection; a closed
 * export lives only while it is referenced, and is then on the closing list. */
static const char *audit(void) {
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
  size_t nconns = 0, counted = 0;
  for (size_t i = 0; aipc__hmap_next(&g.peer_conns, &i, &k, &v);) counted += (uintptr_t)v;
  for (aipc__sconn *c = g.sconns; c; c = c->next) {
    nconns++;
    if (!aipc__hmap_get(&g.peer_conns, pkey(c->pid))) return "a live connection is not counted for its process";
    if (c->dead) return "a closed connection is on the live list";
    if (c->n_grants > GRANTS_MAX) return "a connection remembers too many grants";
    for (aipc__ref *r = c->refs; r; r = r->cnext)
      if (r->conn != c) return "a reference on a connection's list belongs to another connection";
  }
  if (counted != nconns) return "the per-process connection counts do not add up to the live connections";
  return NULL;
}

const char *aipc__exporter_audit(void) {
  pthread_mutex_lock(&g.lock);
  const char *why = audit();
  pthread_mutex_unlock(&g.lock);
  return why;
}
