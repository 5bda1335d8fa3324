/*
 * Importer side, the connections (importer_internal.h): one persistent
 * connection per exporter process, made on the first import of its keys and
 * kept while idle (the least recently used idle ones beyond a cap go), and
 * the requests sent on it. Every import is a round trip that the exporter
 * answers with the allocation's memfd or a refusal. Nothing the exporter
 * sends is trusted: every descriptor kept or mapped here is checked first
 * (aipc__os_fd_check_sealed), so that no exporter can make this process
 * fault or keep what it refused.
 *
 * Any number of threads share a connection. Each sends its request and
 * waits for the reply with its own deadline (ASCEND_IPC_TIMEOUT_MS); one of
 * them at a time receives, for everyone, and hands each reply to the thread
 * that asked. No lock is held across a wait on the exporter, so a stalled
 * exporter delays only the calls that need an answer from it: a close is a
 * ledger write. A request that timed out is cancelled (CANCEL): the exporter
 * takes back the reference it may have granted, and the late reply, when it
 * comes, only delivers the descriptors it carries.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/hashmap.h"
#include "emu/emu.h"
#include "emu/ipc/identity.h"
#include "emu/ipc/importer_internal.h"
#include "emu/ipc/proto.h"
#include "emu/ipc/supernode.h"
#include "os/os.h"

/* A connected socket, shared by the threads sending and receiving on it:
 * closed when the last lets go, so its number is never reused under one. */
typedef struct aipc__csock {
  int fd;
  uint32_t refs; /* guarded by the connection's mu */
} aipc__csock;

#define AIPC_IDLE_CCONNS_MAX 32

/* The connections by exporter; the importer lock guards them. */
static struct importer_conns {
  uint64_t tick;      /* for LRU of idle connections */
  aipc__hmap cconns;  /* {pid, nonce} -> aipc__cconn */
  uint32_t idle_cconns;
} g;
#define ABANDONED_MAX 1024

static aipc__hkey ckey(uint32_t pid, uint64_t nonce) { return (aipc__hkey){pid, nonce}; }

/* ---- the connection: socket, requests, replies ---------------------------------- */

typedef enum { RT_OK, RT_DEAD, RT_TIMEOUT, RT_PROTO, RT_NOFD, RT_LEDGER } rt_result;

enum { CREQ_WAITING, CREQ_DONE, CREQ_FAILED };

/* On the stack of the thread waiting for it; linked in c->pending while WAITING. */
struct aipc__creq {
  uint64_t id;
  int state;
  rt_result fail;  /* CREQ_FAILED: why */
  const char *why; /* RT_PROTO: which rule the reply broke; RT_LEDGER: what is wrong with the ledger */
  aipc__msg reply; /* CREQ_DONE */
  int memfd;       /* CREQ_DONE: the memfd a grant carried (the waiter's to close), or -1 */
  aipc__creq *prev, *next;
};

static uint64_t now_ms(void) { return aipc__os_now_ms(); }

/* How long one blocking send or receive lasts before its thread looks at its
 * deadline again (the sockets' SO_SNDTIMEO and SO_RCVTIMEO). */
static int slice_ms(int timeout_ms) {
  int s = timeout_ms / 10;
  return s < 1 ? 1 : s > 100 ? 100 : s;
}

static void set_timeouts(int fd, int ms) {
  struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

static void sock_put(aipc__csock *s) {
  if (--s->refs > 0) return;
  close(s->fd);
  free(s);
}

static void creq_unlink(aipc__cconn *c, aipc__creq *r) {
  if (r->prev) r->prev->next = r->next; else c->pending = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
}

/* Unmaps the ledger, forgets cancelled requests. */
static void conn_forget_peer_state(aipc__cconn *c) {
  if (c->ledger) munmap(c->ledger, AIPC_LEDGER_BYTES);
  c->ledger = NULL;
  c->ledger_got = false;
  free(c->abandoned);
  c->abandoned = NULL;
  c->n_abandoned = c->cap_abandoned = 0;
}

/* Drops the connection; every request waiting on it fails with fail. A
 * thread still sending or receiving on the socket wakes (shutdown) and the
 * last one closes it. At our EOF the exporter drops every reference this
 * connection held. c->mu held. */
static void conn_drop(aipc__cconn *c, rt_result fail, const char *why) {
  if (c->sock) {
    if (c->sock->refs > 1) shutdown(c->sock->fd, SHUT_RDWR);
    sock_put(c->sock);
    c->sock = NULL;
  }
  conn_forget_peer_state(c);
  while (c->pending) {
    aipc__creq *r = c->pending;
    creq_unlink(c, r);
    r->state = CREQ_FAILED;
    r->fail = fail;
    r->why = why;
  }
  c->gen++;
  pthread_cond_broadcast(&c->cv);
}

static void conn_free(aipc__cconn *c) {
  conn_drop(c, RT_DEAD, NULL);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* A forked child: the parent's threads may have held the locks, and the
 * socket is still the parent's (no shutdown): close our copies and go. */
static void conn_forget(aipc__cconn *c) {
  if (c->sock) {
    close(c->sock->fd);
    free(c->sock);
  }
  conn_forget_peer_state(c);
  free(c);
}

static bool conn_idle(const aipc__cconn *c) { return c->users == 0 && c->imports == 0; }

/* The importer lock held: drops idle connections whose exporter hung up, then the least
 * recently used idle ones beyond AIPC_IDLE_CCONNS_MAX (each holds a socket
 * and a ledger mapping). */
static void conns_trim(bool sweep_dead) {
  aipc__hkey k;
  void *v;
  if (sweep_dead && g.idle_cconns) {
    for (size_t i = 0; aipc__hmap_next(&g.cconns, &i, &k, &v);) {
      aipc__cconn *c = v;
      if (!conn_idle(c)) continue;
      int fd = c->sock ? c->sock->fd : -1;
      struct pollfd p = {.fd = fd, .events = POLLIN};
      if (fd >= 0 && (poll(&p, 1, 0) == 0 || !(p.revents & (POLLHUP | POLLERR)))) continue;
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

aipc__cconn *aipc__cconn_get(uint32_t pid, uint64_t nonce, bool remote, uint32_t sdid) {
  aipc__cconn *c = aipc__hmap_get(&g.cconns, ckey(pid, nonce));
  if (!c) {
    conns_trim(true);
    c = calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    c->pid = pid;
    c->nonce = nonce;
    c->remote = remote;
    c->sdid = sdid;
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

void aipc__cconn_put(aipc__cconn *c) {
  c->users--;
  if (conn_idle(c)) {
    c->last_used = ++g.tick;
    g.idle_cconns++;
    conns_trim(false);
  }
}

const char *aipc__cconn_name(uint32_t pid, uint64_t nonce, char buf[64]) {
  if (nonce == 0)
    snprintf(buf, 64, "the exporter of shareable-handle door %u", pid);
  else
    snprintf(buf, 64, "exporter process %u", pid);
  return buf;
}

/* Connects to the exporter's socket, waiting at most connect_ms for room in
 * its backlog. No lock held. */
static aclError sock_open(const char *call, const aipc__cconn *c, uint32_t place, int connect_ms, int timeout_ms,
                          int *out) {
  uint32_t pid = c->pid;
  uint64_t nonce = c->nonce;
  char who[64];
  aipc__cconn_name(pid, nonce, who);
  struct sockaddr_un sa;
  unsigned salen = c->remote ? aipc__supernode_sockaddr(&sa, pid, nonce) : aipc__self_sockaddr(&sa, pid, nonce);
  if (c->remote) place = 0; /* another server's place is elsewhere by design: nothing to explain with it */
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    int e = errno;
    char hint[256];
    if (e == EMFILE || e == ENFILE)
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: cannot create a socket to %s: %s", call, who,
                        aipc__os_fd_limit_text(hint, sizeof hint));
    return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: cannot create a socket: %s", call, strerror(e));
  }
  set_timeouts(fd, connect_ms);
  int r;
  do r = connect(fd, (struct sockaddr *)&sa, salen);
  while (r != 0 && errno == EINTR);
  if (r != 0) {
    int e = errno;
    close(fd);
    if (e == EAGAIN || e == ETIMEDOUT)
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR,
                        "%s: %s did not accept a connection within %d ms (overloaded?)", call, who, timeout_ms);
    if (c->remote && e == ENOENT)
      return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                        "%s: %s is on server %u, in another network namespace, and has no socket in this "
                        "super-node's directory %s: it never offered anything across servers (a key whitelisted with "
                        "aclrtIpcMemImportPidInterServer, a fabric handle), it is in another super-node (another "
                        "ASCEND_IPC_SUPERNODE_DIR), or it exited",
                        call, who, c->sdid, aipc__config_get()->supernode_dir);
    if (c->remote && e == ECONNREFUSED)
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: %s of server %u is gone (exited or finalized)", call, who,
                        c->sdid);
    aclError far = e == ECONNREFUSED || e == ENOENT ? aipc__place_elsewhere(call, who, place) : ACL_SUCCESS;
    if (far != ACL_SUCCESS) return far;
    if (e == ECONNREFUSED || e == ENOENT)
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR,
                        "%s: %s is gone (exited or finalized): its keys can no longer be imported", call, who);
    return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: cannot connect to %s: %s", call, who, strerror(e));
  }
  pid_t peer = 0;
  uid_t peer_uid;
  /* A process's socket must be served by that process; a door (named by a
   * number anyone can read in a handle) by a process of this user, or it
   * could hand us memory of its choosing. */
  if (aipc__os_peer_cred(fd, &peer, &peer_uid) != 0 || (nonce != 0 && (uint32_t)peer != pid)) {
    close(fd);
    aclError far = aipc__place_elsewhere(call, who, place);
    if (far != ACL_SUCCESS) return far;
    return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: the socket of %s is served by another process (%d): key refused",
                      call, who, (int)peer);
  }
  uint32_t peer_sdid = 0;
  bool peer_same = false;
  if (c->remote && (aipc__supernode_peer(peer, &peer_sdid, &peer_same) != 0 || peer_same || peer_sdid != c->sdid)) {
    /* The server is the kernel's word (the exporter's network namespace), not the key's. */
    close(fd);
    if (peer_same)
      return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                        "%s: the key names %s on server %u, but that process runs in this process's network namespace, "
                        "which is server %u here: a server is a network namespace, and all its processes must agree on "
                        "its sdid (ASCEND_IPC_SDID); run the processes of another server in a network namespace of "
                        "their own (or the key is damaged)",
                        call, who, c->sdid, aipc__server_sdid());
    return aipc__fail(ACL_ERROR_RT_IPC_ERROR,
                      "%s: the key names %s on server %u, but that process is on another server: damaged or forged",
                      call, who, c->sdid);
  }
  if (peer_uid != geteuid()) {
    close(fd);
    return aipc__fail(ACL_ERROR_RT_NO_PERMISSION,
                      "%s: %s (process %d) runs as uid %u and this process as uid %u: IPC is shared only between "
                      "processes of the same user",
                      call, who, (int)peer, (unsigned)peer_uid, (unsigned)geteuid());
  }
  set_timeouts(fd, slice_ms(timeout_ms));
  *out = fd;
  return ACL_SUCCESS;
}

/* Connects c. c->mu held on entry and on return, released while connecting;
 * if another thread connected meanwhile, its connection is used. */
static aclError conn_open(const char *call, aipc__cconn *c, uint32_t place, uint64_t deadline) {
  int timeout_ms = aipc__config_get()->timeout_ms;
  uint64_t now = now_ms();
  int left = deadline > now ? (int)(deadline - now) : 1;
  pthread_mutex_unlock(&c->mu);
  int fd = -1;
  aclError rc = sock_open(call, c, place, left, timeout_ms, &fd);
  aipc__csock *s = rc == ACL_SUCCESS ? malloc(sizeof *s) : NULL;
  pthread_mutex_lock(&c->mu);
  if (rc != ACL_SUCCESS) return rc;
  if (!s || c->sock) {
    close(fd);
    free(s);
    return c->sock ? ACL_SUCCESS : aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
  }
  s->fd = fd;
  s->refs = 1;
  c->sock = s;
  c->gen++;
  return ACL_SUCCESS;
}

/* Sends one packet, waiting for room in the exporter's queue until deadline. */
static rt_result sock_send(int fd, const uint8_t *buf, size_t len, uint64_t deadline) {
  for (;;) {
    ssize_t r = send(fd, buf, len, MSG_NOSIGNAL);
    if (r == (ssize_t)len) return RT_OK;
    if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (now_ms() >= deadline) return RT_TIMEOUT;
      continue;
    }
    return RT_DEAD;
  }
}

/* Maps the exporter's release ledger for this connection (and closes fd),
 * once checked: this process writes into it for as long as the connection
 * lasts, so a ledger the exporter could cut would kill us (SIGBUS) at a
 * later close. Without it (mmap failed), releases go as RELEASE messages.
 * Returns what is wrong with it, leaving fd open, or NULL. */
static const char *install_ledger(aipc__cconn *c, int fd) {
  uint64_t size, page;
  aipc__os_fd_verdict v = aipc__os_fd_check_sealed(fd, AIPC_LEDGER_BYTES, true, false, &size, &page);
  if (v != AIPC_FD_OK) return aipc__os_fd_verdict_text(v);
  c->ledger_got = true;
  c->ledger = aipc__os_map_shared(fd, AIPC_LEDGER_BYTES);
  close(fd);
  return NULL;
}


/* Sends RELEASE(id, count), one-way. c->mu held on entry and on return,
 * released while sending. A connection that cannot take it (dead, or an
 * exporter not reading) is dropped: its EOF then makes the exporter drop
 * every reference this process holds on it. */
static void send_release(aipc__cconn *c, uint64_t id, uint32_t count) {
  aipc__csock *s = c->sock;
  if (!s) return;
  s->refs++;
  aipc__msg m;
  aipc__msg_release(&m, ++c->next_req, id, count);
  uint8_t buf[AIPC_PROTO_MAX];
  size_t len = aipc__proto_encode(&m, buf);
  pthread_mutex_unlock(&c->mu);
  rt_result rr = sock_send(s->fd, buf, len, now_ms() + (uint64_t)aipc__config_get()->timeout_ms);
  pthread_mutex_lock(&c->mu);
  if (rr != RT_OK && c->sock == s) conn_drop(c, RT_DEAD, NULL);
  sock_put(s);
}

void aipc__cconn_release(aipc__cconn *c, uint64_t id, uint32_t slot, uint32_t n) {
  if (c->ledger && slot < AIPC_LEDGER_SLOTS) /* decoding bounds it; an index stays checked where it is used */
    __atomic_add_fetch(&c->ledger[slot], n, __ATOMIC_RELEASE);
  else
    send_release(c, id, n);
}

static int abandoned_take(aipc__cconn *c, uint64_t req) {
  for (size_t i = 0; i < c->n_abandoned; i++) {
    if (c->abandoned[i] == req) {
      c->abandoned[i] = c->abandoned[--c->n_abandoned];
      return 1;
    }
  }
  return 0;
}

static int abandoned_add(aipc__cconn *c, uint64_t req) {
  if (c->n_abandoned >= ABANDONED_MAX) return -1;
  if (c->n_abandoned == c->cap_abandoned) {
    size_t cap = c->cap_abandoned ? c->cap_abandoned * 2 : 8;
    uint64_t *v = realloc(c->abandoned, cap * sizeof *v);
    if (!v) return -1;
    c->abandoned = v;
    c->cap_abandoned = cap;
  }
  c->abandoned[c->n_abandoned++] = req;
  return 0;
}

/* The id below which every request of c is settled (answered, or its
 * CANCEL sent), given that request req is about to go. */
static uint64_t settled_mark(const aipc__cconn *c, uint64_t req) {
  uint64_t low = req;
  for (const aipc__creq *r = c->pending; r; r = r->next)
    if (r->id < low) low = r->id;
  return low;
}

/* After MSG_CTRUNC: whether this process has no descriptor to spare, so the
 * kernel could not install the exporter's. */
static bool out_of_fds(int sock) {
  int probe = fcntl(sock, F_DUPFD_CLOEXEC, 0);
  if (probe >= 0) {
    close(probe);
    return false;
  }
  return errno == EMFILE || errno == ENFILE;
}

/* One packet from the exporter: checked, its descriptors taken (the ledger
 * installed, a grant's memfd given to its request), handed to
 * the request it answers. Anything wrong drops the connection. c->mu held. */
static void dispatch(aipc__cconn *c, const uint8_t *buf, size_t len, int *fds, int nfd, unsigned seen, bool no_fds) {
  aipc__msg a;
  const char *why = NULL;
  aipc__decode_result d = aipc__proto_decode(buf, len, &a, &why);
  rt_result bad = RT_OK;
  if (seen & AIPC_RECV_FDS_DROPPED) {
    bad = no_fds ? RT_NOFD : RT_PROTO;
    why = "descriptors lost in transit";
  } else if (d != AIPC_DECODE_OK || (seen & AIPC_RECV_ODD)) {
    bad = RT_PROTO;
    if (!why) why = "unexpected control data";
  } else if (a.type != AIPC_MSG_IMPORT_REPLY && a.type != AIPC_MSG_ERROR) {
    bad = RT_PROTO;
    why = "a message only importers send";
  } else if (nfd != (a.type == AIPC_MSG_IMPORT_REPLY
                         ? !!(a.flags & AIPC_REPLY_FD) + !!(a.flags & AIPC_REPLY_LEDGER) : 0)) {
    bad = RT_PROTO;
    why = "descriptors missing or unexpected";
  }
  aipc__creq *r = NULL;
  if (bad == RT_OK) {
    /* An ERROR with id 0 refuses the connection itself (at accept): it answers a waiting request. */
    for (r = c->pending; r && !(a.type == AIPC_MSG_ERROR && a.req == 0) && r->id != a.req; r = r->next) {}
    /* Not waited for: the reply to a cancelled request (the exporter took its
     * reference back at the CANCEL), or one never asked for. */
    if (!r && !abandoned_take(c, a.req)) {
      bad = RT_PROTO;
      why = "reply to a request never sent";
    }
  }
  int memfd = -1;
  if (bad == RT_OK && a.type == AIPC_MSG_IMPORT_REPLY && a.status == ACL_SUCCESS) {
    if (!(a.flags & AIPC_REPLY_FD)) {
      bad = RT_PROTO;
      why = "a grant without the allocation's memory";
    } else if ((a.flags & AIPC_REPLY_LEDGER) && c->ledger_got) {
      bad = RT_PROTO;
      why = "a second release ledger on one connection";
    } else if ((a.flags & AIPC_REPLY_LEDGER) && (why = install_ledger(c, fds[1])) != NULL) {
      bad = RT_LEDGER; /* the connection's releases have nowhere safe to go: dropped, and so given back */
    } else {
      if (a.flags & AIPC_REPLY_LEDGER) fds[1] = -1;
      memfd = fds[0];
      fds[0] = -1;
    }
  }
  if (bad != RT_OK) {
    for (int i = 0; i < nfd; i++)
      if (fds[i] >= 0) close(fds[i]);
    conn_drop(c, bad, why);
    return;
  }
  if (r) {
    creq_unlink(c, r);
    r->reply = a;
    r->memfd = memfd;
    r->state = CREQ_DONE;
  } else if (memfd >= 0) {
    close(memfd); /* a cancelled request's: its reference went back at the CANCEL */
  }
}

/* Receives one packet for everyone (for at most a time slice; polling first,
 * but never past deadline_ms) and hands it out. c->mu held on entry and on
 * return, released while receiving. */
static void read_one(aipc__cconn *c, aipc__csock *s, uint64_t deadline_ms) {
  c->reading = true;
  uint64_t start = aipc__os_now_ns(), until = aipc__spin_until(&c->spin, start);
  if (until > deadline_ms * 1000000u) until = deadline_ms * 1000000u; /* one clock: CLOCK_MONOTONIC */
  pthread_mutex_unlock(&c->mu);
  if (until)
    while (!aipc__os_readable(s->fd) && aipc__spin_again(until)) {
    }
  uint8_t buf[AIPC_PROTO_MAX];
  int fds[AIPC_PROTO_MAX_FDS], nfd = 0;
  unsigned seen = 0;
  ssize_t n = aipc__proto_recv(s->fd, buf, 0, fds, &nfd, &seen);
  int err = errno;
  bool no_fds = n > 0 && (seen & AIPC_RECV_FDS_DROPPED) && out_of_fds(s->fd);
  uint64_t waited = aipc__os_now_ns() - start;
  pthread_mutex_lock(&c->mu);
  c->reading = false;
  if (n > 0) aipc__spin_learn(&c->spin, waited);
  pthread_cond_broadcast(&c->cv); /* the waiters see what this packet brought, or take the reading over */
  if (c->sock != s || n <= 0) {
    for (int i = 0; i < nfd; i++) close(fds[i]);
    if (c->sock != s) return; /* dropped meanwhile: the requests on it have failed already */
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)) return;
    conn_drop(c, RT_DEAD, NULL);
    return;
  }
  dispatch(c, buf, (size_t)n, fds, nfd, seen, no_fds);
}

/* r's caller gives up. c->mu held; r is still waiting, so s is c's socket
 * (a drop would have failed r). */
static void abandon(aipc__cconn *c, aipc__csock *s, aipc__creq *r) {
  creq_unlink(c, r);
  if (abandoned_add(c, r->id) != 0) {
    conn_drop(c, RT_DEAD, NULL);
    return;
  }
  aipc__msg m;
  aipc__msg_cancel(&m, r->id);
  uint8_t buf[AIPC_PROTO_MAX];
  size_t len = aipc__proto_encode(&m, buf);
  /* Sent under c->mu, so no IMPORT saying r is settled can go before it.
   * Never waits: an exporter whose queue is full is not reading, and
   * dropping the connection gives the reference back just as well. */
  ssize_t n;
  do n = send(s->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)len) conn_drop(c, RT_DEAD, NULL);
}

static void wait_until(aipc__cconn *c, uint64_t deadline_ms) {
  struct timespec ts = {.tv_sec = (time_t)(deadline_ms / 1000), .tv_nsec = (long)(deadline_ms % 1000) * 1000000};
  pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

/* Sends q and waits for its reply (in r->reply) until deadline. c->mu held on
 * entry and on return, released while sending and waiting; c->sock set. */
static rt_result request(aipc__cconn *c, aipc__msg *q, aipc__creq *r, uint64_t deadline) {
  aipc__csock *s = c->sock;
  s->refs++;
  r->id = ++c->next_req;
  aipc__msg_number(q, r->id, settled_mark(c, r->id));
  r->state = CREQ_WAITING;
  r->memfd = -1;
  r->prev = NULL;
  r->next = c->pending;
  if (c->pending) c->pending->prev = r;
  c->pending = r;
  uint8_t buf[AIPC_PROTO_MAX];
  size_t len = aipc__proto_encode(q, buf);
  pthread_mutex_unlock(&c->mu);
  rt_result sr = sock_send(s->fd, buf, len, deadline);
  pthread_mutex_lock(&c->mu);
  /* An exporter that refused the connection at accept has closed it by now:
   * its ERROR waits in our queue. */
  if (sr == RT_DEAD && c->sock == s && r->state == CREQ_WAITING && !c->reading) read_one(c, s, deadline);
  if (sr != RT_OK && r->state != CREQ_DONE) {
    /* nothing went out (one packet is sent whole or not at all) */
    if (r->state == CREQ_WAITING) creq_unlink(c, r);
    if (sr == RT_DEAD && c->sock == s) conn_drop(c, RT_DEAD, NULL);
    sock_put(s);
    return sr;
  }
  while (r->state == CREQ_WAITING) {
    if (now_ms() >= deadline) {
      abandon(c, s, r);
      sock_put(s);
      return RT_TIMEOUT;
    }
    if (!c->reading)
      read_one(c, s, deadline);
    else
      wait_until(c, deadline);
  }
  sock_put(s);
  return r->state == CREQ_DONE ? RT_OK : r->fail;
}

/* ---- the import request ---------------------------------------------------------- */

aclError aipc__cconn_import(const char *call, aipc__cconn *c, const aipc__key *k, uint64_t flags, uint64_t deadline,
                            aipc__granted *out) {
  int timeout_ms = aipc__config_get()->timeout_ms;
  aipc__msg q;
  aipc__msg_import(&q, k->export_id, k->secret, (uint32_t)flags | (uint32_t)k->kind << AIPC_IMPORT_KIND_SHIFT,
                   aipc__server_sdid());
  aipc__creq r;
  rt_result rr = RT_DEAD;
  uint64_t gen = 0;
  for (int attempt = 0; attempt < 2; attempt++) {
    bool fresh = false;
    if (!c->sock) {
      aclError rc = conn_open(call, c, k->place, deadline);
      if (rc != ACL_SUCCESS) return rc;
      fresh = true;
    }
    gen = c->gen;
    rr = request(c, &q, &r, deadline);
    /* EOF on a cached connection: the exporter may have restarted its server; try once more */
    if (rr != RT_DEAD || fresh) break;
  }
  if (rr == RT_OK && c->gen != gen) { /* the connection went with the grant */
    if (r.memfd >= 0) close(r.memfd);
    rr = RT_DEAD;
  }
  aipc__msg_wipe(&q);
  char who[64]; /* named only for a message: a snprintf per import shows in the profile */
  if (rr != RT_OK) aipc__cconn_name(k->pid, k->nonce, who);
  switch (rr) {
    case RT_OK: break;
    case RT_DEAD:
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: %s closed the connection (it exited, finalized or refused us)",
                        call, who);
    case RT_TIMEOUT:
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR,
                        "%s: no reply from %s within %d ms (stopped, hung or overloaded?); ASCEND_IPC_TIMEOUT_MS sets "
                        "the limit",
                        call, who, timeout_ms);
    case RT_PROTO:
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: %s sent a malformed reply (%s)", call, who, r.why ? r.why : "?");
    case RT_LEDGER:
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: %s sent a release ledger that %s (refused)", call, who,
                        r.why ? r.why : "?");
    case RT_NOFD: {
      char hint[256];
      return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: cannot receive the memory of %s: %s", call, who,
                        aipc__os_fd_limit_text(hint, sizeof hint));
    }
  }
  const aipc__msg *a = &r.reply;
  if (a->type == AIPC_MSG_ERROR) {
    conn_drop(c, RT_DEAD, NULL); /* the exporter closes it after an ERROR */
    return aipc__fail(a->status, "%s: %s", call, a->text);
  }
  if (a->status != ACL_SUCCESS) return aipc__fail(a->status, "%s: %s", call, a->text);

  /* Granted: from here on a failure must give the reference back. The
   * memory must be what an exporter of this library sends: a memfd sealed
   * against shrinking and growing, writable, holding the whole range (else
   * a later touch could SIGBUS this process), shaped as its kind is. */
  int memfd = r.memfd;
  bool physical = k->kind == AIPC_OBJECT_PHYSICAL; /* a descriptor to keep, no reference to give back */
  const char *wrong = NULL;
  uint64_t file_size, page = AIPC_PAGE_SIZE;
  if (a->size > UINT64_MAX - a->offset || !AIPC_IS_PAGE_ALIGNED(a->offset) || !AIPC_IS_PAGE_ALIGNED(a->size)) {
    wrong = "is not a page-aligned range";
  } else {
    /* a physical allocation is shared whole: its memfd is exactly the range */
    /* device memory may be in huge pages (the exporter's aclrtMalloc policy) */
    aipc__os_fd_verdict v =
        aipc__os_fd_check_sealed(memfd, a->offset + a->size, physical, k->kind == AIPC_OBJECT_MEMORY, &file_size, &page);
    if (v != AIPC_FD_OK)
      wrong = aipc__os_fd_verdict_text(v);
    else if (k->kind != AIPC_OBJECT_MEMORY && !physical && a->size != AIPC_PAGE_SIZE)
      wrong = "is not the one page an IPC event's or notify's state takes";
    else if (physical && (a->offset != 0 || a->slot != AIPC_NO_SLOT))
      wrong = "is not a whole physical allocation";
  }
  if (wrong) {
    close(memfd);
    if (!physical) aipc__cconn_release(c, k->export_id, a->slot, 1);
    return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: %s granted memory that %s (refused)", call,
                      aipc__cconn_name(k->pid, k->nonce, who), wrong);
  }
  out->device = a->device;
  out->attr = a->attr;
  out->offset = a->offset;
  out->size = a->size;
  out->slot = a->slot;
  out->gen = c->gen;
  out->memfd = memfd;
  out->page = page;
  return ACL_SUCCESS;
}

/* ---- finalize, fork ------------------------------------------------------------- */

void aipc__cconns_clear(bool unmap) {
  aipc__hkey k;
  void *v;
  for (size_t i = 0; aipc__hmap_next(&g.cconns, &i, &k, &v);) {
    aipc__cconn *c = v;
    if (unmap)
      conn_free(c);
    else
      conn_forget(c);
  }
  aipc__hmap_clear(&g.cconns);
  g.idle_cconns = 0;
}
