/*
 * The seams between the files of the exporter side (exporter.h is what the
 * rest of the runtime calls). One idea a file, each calling only the files
 * below it:
 *
 *   exporter.c          the calls of exporter.h: exports, whitelists, attributes, closes
 *     exporter_server.c   the listening sockets, accept, the server thread; start, stop, finalize, fork
 *       exporter_request.c  serving one message: an IMPORT into a grant or a refusal, CANCEL, RELEASE
 *         exporter_conns.c    the importers' connections and the poller they are watched on
 *           exporter_table.c    the exporter lock and name; exports, references, ledgers, grants, whitelists
 *
 * Each file owns the state it declares (static) and is the only one to
 * write it; the others reach it through the functions below. One lock
 * guards all of it, the exporter lock (exporter_table.c): every function
 * here is called with it held unless it says otherwise, and none waits on
 * a peer. Lock order: exporter lock -> memory lock (aipc__mem_*lock).
 */
#ifndef ASCEND_IPC_EMU_IPC_EXPORTER_INTERNAL_H_
#define ASCEND_IPC_EMU_IPC_EXPORTER_INTERNAL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "acl/acl.h"
#include "core/hashmap.h"
#include "emu/emu.h"
#include "emu/ipc/exporter.h"
#include "emu/ipc/key.h"
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

/* An aclrtIpcMemImportPidInterServer entry of another server: its pid is
 * bound to its process by start time like a local one (the servers of a
 * super-node share the PID namespace). */
typedef struct aipc__rpeer {
  uint32_t sdid;
  int32_t pid;
  void *bound; /* as a whitelist value */
} aipc__rpeer;

/* An export (exporter_table.c's). */
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
  bool closing;         /* closed with importers left: on the closing list */
  aipc__export *cprev, *cnext;
};

/* An importer's connection (exporter_conns.c's; its ledger, references and
 * grants are kept by exporter_table.c). */
struct aipc__sconn {
  int fd;
  uint64_t serial; /* never reused; keys the refs map */
  pid_t pid;       /* SO_PEERCRED at accept: who opened it (counted in aipc__sconns_of) */
  uid_t uid;
  bool dead;       /* closed; freed by the server thread at the end of its batch */
  /* The process that opened it, the only one it serves: a pidfd of it
   * (aipc__os_peer_pidfd; -1 where the kernel has none), and its start time,
   * read at its first IMPORT. A request is that process's while the pidfd's
   * process lives and the sender has its pid: a recycled pid is another
   * process, and can only send here after the opener ended. */
  int pidfd;
  bool start_known;
  uint64_t start;
  /* Came through the super-node socket (another server, maybe): its server
   * is read from the kernel (the opener's network namespace) at its first
   * IMPORT, never taken from what it says. */
  bool remote;
  bool peer_known;
  bool peer_same; /* the opener is in this process's network namespace */
  uint32_t peer_sdid;
  uint32_t guesses_failed; /* guessable lookups refused in a row (exporter_request.c) */
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
  aipc__sconn *prev, *next; /* in the live list or the zombies */
};

#define AIPC_SWEEP_MS 20 /* how often closed exports with importers look at the ledgers */
/* Unsettled grants remembered per connection. A well-behaved importer has
 * at most one per thread waiting on the connection; past this the oldest
 * is forgotten, and a CANCEL of it can no longer be honoured. */
#define AIPC_GRANTS_MAX 4096

static inline aipc__hkey aipc__pkey(pid_t pid) { return (aipc__hkey){(uint64_t)(uint32_t)pid, 0}; }

/* ---- exporter_table.c: the lock, the name, the books ----------------------- */

/* The exporter lock. Not recursive; reset only in a forked child. */
void aipc__exporter_lock(void);
void aipc__exporter_unlock(void);
void aipc__exporter_lock_reset(void);

/* This process's name as an exporter, once its server started (0 before, and
 * in a forked child until it exports again). place is also read without the
 * lock. */
typedef struct aipc__exporter_name {
  uint32_t pid;
  uint64_t nonce;
  uint32_t place; /* where its socket is: keys carry it */
  uid_t euid;
} aipc__exporter_name;
extern const aipc__exporter_name *const aipc__exporter_me;
/* Takes a name never taken before (the server is starting, or its first
 * name was in use): 0, or -1 with errno. */
int aipc__exporter_take_name(void);
/* A forked child: the parent's name is not its own. */
void aipc__exporter_forget_name(void);

/* The export of this process with this id and secret, or NULL. */
aipc__export *aipc__export_lookup(uint64_t id, const uint8_t *secret);
/* The export with this id (secret unchecked), or NULL. */
aipc__export *aipc__export_get(uint64_t id);
/* Files e under its id: 0, or -1 out of memory. */
int aipc__export_put(aipc__export *e);
void aipc__export_free(aipc__export *e);
/* Ends e (unpinning its block) once it is closed and nothing holds it. */
void aipc__export_maybe_finish(aipc__export *e);
/* A just-closed export with importers left, put on the closing list. True
 * when it is the first there: the server must be woken to sweep. */
bool aipc__export_closing(aipc__export *e);
/* The closing list (also read without the lock, as a hint). */
aipc__export *aipc__exporter_closing(void);

aipc__ref *aipc__ref_get(uint64_t export_id, uint64_t serial);
int aipc__ref_put(uint64_t export_id, uint64_t serial, aipc__ref *r);
void aipc__ref_free(aipc__ref *r);
/* Drops n of r's references (r may go, and its export end). */
void aipc__ref_release(aipc__ref *r, uint32_t n);

/* Creates c's ledger; returns its fd (to send once), or -1 (then c has none). */
int aipc__ledger_create(aipc__sconn *c);
uint32_t aipc__ledger_slot_alloc(aipc__sconn *c);

/* Forgets the grants of requests the importer says are settled. */
void aipc__grants_settle(aipc__sconn *c, uint64_t settled);
void aipc__grants_add(aipc__sconn *c, uint64_t req, uint64_t export_id);

typedef enum { AIPC_WL_YES, AIPC_WL_NOT_LISTED, AIPC_WL_NEVER_RAN, AIPC_WL_GONE } aipc__wl_verdict;
/* Whether process pid, which started at start, may import e. */
aipc__wl_verdict aipc__whitelisted(const aipc__export *e, pid_t pid, uint64_t start);
/* The whitelist entry for pid, or a recorded error. Reads /proc: called
 * without the lock. */
aclError aipc__whitelist_value(const char *call, int32_t pid, void **value);
int aipc__whitelist_add(aipc__export *e, int32_t pid, void *value);
/* Whitelists process pid of server sdid, another server (value as from
 * aipc__whitelist_value). 0 or -1. */
int aipc__remote_add(aipc__export *e, uint32_t sdid, int32_t pid, void *value);
/* Whether process pid of another server sdid, which started at start, may
 * import e: its inter-server whitelist, and for physical memory the pids
 * given to aclrtMemSetPidToShareableHandle (pids of the super-node). */
aipc__wl_verdict aipc__whitelisted_remote(const aipc__export *e, uint32_t sdid, pid_t pid, uint64_t start);

/* Frees every export (unpin: their blocks too, else memory.c forgot them)
 * and reference. After the connections are gone. */
void aipc__exporter_table_clear(bool unpin);
/* Fills exports, references and closing. */
void aipc__exporter_table_count(aipc__exporter_counts *out);
/* The exports' and references' rules (aipc__exporter_audit): NULL, or the first broken. */
const char *aipc__exporter_table_audit(void);

/* ---- exporter_conns.c: connections, the poller ------------------------------ */

/* The poller the server thread waits on; every connection is added to it
 * (by the server), and removed when it dies. -1 while the server is down. */
int aipc__exporter_poller(void);
/* Creates it: 0, or -1 with errno. */
int aipc__exporter_poller_open(void);
void aipc__exporter_poller_close(void);

/* Live connections process pid opened. */
size_t aipc__sconns_of(pid_t pid);
/* A connection record for fd from (pid, uid), first in the live list, owning
 * pidfd (a pidfd of that process, or -1). NULL when out of memory (the
 * descriptors are then still the caller's). */
aipc__sconn *aipc__sconn_add(int fd, pid_t pid, uid_t uid, int pidfd);
typedef enum { AIPC_SENDER_OPENER, AIPC_SENDER_OTHER, AIPC_SENDER_GONE } aipc__sender_verdict;
/* Whether process pid, the sender of a request on c by the kernel's word, is
 * the process that opened c (then *start is its start time): another pid is
 * OTHER; the opener's pid in another process (the opener ended, the pid was
 * given again) is GONE. Reads /proc once per connection. */
aipc__sender_verdict aipc__sconn_sender(aipc__sconn *c, pid_t pid, uint64_t *start);
/* Closes c and drops every reference it held; c stays allocated until reaped. */
void aipc__sconn_kill(aipc__sconn *c);
/* The live connection with this serial, or NULL. */
aipc__sconn *aipc__sconn_find(uint64_t serial);
/* Takes the ledger counts of export id's reference from c, if any. Returns false if c died. */
bool aipc__sconn_consume(uint64_t id, aipc__sconn *c);
/* Frees the records of closed connections. */
void aipc__sconns_reap(void);
/* Closed exports still held by importers take their ledger releases (at most every AIPC_SWEEP_MS). */
void aipc__sconns_sweep(void);
/* Closes every connection and frees its record (the server is stopped). */
void aipc__sconns_clear(void);
/* A forked child: frees the parent's records and closes its descriptors. */
void aipc__sconns_child_reset(void);

/* ---- exporter_request.c: serving ---------------------------------------------- */

/* Serves up to max messages queued on c. */
void aipc__sconn_service(aipc__sconn *c, int max);
/* Processes what importers holding e already sent (their RELEASEs, EOFs). */
void aipc__export_drain(aipc__export *e);

/* ---- exporter_server.c: the server ---------------------------------------------- */

/* Starts the server thread once (the lock held). */
aclError aipc__exporter_start(const char *call);
/* Opens the shareable-handle socket once (the server running). */
aclError aipc__exporter_door_open(const char *call);
/* Binds this exporter's socket in the super-node directory once (the
 * server running): importers of other servers connect there. */
aclError aipc__exporter_supernode_open(const char *call);
/* Its number (the top half of every shareable handle), 0 before; no lock needed. */
uint32_t aipc__exporter_door(void);
/* Wakes the server thread, if it runs (the closing list got its first export). */
void aipc__exporter_wake(void);

#endif
