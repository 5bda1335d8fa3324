/*
 * Exporter side, serving (exporter_internal.h): one message read from an
 * importer's connection at a time, under the exporter lock and without
 * blocking (MSG_DONTWAIT). An IMPORT becomes a grant (one more reference,
 * the allocation's memfd, the ledger with the first) or a refusal; a
 * CANCEL gives back a grant the importer gave up on; a RELEASE gives back
 * references. Because receiving is done under the lock, an exporter's
 * aclrtIpcMemClose can process what an importer already sent (its
 * RELEASE, its EOF) before it decides, in order and without racing the
 * server thread (aipc__export_drain).
 *
 * Who is served is decided from what the kernel says: the sender's uid
 * and pid with every IMPORT (SCM_CREDENTIALS), the pid bound to its
 * process by start time. docs/design-ipc.md, "Security model".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "emu/ipc/exporter_internal.h"
#include "emu/ipc/proto.h"
#include "emu/ipc/supernode.h"

#define DRAIN_MAX 4096 /* messages per connection when a close drains it */

/*
 * Guessing. A shareable handle is all its holder has: a door number anyone
 * can read in /proc/net/unix and 32 random bits, so the exporter limits how
 * fast anyone may guess them. Failed lookups of secret-less exports (a
 * request with a zero secret, or one asking for physical memory) draw on an
 * allowance per exporter: GUESS_BURST, refilled at GUESS_PER_S. While it is
 * spent such lookups are refused unread; a connection that fails
 * GUESS_CONN_MAX of them in a row is closed. Finding one live handle then
 * takes 2^31 / GUESS_PER_S seconds on average: over four years.
 * Keys of memory, notifies and events carry 128-bit secrets and are not
 * limited. docs/design-ipc.md, "Security model".
 */
#define GUESS_BURST 64
#define GUESS_PER_S 16
#define GUESS_CONN_MAX 16
#define GUESS_INTERVAL_NS (UINT64_C(1000000000) / GUESS_PER_S)

/* The allowance as one time (generic cell rate): the moment the failures so
 * far would be paid off at GUESS_PER_S. The exporter lock guards it. */
static uint64_t guess_paid_off_ns;

static bool guess_allowed(uint64_t now) {
  uint64_t t = guess_paid_off_ns > now ? guess_paid_off_ns : now;
  return t - now <= (GUESS_BURST - 1) * GUESS_INTERVAL_NS;
}

static void guess_failed(uint64_t now) {
  uint64_t t = guess_paid_off_ns > now ? guess_paid_off_ns : now;
  guess_paid_off_ns = t + GUESS_INTERVAL_NS;
}

/* A lookup a guesser could make: nothing but the id to find. */
static bool guessable(const aipc__msg *q) {
  static const uint8_t zero[AIPC_SECRET_LEN];
  return (aipc__object_kind)(q->flags >> AIPC_IMPORT_KIND_SHIFT) == AIPC_OBJECT_PHYSICAL ||
         memcmp(q->secret, zero, AIPC_SECRET_LEN) == 0;
}

static int conn_send2(aipc__sconn *c, aipc__msg *m, int fd, int fd2) {
  uint8_t buf[AIPC_PROTO_MAX];
  size_t len = aipc__proto_encode(m, buf);
  int fds[2], nfd = 0;
  if (fd >= 0) fds[nfd++] = fd;
  if (fd2 >= 0) fds[nfd++] = fd2;
  /* Never blocks: an importer that does not read its replies is dropped. */
  return aipc__os_send_fds(c->fd, buf, len, fds, nfd, MSG_DONTWAIT) == (ssize_t)len ? 0 : -1;
}

static int conn_send(aipc__sconn *c, aipc__msg *m, int fd) { return conn_send2(c, m, fd, -1); }

/* Refuses a guessable lookup that found nothing this peer may have. An
 * unknown handle, a closed one, one of another kind and one whose whitelist
 * lacks the sender all answer this, word for word: a guesser cannot tell a
 * hit. It counts against the allowance and the connection. */
static void refuse_guess(aipc__sconn *c, const aipc__msg *q, const aipc__os_sender *from, uint64_t now, aipc__msg *a) {
  guess_failed(now);
  c->guesses_failed++;
  aipc__msg_refuse(a, q->req, ACL_ERROR_RT_NO_PERMISSION,
                   "process %d may import no shareable handle of that number from process %d: never issued, "
                   "closed, forged, or exported with pid validation and process %d not passed to "
                   "aclrtMemSetPidToShareableHandle",
                   (int)from->pid, (int)aipc__exporter_me->pid, (int)from->pid);
}

/* q came from `from` (the kernel's record of its sender at send time). */
static void handle_import(aipc__sconn *c, const aipc__msg *q, const aipc__os_sender *from) {
  aipc__grants_settle(c, q->settled);
  aipc__msg a;
  /* Releases this importer already noted count first (keeps counts small). */
  if (!aipc__sconn_consume(q->export_id, c)) return;
  int fd = -1, ledger_fd = -1;
  aipc__object_kind want = (aipc__object_kind)(q->flags >> AIPC_IMPORT_KIND_SHIFT);
  /* Each fact once: the sender, the export and its whitelist (looked up only
   * for the opener, and for a guess only while the allowance lasts). */
  uint64_t start = 0, now = 0;
  aipc__sender_verdict who = aipc__sconn_sender(c, from->pid, &start);
  bool guess = guessable(q), held_off = false;
  if (guess) held_off = !guess_allowed(now = aipc__os_now_ns());
  /* A connection through the super-node socket: the opener's server, by its
   * network namespace (read once, while the pidfd says it is the opener). */
  if (who == AIPC_SENDER_OPENER && c->remote && !c->peer_known &&
      aipc__supernode_peer(c->pid, &c->peer_sdid, &c->peer_same) == 0)
    c->peer_known = c->pidfd < 0 || !aipc__os_pidfd_ended(c->pidfd);
  uint32_t here = aipc__server_sdid();
  bool other_server = c->remote && c->peer_known && !c->peer_same;
  uint32_t server = other_server ? c->peer_sdid : here; /* the sender's, by the kernel's word */
  aipc__export *e = who == AIPC_SENDER_OPENER && !held_off ? aipc__export_lookup(q->export_id, q->secret) : NULL;
  aipc__wl_verdict wl = !e               ? AIPC_WL_NOT_LISTED
                        : other_server ? aipc__whitelisted_remote(e, server, from->pid, start)
                                       : aipc__whitelisted(e, from->pid, start);
  /* A guess that found nothing this peer may have answers as a miss. */
  bool unseen = !e || (guess && (e->closed || want != e->kind || wl != AIPC_WL_YES));
  if (from->uid != aipc__exporter_me->euid) {
    /* Checked per request: a process that changed its uid since it connected is refused now. */
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_NO_PERMISSION,
                     "process %d sent this request as uid %u but the exporter (process %d) runs as uid %u: "
                     "IPC memory is shared only between processes of the same user",
                     (int)from->pid, (unsigned)from->uid, (int)aipc__exporter_me->pid, (unsigned)aipc__exporter_me->euid);
  } else if (who == AIPC_SENDER_OTHER) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_NO_PERMISSION,
                     "this connection was opened by process %d, and process %d sent on it: a connection serves only "
                     "the process that opened it (the exporter is process %d)",
                     (int)c->pid, (int)from->pid, (int)aipc__exporter_me->pid);
  } else if (who == AIPC_SENDER_GONE) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_NO_PERMISSION,
                     "process %d, which opened this connection, is gone: the process sending as pid %d now is another "
                     "one, and is refused (the exporter is process %d)",
                     (int)c->pid, (int)from->pid, (int)aipc__exporter_me->pid);
  } else if (c->remote && !c->peer_known) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_NO_PERMISSION,
                     "cannot read the network namespace of process %d, which came through the super-node directory, "
                     "so its server is unknown: refused (the exporter is process %d)",
                     (int)from->pid, (int)aipc__exporter_me->pid);
  } else if (q->sdid != server && !other_server) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                     "process %d says it is on server %u, but it runs in the network namespace of the exporter "
                     "(process %d), which is server %u: a server is a network namespace, and all its processes must "
                     "agree on its sdid (ASCEND_IPC_SDID); run the processes of another server in a network namespace "
                     "of their own",
                     (int)from->pid, q->sdid, (int)aipc__exporter_me->pid, here);
  } else if (q->sdid != server) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_NO_PERMISSION,
                     "process %d says it is on server %u, but its network namespace is server %u's (refused: a "
                     "process's server is read from the kernel; the exporter is process %d of server %u)",
                     (int)from->pid, q->sdid, server, (int)aipc__exporter_me->pid, here);
  } else if (held_off) {
    c->guesses_failed++;
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_IPC_ERROR,
                     "process %d refuses shareable-handle imports for now: too many failed ones (more than %d, then "
                     "%d a second), as when someone guesses handles; retry later",
                     (int)aipc__exporter_me->pid, GUESS_BURST, GUESS_PER_S);
  } else if (unseen) {
    if (guess)
      refuse_guess(c, q, from, now, &a);
    else
      aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_IPC_ERROR, "key not exported by process %d (closed, never issued, or forged)", (int)aipc__exporter_me->pid);
  } else if (e->closed) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_IPC_ERROR, "key was closed by its exporter (process %d): no new imports", (int)aipc__exporter_me->pid);
  } else if (want != e->kind) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_INVALID_PARAM, "the key is %s, not %s", aipc__object_what(e->kind),
                     aipc__object_what(want));
  } else if (other_server && e->kind == AIPC_OBJECT_EVENT) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                     "IPC events are shared within one server only (CANN has no inter-server whitelist for them); "
                     "process %d is in another network namespace, server %u, the exporter on server %u: use an IPC "
                     "notify across servers",
                     (int)from->pid, server, here);
  } else if (wl == AIPC_WL_NOT_LISTED && other_server && e->kind != AIPC_OBJECT_PHYSICAL &&
             (e->flags & ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION)) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                     "%s with pid validation disabled is open to the processes of its own server only; process %d is "
                     "in another network namespace, server %u, the exporter (process %d) on server %u: the exporter "
                     "must pass {sdid %u, pid %d} to %s",
                     e->kind == AIPC_OBJECT_NOTIFY ? "a notify shared" : "a key exported", (int)from->pid, server,
                     (int)aipc__exporter_me->pid, here, server, (int)from->pid,
                     e->kind == AIPC_OBJECT_NOTIFY ? "aclrtNotifySetImportPidInterServer"
                                                   : "aclrtIpcMemImportPidInterServer");
  } else if (wl == AIPC_WL_NOT_LISTED && other_server) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_NO_PERMISSION,
                     "process %d of server %u is not on the whitelist of this key for that server: the exporter "
                     "(process %d of server %u) must pass {sdid %u, pid %d} to %s, or export with pid validation "
                     "disabled",
                     (int)from->pid, server, (int)aipc__exporter_me->pid, here, server, (int)from->pid,
                     e->kind == AIPC_OBJECT_NOTIFY     ? "aclrtNotifySetImportPidInterServer"
                     : e->kind == AIPC_OBJECT_PHYSICAL ? "aclrtMemSetPidToShareableHandleV2"
                                                       : "aclrtIpcMemImportPidInterServer");
  } else if (wl == AIPC_WL_NOT_LISTED) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_NO_PERMISSION,
                     "process %d is not on the whitelist of this key: the exporter (process %d) must %s", (int)from->pid,
                     (int)aipc__exporter_me->pid, aipc__object_allow(e->kind));
  } else if (wl == AIPC_WL_NEVER_RAN) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_NO_PERMISSION,
                     "pid %d is on the whitelist of this key, but no process had that pid when the exporter (process %d) "
                     "whitelisted it, so the entry matches no process: whitelist a running process",
                     (int)from->pid, (int)aipc__exporter_me->pid);
  } else if (wl == AIPC_WL_GONE) {
    aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_NO_PERMISSION,
                     "pid %d was whitelisted for this key, but the process that had it then is gone: the process "
                     "sending as pid %d now is another one, and is refused (the exporter is process %d)",
                     (int)from->pid, (int)from->pid, (int)aipc__exporter_me->pid);
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
    aipc__ref *r = aipc__ref_get(e->id, c->serial);
    if (freed) {
      aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_IPC_ERROR, "the memory of this key was freed by its exporter (process %d)", (int)aipc__exporter_me->pid);
    } else if (r && r->count == UINT32_MAX) {
      aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_INTERNAL_ERROR, "too many references from process %d", (int)c->pid);
    } else if (!r && (!(r = calloc(1, sizeof *r)) || aipc__ref_put(e->id, c->serial, r) != 0)) {
      free(r);
      r = NULL;
      aipc__msg_refuse(&a, q->req, ACL_ERROR_RT_INTERNAL_ERROR, "exporter (process %d) is out of memory", (int)aipc__exporter_me->pid);
    } else {
      if (r->count == 0) {
        if (!c->ledger && !c->ledger_sent) ledger_fd = aipc__ledger_create(c);
        r->slot = aipc__ledger_slot_alloc(c);
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
  if (sent != 0 || c->guesses_failed > GUESS_CONN_MAX) {
    aipc__sconn_kill(c); /* drops the reference just counted too; or ends a guesser's turn */
    return;
  }
  if (a.status == ACL_SUCCESS) c->guesses_failed = 0; /* in a row: a legitimate importer's stale handle is forgiven */
  if (a.status == ACL_SUCCESS && e->kind != AIPC_OBJECT_PHYSICAL) aipc__grants_add(c, q->req, q->export_id);
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
    if (!aipc__sconn_consume(id, c)) return;
    aipc__ref *r = aipc__ref_get(id, c->serial);
    if (!r) {
      aipc__sconn_kill(c); /* it released the very reference it cancels: a broken or hostile peer */
      return;
    }
    aipc__ref_release(r, 1);
    return;
  }
}

static void handle_release(aipc__sconn *c, const aipc__msg *q) {
  aipc__ref *r = aipc__ref_get(q->export_id, c->serial);
  if (!r || q->count > r->count) {
    aipc__sconn_kill(c); /* releasing what it does not hold: a broken or hostile peer */
    return;
  }
  aipc__ref_release(r, q->count);
}

static void send_version_error(aipc__sconn *c, const aipc__msg *q) {
  aipc__msg a;
  aipc__msg_error(&a, q->req, ACL_ERROR_RT_IPC_ERROR, "exporter (process %d) speaks IPC protocol version %d, not %u", (int)aipc__exporter_me->pid,
                       AIPC_PROTO_VERSION, (unsigned)q->version);
  (void)conn_send(c, &a, -1);
}

void aipc__sconn_service(aipc__sconn *c, int max) {
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
      if (errno != EAGAIN && errno != EWOULDBLOCK) aipc__sconn_kill(c);
      return;
    }
    for (int k = 0; k < nfd; k++) close(fds[k]);
    if (c->stand_in) from = c->sender;
    /* No credentials: SO_PASSCRED (inherited from the listening socket) makes
     * the kernel attach them to every packet, so this does not happen. */
    if (r == 0 || nfd || seen || from.pid <= 0) {
      aipc__sconn_kill(c); /* EOF (the importer is gone), or a packet no importer sends */
      return;
    }
    aipc__msg m;
    const char *why;
    aipc__decode_result d = aipc__proto_decode(buf, (size_t)r, &m, &why);
    if (d == AIPC_DECODE_VERSION) {
      send_version_error(c, &m);
      aipc__sconn_kill(c);
      return;
    }
    if (d != AIPC_DECODE_OK) {
      aipc__sconn_kill(c);
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
      aipc__sconn_kill(c); /* a reply type sent to the exporter */
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
   * which it cannot do while we hold the lock. */
  uint64_t id = e->id;
  for (i = 0; i < n; i++) {
    if (!v[i]->dead) aipc__sconn_service(v[i], DRAIN_MAX);
    if (!v[i]->dead) aipc__sconn_consume(id, v[i]);
  }
  if (v != &one) free(v);
}

/* ---- seam for the fuzz target and white-box tests (exporter.h) -------------------- */

bool aipc__exporter_serve(uint64_t serial, int max) {
  aipc__exporter_lock();
  aipc__sconn *c = aipc__sconn_find(serial);
  if (c) aipc__sconn_service(c, max);
  bool open = c && !c->dead;
  aipc__exporter_unlock();
  return open;
}
