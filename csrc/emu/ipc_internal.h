/*
 * Private to the IPC layer (ipc.c, ipc_server.c, ipc_client.c).
 *
 * One mutex (g.lock) guards every table below. It is held briefly and never
 * across a wait on a peer; lock order: g.lock -> memory lock. A client
 * connection's own mutex (cconn.mu), also never held across a wait, guards
 * that connection; it is taken without g.lock held (g.lock may be taken
 * inside it).
 * Design notes: docs/design-ipc.md.
 */
#ifndef ASCEND_IPC_EMU_IPC_INTERNAL_H_
#define ASCEND_IPC_EMU_IPC_INTERNAL_H_

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/hashmap.h"
#include "emu/emu.h"
#include "emu/ipc_key.h"
#include "emu/ipc_proto.h"

/* ---- exporter side (ipc_server.c) --------------------------------------- */

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
  uint8_t secret[AIPC_SECRET_LEN];
  void *ptr;          /* exported address in this process */
  size_t size;
  int32_t device;
  uint64_t offset;    /* of ptr in the device arena */
  aipc__block *block; /* pinned while this record lives */
  uint64_t flags;     /* ACL_RT_IPC_MEM_EXPORT_FLAG_* */
  uint32_t attr;      /* ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_* */
  bool imported;      /* any import ever happened: attributes are frozen */
  bool closed;        /* the exporter closed it: no new imports */
  uint64_t refs_total; /* importer references, own-process ones included */
  uint32_t self_refs;  /* imports by this process of its own key */
  aipc__ref *refs;     /* per importer connection */
  aipc__hmap whitelist; /* pid -> (void *)1 */
  aipc__rpeer *remote;  /* ImportPidInterServer entries of other servers */
  size_t n_remote, cap_remote;
  bool closing;         /* closed with importers left: in g.closing */
  aipc__export *cprev, *cnext;
};

struct aipc__sconn {
  int fd;
  uint64_t serial; /* never reused; keys the refs map */
  pid_t pid;       /* SO_PEERCRED at accept */
  uid_t uid;
  bool dead;       /* closed; freed by the server thread at the end of its batch */
  uint8_t *fd_sent; /* per device: arena fd already sent on this connection */
  size_t n_fd_sent;
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

/* ---- importer side (ipc_client.c) --------------------------------------- */

typedef struct aipc__cconn aipc__cconn;

/*
 * A window: one mapping of [index * AIPC_WINDOW, + len) of an exporter's
 * device arena, shared by every import that lies inside it, so an import
 * or close costs no mmap/munmap. Kept (idle, LRU) after its last import
 * closes, up to AIPC_IDLE_WINDOWS_MAX. Guarded by g.lock.
 */
typedef struct aipc__win {
  aipc__cconn *conn;
  int32_t device;
  uint64_t index;
  void *base;
  size_t len;
  uint32_t refs; /* live imports in it */
  struct aipc__win *lprev, *lnext; /* idle LRU (g.idle_wins), oldest first */
} aipc__win;

#define AIPC_WINDOW ((uint64_t)1 << 30)
#define AIPC_IDLE_WINDOWS_MAX 16

/* A connected socket, shared by the threads sending and receiving on it:
 * closed when the last lets go, so its number is never reused under one. */
typedef struct aipc__csock {
  int fd;
  uint32_t refs; /* guarded by the connection's mu */
} aipc__csock;

typedef struct aipc__creq aipc__creq; /* a request waiting for its reply (ipc_client.c) */

/*
 * Requests from any number of threads share the connection: each sends its
 * own and waits with its own deadline; one of them at a time receives
 * (reading) and hands each reply to its owner.
 */
struct aipc__cconn {
  pthread_mutex_t mu; /* guards the fields up to users; never held across a wait on the exporter */
  pthread_cond_t cv;  /* a reply was handed out, the reader left, or the connection went */
  uint32_t pid;
  uint64_t nonce;
  aipc__csock *sock; /* NULL when not connected */
  uint64_t gen;      /* bumped at every (re)connect and drop */
  uint64_t next_req;
  bool reading;         /* a thread is receiving for everyone */
  aipc__creq *pending;  /* requests sent and waiting for their reply */
  int *arena_fds;       /* per exporter device, -1 when not received yet */
  uint32_t *ledger;     /* the exporter's release ledger for this connection, or NULL */
  uint64_t *arena_sizes;
  size_t n_arena;
  uint64_t *abandoned; /* ids of cancelled requests whose reply has not come yet */
  size_t n_abandoned, cap_abandoned;
  /* g.lock: */
  uint32_t users;   /* threads working on it */
  uint32_t imports; /* live import records on it */
  uint64_t last_used;
  aipc__hmap wins;  /* {device, index} -> aipc__win */
};

typedef struct aipc__import {
  uint64_t nonce, export_id;
  uint32_t pid;
  uint8_t secret[AIPC_SECRET_LEN];
  void *ptr;
  size_t size;
  int32_t device;
  uint32_t attr;
  uint32_t refs;      /* aclrtIpcMemImportByKey calls not yet closed */
  uint32_t wire_refs; /* references the exporter counts for this process */
  uint64_t conn_gen;  /* connection generation those references live on */
  uint32_t slot;      /* their ledger slot, or AIPC_NO_SLOT */
  aipc__cconn *conn;
  aipc__block *block;
  aipc__win *win; /* NULL: a mapping of its own */
} aipc__import;

/* ---- shared state -------------------------------------------------------- */

typedef struct aipc__ipc_state {
  pthread_mutex_t lock;
  pid_t pid;      /* 0 until first needed */
  uint64_t nonce; /* 0 until first needed */
  uid_t euid;
  uint64_t next_export_id;
  uint64_t next_serial;
  uint64_t tick; /* for LRU of idle client connections */

  /* exporter */
  bool server_running;
  bool stop;
  pthread_t thread;
  int listen_fd, epoll_fd, wake_fd;
  bool listen_paused;
  aipc__hmap exports; /* {id, 0} -> aipc__export */
  aipc__hmap refs;    /* {export id, conn serial} -> aipc__ref */
  aipc__sconn *sconns, *zombies;
  aipc__export *closing; /* closed exports waiting for importers' releases */

  /* importer */
  aipc__hmap cconns;  /* {pid, nonce} -> aipc__cconn */
  aipc__hmap imports; /* {nonce, export id} -> aipc__import */
  uint32_t idle_cconns;
  aipc__win *idle_head, *idle_tail; /* idle windows, oldest first */
  uint32_t idle_wins;
} aipc__ipc_state;

extern aipc__ipc_state aipc__g;

#define AIPC_IDLE_CCONNS_MAX 32

/* g.lock held: fills in pid and nonce the first time. Returns 0 or -1. */
int aipc__ipc_identity(void);
/* Socket address of process pid's server with the given nonce. Returns its length. */
unsigned aipc__ipc_sockaddr(void *sun, uint32_t pid, uint64_t nonce);

/* ipc_server.c, g.lock held unless said otherwise */
aclError aipc__server_start(const char *call);
void aipc__server_stop_thread(void);    /* g.lock NOT held: stops and joins the thread */
void aipc__server_clear(void);          /* after stop_thread: closes, unpins and frees everything */
void aipc__server_child_reset(void);    /* forked child: forget, close fds, free */
aipc__export *aipc__export_lookup(const aipc__key *k); /* own key, secret checked; NULL else */
/* Processes what importers holding exp already sent (their RELEASEs, EOFs). */
void aipc__export_drain(aipc__export *exp);
void aipc__export_maybe_finish(aipc__export *exp);
/* A just-closed export with importers left: swept until they release. */
void aipc__export_closing(aipc__export *exp);
/* Formats up to a few importer pids of exp into buf. */
void aipc__export_importers(aipc__export *exp, char *buf, size_t cap);

/* ipc_client.c */
aclError aipc__client_import(const aipc__key *k, uint64_t flags, void **devPtr); /* g.lock NOT held */
/* g.lock held on entry; released on return. Drops one reference of imp. */
aclError aipc__client_close(aipc__import *imp);
aipc__import *aipc__import_lookup(const aipc__key *k); /* g.lock held */
void aipc__client_clear(void);       /* g.lock held: unmaps and frees every import and connection */
void aipc__client_child_reset(void); /* forked child */

#endif
