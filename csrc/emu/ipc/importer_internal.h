/*
 * The seam between the two files of the importer side (importer.h is what
 * the rest of the runtime calls):
 *
 *   importer.c        the calls of importer.h: the import table, each import's mappings
 *     importer_conn.c   the connections to exporters: connect, credentials, requests and replies
 *
 * importer.c calls importer_conn.c, never the other way. Each owns its
 * state (static). Locks: the importer lock (importer.c's) guards the
 * import table, the table of connections and each connection's fields
 * marked so below; a connection's mu guards the rest of it, and is never
 * held across a wait on the exporter. Lock order: a connection's mu ->
 * the importer lock -> the memory lock (aipc__mem_*lock); nothing takes a
 * connection's mu with the importer lock held.
 */
#ifndef ASCEND_IPC_EMU_IPC_IMPORTER_INTERNAL_H_
#define ASCEND_IPC_EMU_IPC_IMPORTER_INTERNAL_H_

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "acl/acl.h"
#include "emu/ipc/key.h"
#include "emu/ipc/spin.h"

typedef struct aipc__csock aipc__csock; /* a connected socket (importer_conn.c) */
typedef struct aipc__creq aipc__creq;   /* a request waiting for its reply (importer_conn.c) */

/*
 * A connection to one exporter (importer_conn.c's). Requests from any
 * number of threads share it: each sends its own and waits with its own
 * deadline; one of them at a time receives (reading) and hands each reply
 * to its owner.
 */
typedef struct aipc__cconn {
  pthread_mutex_t mu; /* guards the fields up to users; never held across a wait on the exporter */
  pthread_cond_t cv;  /* a reply was handed out, the reader left, or the connection went */
  uint32_t pid;
  uint64_t nonce;
  bool remote;   /* the exporter is on another server: reached through the super-node directory */
  uint32_t sdid; /* its server (remote) */
  aipc__csock *sock; /* NULL when not connected */
  uint64_t gen;      /* bumped at every (re)connect and drop */
  uint64_t next_req;
  bool reading;         /* a thread is receiving for everyone */
  aipc__spin spin;      /* how long the reader polls before it blocks */
  aipc__creq *pending;  /* requests sent and waiting for their reply */
  uint32_t *ledger;     /* the exporter's release ledger for this connection, or NULL */
  bool ledger_got;      /* the exporter sent it (once per connection; a second is a lie) */
  uint64_t *abandoned; /* ids of cancelled requests whose reply has not come yet */
  size_t n_abandoned, cap_abandoned;
  /* the importer lock: */
  uint32_t users;   /* threads working on it */
  uint32_t imports; /* live mappings on it */
  uint64_t last_used;
} aipc__cconn;

/* What an exporter granted an import. */
typedef struct aipc__granted {
  int32_t device;
  uint32_t attr;
  uint32_t slot;
  uint64_t offset, size;
  uint64_t gen;
  uint64_t page; /* the memfd's page size: a mapping of it spans whole pages */
  int memfd;
} aipc__granted;

/* The importer lock held: the connection to (pid, nonce) with a user
 * reference (made, unconnected, if there was none), or NULL. remote, sdid:
 * where a new one connects (an exporter is of one server, so a connection's
 * never changes). */
aipc__cconn *aipc__cconn_get(uint32_t pid, uint64_t nonce, bool remote, uint32_t sdid);
/* The importer lock held. Gives back a user reference. */
void aipc__cconn_put(aipc__cconn *c);
/* The importer lock held: frees every connection (unmap: aclFinalize), or
 * forgets them (a forked child). */
void aipc__cconns_clear(bool unmap);

/* How messages name an exporter: its pid, or for a shareable handle's door
 * (nonce 0) the door's number. */
const char *aipc__cconn_name(uint32_t pid, uint64_t nonce, char buf[64]);
/* The wire part of an import (connecting first if need be). c->mu held on
 * entry and on return. On success the exporter counts one more reference
 * of this process and out->memfd is the allocation's memfd (the caller's
 * to close). */
aclError aipc__cconn_import(const char *call, aipc__cconn *c, const aipc__key *k, uint64_t flags, uint64_t deadline,
                            aipc__granted *out);
/* Gives back n references of export id held on the current connection:
 * through the ledger slot (no syscall) or a RELEASE message. c->mu held
 * (released while a RELEASE is sent). */
void aipc__cconn_release(aipc__cconn *c, uint64_t id, uint32_t slot, uint32_t n);

#endif
