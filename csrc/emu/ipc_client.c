/*
 * Importer side: one persistent connection per exporter process, and the
 * table of this process's imports.
 *
 * A request holds its connection's mutex (never g.lock) while it waits;
 * every wait is bounded by the socket timeouts (ASCEND_IPC_TIMEOUT_MS). A
 * request that timed out leaves its id in the connection's "abandoned" list,
 * so its reply, should it come later, is recognised and undone (the arena
 * fd it may carry is kept in the cache, a granted reference is released).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "emu/ipc_internal.h"

#define g aipc__g
#define CALL "aclrtIpcMemImportByKey"
#define ABANDONED_MAX 1024

static aipc__hkey ckey(uint32_t pid, uint64_t nonce) { return (aipc__hkey){pid, nonce}; }
static aipc__hkey ikey(uint64_t nonce, uint64_t id) { return (aipc__hkey){nonce, id}; }

aipc__import *aipc__import_lookup(const aipc__key *k) {
  aipc__import *imp = aipc__hmap_get(&g.imports, ikey(k->nonce, k->export_id));
  if (!imp || imp->pid != k->pid) return NULL;
  /* A forged key with a known id but the wrong secret must not hit the cache. */
  return aipc__secret_equal(imp->secret, k->secret) ? imp : NULL;
}

/* ---- connections -------------------------------------------------------------- */

/* Closes the socket and the cached arena fds. conn->mu held (or exclusive). */
static void conn_drop(aipc__cconn *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  if (c->ledger) munmap(c->ledger, AIPC_LEDGER_BYTES);
  c->ledger = NULL;
  for (size_t i = 0; i < c->n_arena; i++)
    if (c->arena_fds[i] >= 0) close(c->arena_fds[i]);
  free(c->arena_fds);
  free(c->arena_sizes);
  c->arena_fds = NULL;
  c->arena_sizes = NULL;
  c->n_arena = 0;
  free(c->abandoned);
  c->abandoned = NULL;
  c->n_abandoned = c->cap_abandoned = 0;
  c->gen++;
}

/* ---- windows (g.lock held) --------------------------------------------------- */

static aipc__hkey wkey(int32_t device, uint64_t index) { return (aipc__hkey){(uint64_t)(uint32_t)device, index}; }

static void idle_unlink(aipc__win *w) {
  if (w->lprev) w->lprev->lnext = w->lnext; else g.idle_head = w->lnext;
  if (w->lnext) w->lnext->lprev = w->lprev; else g.idle_tail = w->lprev;
  w->lprev = w->lnext = NULL;
  g.idle_wins--;
}

static void win_destroy(aipc__win *w, bool unmap) {
  if (w->refs == 0) idle_unlink(w);
  aipc__hmap_remove(&w->conn->wins, wkey(w->device, w->index));
  if (unmap) munmap(w->base, w->len);
  free(w);
}

/* One import fewer in w: an idle window joins the LRU; the oldest beyond the cap go. */
static void win_put(aipc__win *w) {
  if (--w->refs > 0) return;
  w->lprev = g.idle_tail;
  w->lnext = NULL;
  if (g.idle_tail) g.idle_tail->lnext = w; else g.idle_head = w;
  g.idle_tail = w;
  g.idle_wins++;
  while (g.idle_wins > AIPC_IDLE_WINDOWS_MAX) win_destroy(g.idle_head, true);
}

/* Unmaps c's windows that no import uses (all of them when c has no imports). */
static void conn_drop_idle_windows(aipc__cconn *c) {
  aipc__hkey k;
  void *v;
  for (size_t i = 0; aipc__hmap_next(&c->wins, &i, &k, &v);) {
    aipc__win *w = v;
    if (w->refs == 0) win_destroy(w, true);
  }
}

static void conn_free(aipc__cconn *c) {
  conn_drop(c);
  conn_drop_idle_windows(c);
  aipc__hmap_clear(&c->wins);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static bool conn_idle(const aipc__cconn *c) { return c->users == 0 && c->imports == 0; }

/* g.lock held: drops idle connections whose exporter hung up, then the least
 * recently used idle ones beyond AIPC_IDLE_CCONNS_MAX. An idle connection
 * keeps its exporter's arena fds open (and so the exporter's memory alive
 * after it dies), which is why they are bounded. */
static void conns_trim(bool sweep_dead) {
  aipc__hkey k;
  void *v;
  if (sweep_dead && g.idle_cconns) {
    for (size_t i = 0; aipc__hmap_next(&g.cconns, &i, &k, &v);) {
      aipc__cconn *c = v;
      if (!conn_idle(c)) continue;
      struct pollfd p = {.fd = c->fd, .events = POLLIN};
      if (c->fd >= 0 && (poll(&p, 1, 0) == 0 || !(p.revents & (POLLHUP | POLLERR)))) continue;
      aipc__hmap_remove(&g.cconns, k);
      g.idle_cconns--;
      conn_free(c);
    }
  }
  while (g.idle_cconns > AIPC_IDLE_CCONNS_MAX) {
    aipc__cconn *lru = NULL;
    aipc__hkey lk = {0, 0};
    for (size_t i = 0; aipc__hmap_next(&g.cconns, &i, &k, &v);) {
      aipc__cconn *c = v;
      if (conn_idle(c) && (!lru || c->last_used < lru->last_used)) {
        lru = c;
        lk = k;
      }
    }
    if (!lru) break;
    aipc__hmap_remove(&g.cconns, lk);
    g.idle_cconns--;
    conn_free(lru);
  }
}

/* g.lock held. Returns the connection to (pid, nonce) with a user reference, or NULL. */
static aipc__cconn *conn_get(uint32_t pid, uint64_t nonce) {
  aipc__cconn *c = aipc__hmap_get(&g.cconns, ckey(pid, nonce));
  if (!c) {
    conns_trim(true);
    c = calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_mutex_init(&c->mu, NULL);
    c->pid = pid;
    c->nonce = nonce;
    c->fd = -1;
    if (aipc__hmap_put(&g.cconns, ckey(pid, nonce), c) != 0) {
      conn_free(c);
      return NULL;
    }
    c->users = 1;
    return c;
  }
  if (conn_idle(c)) g.idle_cconns--;
  c->users++;
  return c;
}

/* g.lock held. Gives back a user reference. */
static void conn_put(aipc__cconn *c) {
  c->users--;
  if (conn_idle(c)) {
    c->last_used = ++g.tick;
    g.idle_cconns++;
    conns_trim(false);
  }
}

static aclError conn_connect(aipc__cconn *c) {
  int timeout_ms = aipc__config_get()->timeout_ms;
  struct sockaddr_un sa;
  unsigned salen = aipc__ipc_sockaddr(&sa, c->pid, c->nonce);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return aipc__fail(ACL_ERROR_RT_IPC_ERROR, CALL ": cannot create a socket: %s", strerror(errno));
  struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int r;
  do r = connect(fd, (struct sockaddr *)&sa, salen);
  while (r != 0 && errno == EINTR);
  if (r != 0) {
    int e = errno;
    close(fd);
    if (e == EAGAIN || e == ETIMEDOUT)
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR,
                        CALL ": exporter process %u did not accept a connection within %d ms (overloaded?)", c->pid,
                        timeout_ms);
    if (e == ECONNREFUSED || e == ENOENT)
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR,
                        CALL ": exporter process %u is gone (exited or finalized): its keys can no longer be imported",
                        c->pid);
    return aipc__fail(ACL_ERROR_RT_IPC_ERROR, CALL ": cannot connect to exporter process %u: %s", c->pid, strerror(e));
  }
  struct ucred cr;
  socklen_t cl = sizeof cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 || (uint32_t)cr.pid != c->pid) {
    close(fd);
    return aipc__fail(ACL_ERROR_RT_IPC_ERROR,
                      CALL ": the socket of exporter process %u is served by another process (%d): key refused",
                      c->pid, (int)cr.pid);
  }
  c->fd = fd;
  c->gen++;
  return ACL_SUCCESS;
}

typedef enum { RT_OK, RT_DEAD, RT_TIMEOUT, RT_PROTO } rt_result;

static int send_msg(aipc__cconn *c, aipc__msg *m) {
  uint8_t buf[AIPC_PROTO_MAX];
  size_t len = aipc__proto_encode(m, buf);
  for (;;) {
    ssize_t r = send(c->fd, buf, len, MSG_NOSIGNAL);
    if (r == (ssize_t)len) return RT_OK;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return RT_TIMEOUT;
    return RT_DEAD;
  }
}

/* Sends RELEASE(id, count), one-way. conn->mu held. A connection that cannot
 * take it (dead, or an exporter not reading) is dropped: its EOF then makes
 * the exporter drop every reference this process holds on it. */
static void send_release(aipc__cconn *c, uint64_t id, uint32_t count) {
  if (c->fd < 0) return;
  aipc__msg m;
  memset(&m, 0, offsetof(aipc__msg, text) + 1);
  m.type = AIPC_MSG_RELEASE;
  m.req = ++c->next_req;
  m.export_id = id;
  m.count = count;
  if (send_msg(c, &m) != RT_OK) conn_drop(c);
}

static int cache_arena_fd(aipc__cconn *c, int32_t device, int fd) {
  if ((size_t)device >= c->n_arena) {
    size_t n = (size_t)device + 1;
    int *f = realloc(c->arena_fds, n * sizeof *f);
    if (!f) return -1;
    c->arena_fds = f;
    uint64_t *s = realloc(c->arena_sizes, n * sizeof *s);
    if (!s) return -1;
    c->arena_sizes = s;
    for (size_t i = c->n_arena; i < n; i++) {
      f[i] = -1;
      s[i] = 0;
    }
    c->n_arena = n;
  }
  if (c->arena_fds[device] >= 0) close(c->arena_fds[device]);
  c->arena_fds[device] = fd;
  c->arena_sizes[device] = 0;
  return 0;
}

/* Maps the exporter's release ledger for this connection (and closes fd).
 * Without it (mmap failed), releases go as RELEASE messages. */
static void install_ledger(aipc__cconn *c, int fd) {
  if (c->ledger) munmap(c->ledger, AIPC_LEDGER_BYTES);
  c->ledger = NULL;
  struct stat st;
  if (fstat(fd, &st) == 0 && (uint64_t)st.st_size == AIPC_LEDGER_BYTES) {
    void *p = mmap(NULL, AIPC_LEDGER_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) c->ledger = p;
  }
  close(fd);
}

/* Gives back n references of export id held on the current connection:
 * through the ledger slot (no syscall) or a RELEASE message. conn->mu held. */
static void release_refs(aipc__cconn *c, uint64_t id, uint32_t slot, uint32_t n) {
  if (c->ledger && slot != AIPC_NO_SLOT)
    __atomic_add_fetch(&c->ledger[slot], n, __ATOMIC_RELEASE);
  else
    send_release(c, id, n);
}

static int abandoned_take(aipc__cconn *c, uint64_t req, uint64_t *export_id) {
  for (size_t i = 0; i < c->n_abandoned; i += 2) {
    if (c->abandoned[i] == req) {
      *export_id = c->abandoned[i + 1];
      c->abandoned[i] = c->abandoned[c->n_abandoned - 2];
      c->abandoned[i + 1] = c->abandoned[c->n_abandoned - 1];
      c->n_abandoned -= 2;
      return 1;
    }
  }
  return 0;
}

static int abandoned_add(aipc__cconn *c, uint64_t req, uint64_t export_id) {
  if (c->n_abandoned / 2 >= ABANDONED_MAX) return -1;
  if (c->n_abandoned + 2 > c->cap_abandoned) {
    size_t cap = c->cap_abandoned ? c->cap_abandoned * 2 : 16;
    uint64_t *v = realloc(c->abandoned, cap * sizeof *v);
    if (!v) return -1;
    c->abandoned = v;
    c->cap_abandoned = cap;
  }
  c->abandoned[c->n_abandoned++] = req;
  c->abandoned[c->n_abandoned++] = export_id;
  return 0;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * Sends q and waits for its reply into a (with *fd: the attached
 * descriptor, or -1). conn->mu held. Stale replies met on the way are undone.
 */
static rt_result roundtrip(aipc__cconn *c, aipc__msg *q, aipc__msg *a, int *fd, int *ledger_fd, const char **why) {
  *fd = -1;
  *ledger_fd = -1;
  *why = NULL;
  q->req = ++c->next_req;
  rt_result sr = send_msg(c, q);
  if (sr != RT_OK) return sr;
  uint64_t deadline = 0;
  for (;;) {
    uint8_t buf[AIPC_PROTO_MAX];
    int fds[AIPC_PROTO_MAX_FDS], nfd;
    bool odd;
    ssize_t r = aipc__proto_recv(c->fd, buf, 0, fds, &nfd, &odd);
    if (r < 0) {
      if (errno == EINTR) {
        if (!deadline) deadline = now_ms() + (uint64_t)aipc__config_get()->timeout_ms;
        if (now_ms() < deadline) continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        if (abandoned_add(c, q->req, q->export_id) != 0) conn_drop(c);
        return RT_TIMEOUT;
      }
      return RT_DEAD;
    }
    if (r == 0) {
      for (int i = 0; i < nfd; i++) close(fds[i]);
      return RT_DEAD;
    }
    aipc__decode_result d = aipc__proto_decode(buf, (size_t)r, a, why);
    int want = 0;
    if (d == AIPC_DECODE_OK && a->type == AIPC_MSG_IMPORT_REPLY)
      want = !!(a->flags & AIPC_REPLY_FD) + !!(a->flags & AIPC_REPLY_LEDGER);
    if (d != AIPC_DECODE_OK || odd || nfd != want ||
        (a->type != AIPC_MSG_IMPORT_REPLY && a->type != AIPC_MSG_ERROR)) {
      for (int i = 0; i < nfd; i++) close(fds[i]);
      if (!*why) *why = "unexpected message or descriptors";
      return RT_PROTO;
    }
    int arena_fd = -1, lfd = -1, next = 0;
    if (a->type == AIPC_MSG_IMPORT_REPLY && (a->flags & AIPC_REPLY_FD)) arena_fd = fds[next++];
    if (a->type == AIPC_MSG_IMPORT_REPLY && (a->flags & AIPC_REPLY_LEDGER)) lfd = fds[next++];
    if (a->req == q->req) {
      *fd = arena_fd;
      *ledger_fd = lfd;
      return RT_OK;
    }
    uint64_t stale_id;
    if (!abandoned_take(c, a->req, &stale_id)) {
      for (int i = 0; i < nfd; i++) close(fds[i]);
      *why = "reply to a request never sent";
      return RT_PROTO;
    }
    /* The reply to a request whose caller gave up: keep the descriptors (the
     * exporter now counts them as sent), give back the reference. */
    if (a->type == AIPC_MSG_IMPORT_REPLY && a->status == ACL_SUCCESS) {
      if (lfd >= 0) install_ledger(c, lfd);
      if (arena_fd >= 0 && cache_arena_fd(c, a->device, arena_fd) != 0) {
        close(arena_fd);
        return RT_PROTO;
      }
      release_refs(c, stale_id, a->slot, 1);
      if (c->fd < 0) return RT_DEAD;
    }
    if (!deadline) deadline = now_ms() + (uint64_t)aipc__config_get()->timeout_ms;
    if (now_ms() >= deadline) {
      if (abandoned_add(c, q->req, q->export_id) != 0) conn_drop(c);
      return RT_TIMEOUT;
    }
  }
}

/* ---- import / close ------------------------------------------------------------ */

typedef struct granted {
  int32_t device;
  uint32_t attr;
  uint32_t slot;
  uint64_t offset, size;
  uint64_t gen;
} granted;

/* The wire part of an import: conn->mu held. On success the exporter counts
 * one more reference of this process and the arena fd is in the cache. */
static aclError import_remote(aipc__cconn *c, const aipc__key *k, uint64_t flags, granted *out) {
  int timeout_ms = aipc__config_get()->timeout_ms;
  aipc__msg q, a;
  memset(&q, 0, offsetof(aipc__msg, text) + 1);
  q.type = AIPC_MSG_IMPORT;
  q.export_id = k->export_id;
  memcpy(q.secret, k->secret, AIPC_SECRET_LEN);
  q.flags = (uint32_t)flags;
  q.sdid = aipc__config_get()->sdid;
  int fd = -1, lfd = -1;
  const char *why = NULL;
  rt_result rr = RT_DEAD;
  for (int attempt = 0; attempt < 2; attempt++) {
    bool fresh = false;
    if (c->fd < 0) {
      aclError rc = conn_connect(c);
      if (rc != ACL_SUCCESS) return rc;
      fresh = true;
    }
    rr = roundtrip(c, &q, &a, &fd, &lfd, &why);
    if (rr != RT_DEAD) break;
    conn_drop(c); /* EOF on a cached connection: the exporter may have restarted its server; try once more */
    if (fresh) break;
  }
  switch (rr) {
    case RT_OK: break;
    case RT_DEAD:
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR,
                        CALL ": exporter process %u closed the connection (it exited, finalized or refused us)", k->pid);
    case RT_TIMEOUT:
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR,
                        CALL ": no reply from exporter process %u within %d ms (stopped, hung or overloaded?); "
                        "ASCEND_IPC_TIMEOUT_MS sets the limit",
                        k->pid, timeout_ms);
    case RT_PROTO:
      conn_drop(c);
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR, CALL ": exporter process %u sent a malformed reply (%s)", k->pid,
                        why ? why : "?");
  }
  if (a.type == AIPC_MSG_ERROR) {
    conn_drop(c); /* the exporter closes it after an ERROR */
    return aipc__fail(a.status, CALL ": %s", a.text);
  }
  if (a.status != ACL_SUCCESS) return aipc__fail(a.status, CALL ": %s", a.text);

  /* Granted: from here on a failure must give the reference back. */
  if (lfd >= 0) install_ledger(c, lfd);
  if (fd >= 0 && cache_arena_fd(c, a.device, fd) != 0) {
    close(fd);
    conn_drop(c);
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, CALL ": out of memory");
  }
  int afd = (size_t)a.device < c->n_arena ? c->arena_fds[a.device] : -1;
  if (afd < 0) {
    conn_drop(c); /* the exporter believes we hold an fd we do not: start over */
    return aipc__fail(ACL_ERROR_RT_IPC_ERROR, CALL ": exporter process %u did not send the memory of device %d",
                      k->pid, (int)a.device);
  }
  if (a.offset + a.size > c->arena_sizes[a.device]) {
    struct stat st;
    if (fstat(afd, &st) == 0) c->arena_sizes[a.device] = (uint64_t)st.st_size;
    if (a.offset + a.size > c->arena_sizes[a.device]) {
      release_refs(c, k->export_id, a.slot, 1);
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR, CALL ": exporter process %u granted a range outside its memory",
                        k->pid);
    }
  }
  out->device = a.device;
  out->attr = a.attr;
  out->offset = a.offset;
  out->size = a.size;
  out->slot = a.slot;
  out->gen = c->gen;
  return ACL_SUCCESS;
}

/* A mapping for a granted range: in its window when it lies inside one
 * (creating the window if needed), else a mapping of its own. conn->mu held,
 * g.lock held on entry and on return (dropped around mmap). */
static void *map_granted(aipc__cconn *c, const granted *gr, aipc__win **win_out, bool own) {
  int afd = c->arena_fds[gr->device];
  uint64_t idx = gr->offset / AIPC_WINDOW;
  *win_out = NULL;
  if (!own && gr->offset + gr->size <= (idx + 1) * AIPC_WINDOW) {
    aipc__win *w = aipc__hmap_get(&c->wins, wkey(gr->device, idx));
    if (!w && c->arena_sizes[gr->device] > idx * AIPC_WINDOW) {
      uint64_t len = c->arena_sizes[gr->device] - idx * AIPC_WINDOW;
      if (len > AIPC_WINDOW) len = AIPC_WINDOW;
      pthread_mutex_unlock(&g.lock);
      /* Only threads holding conn->mu create c's windows: no one races us. */
      void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, afd,
                        (off_t)(idx * AIPC_WINDOW));
      pthread_mutex_lock(&g.lock);
      if (base != MAP_FAILED) {
        w = calloc(1, sizeof *w);
        if (w && aipc__hmap_put(&c->wins, wkey(gr->device, idx), w) == 0) {
          w->conn = c;
          w->device = gr->device;
          w->index = idx;
          w->base = base;
          w->len = len;
          w->refs = 1;
          *win_out = w;
          return (char *)base + (gr->offset - idx * AIPC_WINDOW);
        }
        free(w);
        w = NULL;
        munmap(base, len);
      }
    }
    if (w) {
      if (w->refs++ == 0) idle_unlink(w);
      *win_out = w;
      return (char *)w->base + (gr->offset - idx * AIPC_WINDOW);
    }
  }
  pthread_mutex_unlock(&g.lock);
  void *p = mmap(NULL, gr->size, PROT_READ | PROT_WRITE, MAP_SHARED, afd, (off_t)gr->offset);
  pthread_mutex_lock(&g.lock);
  return p == MAP_FAILED ? NULL : p;
}

static void unmap_granted(void *p, size_t size, aipc__win *w) {
  if (w)
    win_put(w); /* g.lock held */
  else
    munmap(p, size);
}

/* Records a granted import: conn->mu held, g.lock not held. */
static aclError import_register(aipc__cconn *c, const aipc__key *k, const granted *gr, void **devPtr) {
  pthread_mutex_lock(&g.lock);
  aipc__import *imp = aipc__import_lookup(k);
  if (imp) {
    /* Another thread imported the same key meanwhile: share its mapping. */
    imp->refs++;
    if (imp->conn_gen == gr->gen) {
      imp->wire_refs++; /* the same (export, connection) reference: the same slot */
    } else { /* its references died with an older connection; ours is the live one */
      imp->conn_gen = gr->gen;
      imp->wire_refs = 1;
      imp->slot = gr->slot;
    }
    *devPtr = imp->ptr;
    pthread_mutex_unlock(&g.lock);
    return ACL_SUCCESS;
  }
  imp = calloc(1, sizeof *imp);
  void *p = NULL;
  aipc__win *w = NULL;
  aipc__block *b = NULL;
  /* The window's address may already hold another import of an overlapping
   * range (two exports of one block): then a mapping of its own. */
  for (int own = 0; imp && !b && own < 2; own++) {
    p = map_granted(c, gr, &w, own == 1);
    if (!p) break;
    aipc__mem_wrlock();
    b = aipc__mem_add_import(p, gr->size, gr->device, imp);
    aipc__mem_unlock();
    if (!b) unmap_granted(p, gr->size, w);
  }
  if (b && aipc__hmap_put(&g.imports, ikey(k->nonce, k->export_id), imp) != 0) {
    aipc__mem_wrlock();
    aipc__mem_remove_import(b);
    aipc__mem_unlock();
    unmap_granted(p, gr->size, w);
    b = NULL;
  }
  if (!b) {
    pthread_mutex_unlock(&g.lock);
    free(imp);
    release_refs(c, k->export_id, gr->slot, 1);
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, CALL ": cannot map %" PRIu64 " bytes of process %u: %s",
                      gr->size, k->pid, p ? "out of memory for bookkeeping" : "mmap failed");
  }
  imp->nonce = k->nonce;
  imp->export_id = k->export_id;
  imp->pid = k->pid;
  memcpy(imp->secret, k->secret, AIPC_SECRET_LEN);
  imp->ptr = p;
  imp->size = gr->size;
  imp->device = gr->device;
  imp->attr = gr->attr;
  imp->refs = 1;
  imp->wire_refs = 1;
  imp->conn_gen = gr->gen;
  imp->slot = gr->slot;
  imp->conn = c;
  imp->block = b;
  imp->win = w;
  c->imports++;
  *devPtr = p;
  pthread_mutex_unlock(&g.lock);
  return ACL_SUCCESS;
}

aclError aipc__client_import(const aipc__key *k, uint64_t flags, void **devPtr) {
  pthread_mutex_lock(&g.lock);
  aipc__import *imp = aipc__import_lookup(k);
  if (imp) {
    if (imp->refs == UINT32_MAX) {
      pthread_mutex_unlock(&g.lock);
      return aipc__fail(ACL_ERROR_INVALID_PARAM, CALL ": key imported too many times");
    }
    imp->refs++;
    *devPtr = imp->ptr;
    pthread_mutex_unlock(&g.lock);
    return ACL_SUCCESS;
  }
  aipc__cconn *c = conn_get(k->pid, k->nonce);
  pthread_mutex_unlock(&g.lock);
  if (!c) return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, CALL ": out of memory");

  pthread_mutex_lock(&c->mu);
  granted gr;
  aclError rc = import_remote(c, k, flags, &gr);
  if (rc == ACL_SUCCESS) rc = import_register(c, k, &gr, devPtr);
  if (c->fd < 0) {
    /* The connection went: windows nobody uses would keep its memory alive. */
    pthread_mutex_lock(&g.lock);
    conn_drop_idle_windows(c);
    pthread_mutex_unlock(&g.lock);
  }
  pthread_mutex_unlock(&c->mu);

  pthread_mutex_lock(&g.lock);
  conn_put(c);
  pthread_mutex_unlock(&g.lock);
  return rc;
}

aclError aipc__client_close(aipc__import *imp) {
  if (--imp->refs > 0) {
    pthread_mutex_unlock(&g.lock);
    return ACL_SUCCESS;
  }
  aipc__hmap_remove(&g.imports, ikey(imp->nonce, imp->export_id));
  aipc__mem_wrlock();
  aipc__mem_remove_import(imp->block);
  aipc__mem_unlock();
  aipc__cconn *c = imp->conn;
  c->imports--;
  c->users++;
  if (imp->win) win_put(imp->win); /* no munmap: the window stays for the next import */
  pthread_mutex_unlock(&g.lock);

  if (!imp->win) munmap(imp->ptr, imp->size);
  pthread_mutex_lock(&c->mu);
  /* One-way, and usually no syscall: the count lands in the ledger (or a
   * RELEASE in the socket queue) before we return, and an exporter's close
   * takes both in before it decides. */
  if (c->gen == imp->conn_gen) release_refs(c, imp->export_id, imp->slot, imp->wire_refs);
  pthread_mutex_unlock(&c->mu);

  pthread_mutex_lock(&g.lock);
  conn_put(c);
  pthread_mutex_unlock(&g.lock);
  memset(imp->secret, 0, sizeof imp->secret);
  free(imp);
  return ACL_SUCCESS;
}

/* ---- finalize, fork ------------------------------------------------------------- */

static void free_all(bool unmap) {
  aipc__hkey k;
  void *v;
  for (size_t i = 0; aipc__hmap_next(&g.imports, &i, &k, &v);) {
    aipc__import *imp = v;
    if (unmap) {
      aipc__mem_wrlock();
      aipc__mem_remove_import(imp->block);
      aipc__mem_unlock();
      if (!imp->win) munmap(imp->ptr, imp->size);
    }
    free(imp);
  }
  aipc__hmap_clear(&g.imports);
  for (size_t i = 0; aipc__hmap_next(&g.cconns, &i, &k, &v);) {
    aipc__cconn *c = v;
    aipc__hkey wk;
    void *wv;
    for (size_t j = 0; aipc__hmap_next(&c->wins, &j, &wk, &wv);) {
      aipc__win *w = wv;
      /* A forked child keeps its parent's mappings, untracked (emu.h). */
      if (unmap) munmap(w->base, w->len);
      free(w);
    }
    aipc__hmap_clear(&c->wins);
    if (unmap) {
      conn_free(c);
    } else {
      /* A forked child: the mutex may have been held by a parent thread. */
      conn_drop(c);
      free(c);
    }
  }
  aipc__hmap_clear(&g.cconns);
  g.idle_cconns = 0;
  g.idle_head = g.idle_tail = NULL;
  g.idle_wins = 0;
}

void aipc__client_clear(void) { free_all(true); }

void aipc__client_child_reset(void) { free_all(false); }
