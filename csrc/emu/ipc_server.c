/*
 * Exporter side: the export table, and the server thread that answers
 * importers on this process's abstract Unix socket.
 *
 * Every socket operation of the server happens under g.lock and never
 * blocks (MSG_DONTWAIT): the thread waits in epoll_wait with the lock
 * released, then takes it and serves what is ready. Because receiving is
 * done under the lock, an exporter's aclrtIpcMemClose can process what an
 * importer already sent (its RELEASE, its EOF) before it decides, in order
 * and without racing the thread (aipc__export_drain).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "emu/ipc_internal.h"

#define g aipc__g

static char listen_tag, wake_tag; /* epoll data of the two non-connection fds */
static const uint8_t dummy_secret[AIPC_SECRET_LEN];

#define LISTEN_BACKLOG 4096
/* Messages per connection per wake-up. epoll is level-triggered, so one is
 * enough: reading on until EAGAIN would cost an extra recvmsg per request. */
#define SERVICE_BATCH 1
#define DRAIN_MAX 4096          /* messages per connection when a close drains it */
#define SWEEP_MS 20             /* how often closed exports with importers look at the ledgers */
/* Unsettled grants remembered per connection. A well-behaved importer has
 * at most one per thread waiting on the connection; past this the oldest
 * is forgotten, and a CANCEL of it can no longer be honoured. */
#define GRANTS_MAX 4096

static aipc__hkey ekey(uint64_t id) { return (aipc__hkey){id, 0}; }
static aipc__hkey rkey(uint64_t id, uint64_t serial) { return (aipc__hkey){id, serial}; }

/* ---- exports --------------------------------------------------------------- */

aipc__export *aipc__export_lookup(const aipc__key *k) {
  aipc__export *e = aipc__hmap_get(&g.exports, ekey(k->export_id));
  int ok = aipc__secret_equal(e ? e->secret : dummy_secret, k->secret);
  return e && ok ? e : NULL;
}

static void export_free(aipc__export *e) {
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
  aipc__mem_wrlock();
  aipc__mem_unpin(e->block);
  aipc__mem_unlock();
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

void aipc__export_importers(aipc__export *e, char *buf, size_t cap) {
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

static void conn_kill(aipc__sconn *c) {
  if (c->dead) return;
  c->dead = true;
  while (c->refs) {
    aipc__ref *r = c->refs;
    aipc__export *e = r->exp;
    e->refs_total -= r->count;
    ref_free(r);
    aipc__export_maybe_finish(e);
  }
  if (c->fd >= 0) {
    epoll_ctl(g.epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
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
    free(c->fd_sent);
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
  struct iovec iov = {buf, len};
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  union {
    char b[CMSG_SPACE(2 * sizeof(int))];
    struct cmsghdr align;
  } ctl;
  int fds[2], nfd = 0;
  if (fd >= 0) fds[nfd++] = fd;
  if (fd2 >= 0) fds[nfd++] = fd2;
  if (nfd) {
    memset(&ctl, 0, sizeof ctl);
    mh.msg_control = ctl.b;
    mh.msg_controllen = CMSG_SPACE((size_t)nfd * sizeof(int));
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN((size_t)nfd * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, (size_t)nfd * sizeof(int));
  }
  for (;;) {
    /* Never blocks: an importer that does not read its replies is dropped. */
    ssize_t r = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    return r == (ssize_t)len ? 0 : -1;
  }
}

static bool whitelisted(aipc__export *e, pid_t pid) {
  if (e->flags & ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION) return true;
  if (pid == g.pid) return true;
  return aipc__hmap_get(&e->whitelist, (aipc__hkey){(uint64_t)(uint32_t)pid, 0}) != NULL;
}

static int fd_sent_mark(aipc__sconn *c, int32_t device) {
  if ((size_t)device >= c->n_fd_sent) {
    size_t n = (size_t)device + 1;
    uint8_t *v = realloc(c->fd_sent, n);
    if (!v) return -1;
    memset(v + c->n_fd_sent, 0, n - c->n_fd_sent);
    c->fd_sent = v;
    c->n_fd_sent = n;
  }
  c->fd_sent[device] = 1;
  return 0;
}

/* Creates c's ledger; returns its fd (to send once), or -1 (then c has none). */
static int ledger_create(aipc__sconn *c) {
  int fd = memfd_create("ascend_ipc_ledger", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  void *p = MAP_FAILED;
  /* Sealed so the importer can neither shrink it (a SIGBUS here) nor grow it. */
  if (ftruncate(fd, (off_t)AIPC_LEDGER_BYTES) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
      (p = mmap(NULL, AIPC_LEDGER_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
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
  aipc__export_maybe_finish(e);
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

static void handle_import(aipc__sconn *c, const aipc__msg *q) {
  grants_settle(c, q->settled);
  aipc__msg a;
  memset(&a, 0, offsetof(aipc__msg, text) + 1);
  a.type = AIPC_MSG_IMPORT_REPLY;
  a.req = q->req;
  /* Releases this importer already noted count first (keeps counts small). */
  if (!consume_for(q->export_id, c)) return;
  aipc__export *e = aipc__hmap_get(&g.exports, ekey(q->export_id));
  int secret_ok = aipc__secret_equal(e ? e->secret : dummy_secret, q->secret);
  int fd = -1, ledger_fd = -1;
  if (c->uid != g.euid) {
    a.status = ACL_ERROR_RT_NO_PERMISSION;
    aipc__proto_set_text(&a,
                         "process %d runs as uid %u but the exporter (process %d) runs as uid %u: "
                         "IPC memory is shared only between processes of the same user",
                         (int)c->pid, (unsigned)c->uid, (int)g.pid, (unsigned)g.euid);
  } else if (!e || !secret_ok) {
    a.status = ACL_ERROR_RT_IPC_ERROR;
    aipc__proto_set_text(&a, "key not exported by process %d (closed, never issued, or forged)", (int)g.pid);
  } else if (e->closed) {
    a.status = ACL_ERROR_RT_IPC_ERROR;
    aipc__proto_set_text(&a, "key was closed by its exporter (process %d): no new imports", (int)g.pid);
  } else if (q->sdid != aipc__config_get()->sdid) {
    a.status = ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
    aipc__proto_set_text(&a, "importer is on server %u, the exporter on server %u: cross-server import needs the "
                         "super-node fabric; the emulator has none",
                         q->sdid, aipc__config_get()->sdid);
  } else if (!whitelisted(e, c->pid)) {
    a.status = ACL_ERROR_RT_NO_PERMISSION;
    aipc__proto_set_text(&a,
                         "process %d is not on the whitelist of this key: the exporter (process %d) must pass "
                         "it to aclrtIpcMemSetImportPid, or export with "
                         "ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION",
                         (int)c->pid, (int)g.pid);
  } else {
    aipc__mem_rdlock();
    bool freed = e->block->user_freed;
    int arena = -1;
    bool need_fd = (size_t)e->device >= c->n_fd_sent || !c->fd_sent[e->device];
    if (need_fd) arena = aipc__mem_arena_fd(e->device);
    aipc__mem_unlock();
    aipc__ref *r = aipc__hmap_get(&g.refs, rkey(e->id, c->serial));
    if (freed) {
      a.status = ACL_ERROR_RT_IPC_ERROR;
      aipc__proto_set_text(&a, "the memory of this key was freed by its exporter (process %d)", (int)g.pid);
    } else if (need_fd && arena < 0) {
      a.status = ACL_ERROR_RT_INTERNAL_ERROR;
      aipc__proto_set_text(&a, "exporter (process %d) has no memory on device %d", (int)g.pid, (int)e->device);
    } else if (r && r->count == UINT32_MAX) {
      a.status = ACL_ERROR_RT_INTERNAL_ERROR;
      aipc__proto_set_text(&a, "too many references from process %d", (int)c->pid);
    } else if (!r && (!(r = calloc(1, sizeof *r)) || aipc__hmap_put(&g.refs, rkey(e->id, c->serial), r) != 0)) {
      free(r);
      r = NULL;
      a.status = ACL_ERROR_RT_INTERNAL_ERROR;
      aipc__proto_set_text(&a, "exporter (process %d) is out of memory", (int)g.pid);
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
      a.status = ACL_SUCCESS;
      a.device = e->device;
      a.attr = e->attr;
      a.offset = e->offset;
      a.size = e->size;
      a.slot = r->slot;
      if (need_fd) {
        a.flags |= AIPC_REPLY_FD;
        fd = arena;
      }
      if (ledger_fd >= 0) a.flags |= AIPC_REPLY_LEDGER;
    }
  }
  int sent = conn_send2(c, &a, fd, ledger_fd);
  if (ledger_fd >= 0) {
    close(ledger_fd); /* the mapping stays; the importer has its own descriptor */
    c->ledger_sent = true;
  }
  if (sent != 0 || (fd >= 0 && fd_sent_mark(c, a.device) != 0)) {
    conn_kill(c); /* drops the reference just counted too */
    return;
  }
  if (a.status == ACL_SUCCESS) grants_add(c, q->req, q->export_id);
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
  memset(&a, 0, offsetof(aipc__msg, text) + 1);
  a.type = AIPC_MSG_ERROR;
  a.req = q->req;
  a.status = ACL_ERROR_RT_IPC_ERROR;
  aipc__proto_set_text(&a, "exporter (process %d) speaks IPC protocol version %d, not %u", (int)g.pid,
                       AIPC_PROTO_VERSION, (unsigned)q->version);
  (void)conn_send(c, &a, -1);
}

/* Serves up to max messages queued on c. g.lock held. */
static void conn_service(aipc__sconn *c, int max) {
  for (int i = 0; i < max && !c->dead; i++) {
    uint8_t buf[AIPC_PROTO_MAX];
    int fds[AIPC_PROTO_MAX_FDS], nfd;
    unsigned seen;
    ssize_t r = aipc__proto_recv(c->fd, buf, MSG_DONTWAIT, fds, &nfd, &seen);
    if (r < 0) {
      if (errno == EINTR) {
        i--;
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) conn_kill(c);
      return;
    }
    for (int k = 0; k < nfd; k++) close(fds[k]);
    if (r == 0 || nfd || seen) {
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
    if (m.type == AIPC_MSG_IMPORT)
      handle_import(c, &m);
    else if (m.type == AIPC_MSG_RELEASE)
      handle_release(c, &m);
    else if (m.type == AIPC_MSG_CANCEL)
      handle_cancel(c, &m);
    else
      conn_kill(c); /* a reply type sent to the exporter */
  }
}

void aipc__export_drain(aipc__export *e) {
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

void aipc__export_closing(aipc__export *e) {
  if (e->closing || e->refs_total == 0) return;
  e->closing = true;
  e->cprev = NULL;
  e->cnext = g.closing;
  if (g.closing) g.closing->cprev = e;
  bool first = g.closing == NULL;
  __atomic_store_n(&g.closing, e, __ATOMIC_RELAXED);
  if (first && g.wake_fd >= 0) { /* the server starts sweeping */
    uint64_t one = 1;
    ssize_t w = write(g.wake_fd, &one, sizeof one);
    (void)w;
  }
}

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Closed exports still held by importers: take their ledger releases, at
 * most every SWEEP_MS. Any step may kill a connection (a bad count) and so
 * finish other exports: everything is looked up again by id. Connections
 * stay allocated (zombies) until the end of the server's batch. */
static void sweep_closing(void) {
  static uint64_t last;
  uint64_t t = mono_ms();
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

static void accept_all(void) {
  for (int i = 0; i < 64; i++) {
    int fd = accept4(g.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* Out of descriptors: stop listening for a while instead of spinning. */
        epoll_ctl(g.epoll_fd, EPOLL_CTL_DEL, g.listen_fd, NULL);
        g.listen_paused = true;
      }
      return;
    }
    struct ucred cr;
    socklen_t cl = sizeof cr;
    aipc__sconn *c = NULL;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 || !(c = calloc(1, sizeof *c))) {
      close(fd);
      continue;
    }
    c->fd = fd;
    c->serial = ++g.next_serial;
    c->pid = cr.pid;
    c->uid = cr.uid;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(g.epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      free(c);
      continue;
    }
    c->next = g.sconns;
    if (g.sconns) g.sconns->prev = c;
    g.sconns = c;
  }
}

static void resume_listen(void) {
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &listen_tag};
  if (epoll_ctl(g.epoll_fd, EPOLL_CTL_ADD, g.listen_fd, &ev) == 0) g.listen_paused = false;
}

static void *server_main(void *arg) {
  /* Running: from here on this thread allocates only under g.lock, which a
   * fork's prepare handler holds, so a forked child never inherits an
   * allocator lock held by it (glibc's malloc handles that itself; the
   * sanitizers' allocators do not). */
  sem_post((sem_t *)arg);
  struct epoll_event evs[64];
  for (;;) {
    /* listen_paused is written only by this thread while it runs. */
    /* g.closing only changes under g.lock, and its first entry wakes us. */
    int timeout = g.listen_paused ? 50 : -1;
    if (__atomic_load_n(&g.closing, __ATOMIC_RELAXED)) timeout = SWEEP_MS;
    int n = epoll_wait(g.epoll_fd, evs, 64, timeout);
    pthread_mutex_lock(&g.lock);
    if (g.stop) {
      pthread_mutex_unlock(&g.lock);
      break;
    }
    if (g.listen_paused) resume_listen();
    for (int i = 0; i < n; i++) {
      void *tag = evs[i].data.ptr;
      if (tag == &listen_tag) {
        accept_all();
      } else if (tag == &wake_tag) {
        uint64_t v;
        ssize_t rr = read(g.wake_fd, &v, sizeof v);
        (void)rr;
      } else {
        aipc__sconn *c = tag;
        if (!c->dead) conn_service(c, SERVICE_BATCH);
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
  if (g.epoll_fd >= 0) close(g.epoll_fd);
  if (g.wake_fd >= 0) close(g.wake_fd);
  g.listen_fd = g.epoll_fd = g.wake_fd = -1;
}

aclError aipc__server_start(const char *call) {
  if (g.server_running) return ACL_SUCCESS;
  if (aipc__ipc_identity() != 0)
    return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: getrandom failed: %s", call, strerror(errno));
  g.euid = geteuid();
  g.listen_fd = g.epoll_fd = g.wake_fd = -1;
  struct sockaddr_un sa;
  unsigned salen = aipc__ipc_sockaddr(&sa, (uint32_t)g.pid, g.nonce);
  const char *what = "socket";
  g.listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (g.listen_fd < 0) goto fail;
  what = "bind";
  if (bind(g.listen_fd, (struct sockaddr *)&sa, salen) != 0) goto fail;
  what = "listen";
  if (listen(g.listen_fd, LISTEN_BACKLOG) != 0) goto fail;
  what = "epoll_create1";
  g.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (g.epoll_fd < 0) goto fail;
  what = "eventfd";
  g.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (g.wake_fd < 0) goto fail;
  what = "epoll_ctl";
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &listen_tag};
  if (epoll_ctl(g.epoll_fd, EPOLL_CTL_ADD, g.listen_fd, &ev) != 0) goto fail;
  ev.data.ptr = &wake_tag;
  if (epoll_ctl(g.epoll_fd, EPOLL_CTL_ADD, g.wake_fd, &ev) != 0) goto fail;

  /* The thread takes no signals: they belong to the application's threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  g.stop = false;
  g.listen_paused = false;
  sem_t started;
  sem_init(&started, 0, 0);
  int rc = pthread_create(&g.thread, NULL, server_main, &started);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
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

void aipc__server_stop_thread(void) {
  pthread_mutex_lock(&g.lock);
  if (!g.server_running || g.stop) {
    pthread_mutex_unlock(&g.lock);
    return;
  }
  g.stop = true;
  pthread_t t = g.thread;
  uint64_t one = 1;
  ssize_t w = write(g.wake_fd, &one, sizeof one);
  (void)w;
  pthread_mutex_unlock(&g.lock);
  pthread_join(t, NULL);
}

static void free_exports(bool unpin) {
  aipc__hkey k;
  void *v;
  for (size_t i = 0; aipc__hmap_next(&g.exports, &i, &k, &v);) {
    aipc__export *e = v;
    aipc__hmap_remove(&g.exports, k);
    if (unpin) {
      aipc__mem_wrlock();
      aipc__mem_unpin(e->block);
      aipc__mem_unlock();
    }
    export_free(e);
  }
  aipc__hmap_clear(&g.exports);
}

void aipc__server_clear(void) {
  while (g.sconns) conn_kill(g.sconns);
  free_zombies();
  g.closing = NULL;
  free_exports(true);
  aipc__hmap_clear(&g.refs);
  close_fds();
  g.server_running = false;
  g.stop = false;
  g.listen_paused = false;
}

void aipc__server_child_reset(void) {
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
    free(c->fd_sent);
    free(c->free_slots);
    free(c->grants);
    free(c);
  }
  free_zombies();
  g.closing = NULL;
  free_exports(false);
  aipc__hmap_clear(&g.refs);
  close_fds(); /* the listening socket above all: it must not keep the parent's name alive */
  g.server_running = false;
  g.stop = false;
  g.listen_paused = false;
}
