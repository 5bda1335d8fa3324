/*
 * Importer side, the calls of importer.h and the table of this process's
 * imports. An import asks the exporter over the connection to it
 * (importer_conn.c), maps exactly the granted range, closes the memfd at
 * once, and keeps one mapping per import (a list per key, oldest first, as
 * CANN's runtime does), so what it can reach is what it holds and only
 * while it holds it. A close unmaps the oldest mapping and gives its
 * reference back.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/hashmap.h"
#include "emu/emu.h"
#include "emu/ipc/identity.h"
#include "emu/ipc/importer.h"
#include "emu/ipc/importer_internal.h"
#include "emu/ipc/mapper.h"
#include "emu/ipc/supernode.h"
#include "os/os.h"


/* What one aclrtIpcMemImportByKey gave: a mapping of the granted range, and
 * the one reference the exporter counts for it. */
typedef struct aipc__mapping {
  void *ptr;          /* the granted range, what the caller got */
  void *map;          /* the mapping: the range widened to whole pages of its memfd */
  size_t map_len;
  aipc__block *block; /* its IMPORT block in memory.c's map */
  uint64_t conn_gen;  /* connection generation its reference lives on */
  uint32_t slot;      /* its ledger slot, or AIPC_NO_SLOT */
  struct aipc__mapping *next; /* the key's next younger mapping */
} aipc__mapping;

/* One key this process imported: its mappings, oldest first. */
typedef struct aipc__import {
  uint64_t nonce, export_id;
  uint32_t pid;
  uint8_t secret[AIPC_SECRET_LEN];
  size_t size;
  int32_t device;
  uint32_t attr;
  aipc__cconn *conn;
  aipc__mapping *oldest, *youngest;
} aipc__import;

/* The imports; g.lock, the importer lock, guards them and the connections'
 * fields marked so (importer_internal.h). */
static struct importer_state {
  pthread_mutex_t lock;
  aipc__hmap imports; /* {nonce, export id} -> aipc__import */
  size_t n_imports;   /* imports.len, also read without the lock (atomic) */
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static aipc__hkey ikey(uint64_t nonce, uint64_t id) { return (aipc__hkey){nonce, id}; }

/* g.lock held, after every change of g.imports. */
static void imports_counted(void) { __atomic_store_n(&g.n_imports, g.imports.len, __ATOMIC_RELEASE); }

/* g.lock held: the import k names, secret checked, or NULL. */
static aipc__import *import_lookup(const aipc__key *k) {
  aipc__import *imp = aipc__hmap_get(&g.imports, ikey(k->nonce, k->export_id));
  if (!imp || imp->pid != k->pid) return NULL;
  /* A forged key with a known id but the wrong secret must not find the record. */
  return aipc__secret_equal(imp->secret, k->secret) ? imp : NULL;
}

/* ---- import / close ------------------------------------------------------------ */

/* Records a granted import as a mapping of its own (the newest of its key).
 * Consumes gr->memfd. c->mu held, g.lock not held. */
static aclError import_register(const char *call, aipc__cconn *c, const aipc__key *k, const aipc__granted *gr, void **devPtr) {
  /* The granted range, widened to whole pages of its memfd: 4 KiB, or the
   * 2 MiB of an allocation in huge pages (whose memfd is that allocation
   * and nothing else, a multiple of its page). The memfd goes at once, so
   * nothing here can reach the allocation once this mapping is unmapped. */
  uint64_t map_off = gr->offset & ~(gr->page - 1);
  size_t map_len = (size_t)(((gr->offset + gr->size + gr->page - 1) & ~(gr->page - 1)) - map_off);
  void *map = aipc__mapper_map(gr->memfd, map_off, map_len, k->kind == AIPC_OBJECT_MEMORY);
  int map_errno = errno;
  close(gr->memfd);
  void *p = map ? (uint8_t *)map + (gr->offset - map_off) : NULL;
  aipc__mapping *m = p ? calloc(1, sizeof *m) : NULL;
  pthread_mutex_lock(&g.lock);
  aipc__import *imp = m ? import_lookup(k) : NULL;
  bool fresh = false;
  if (m && !imp && (imp = calloc(1, sizeof *imp)) != NULL) {
    fresh = true;
    if (aipc__hmap_put(&g.imports, ikey(k->nonce, k->export_id), imp) != 0) {
      free(imp);
      imp = NULL;
    }
  }
  aipc__block *b = NULL;
  if (imp) {
    b = aipc__mem_add_import(p, gr->size, gr->device, k->kind == AIPC_OBJECT_MEMORY ? AIPC_MEM_IMPORT : AIPC_MEM_SYNC_IMPORT, m);
  }
  if (!b) {
    if (imp && fresh) {
      aipc__hmap_remove(&g.imports, ikey(k->nonce, k->export_id));
      free(imp);
    }
    imports_counted();
    pthread_mutex_unlock(&g.lock);
    free(m);
    if (map) aipc__mapper_unmap(map, map_len);
    aipc__cconn_release(c, k->export_id, gr->slot, 1);
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: cannot map %" PRIu64 " bytes of process %u: %s", call,
                      gr->size, k->pid, p ? "out of memory for bookkeeping" : strerror(map_errno));
  }
  if (fresh) {
    imp->nonce = k->nonce;
    imp->export_id = k->export_id;
    imp->pid = k->pid;
    memcpy(imp->secret, k->secret, AIPC_SECRET_LEN);
    imp->size = gr->size;
    imp->device = gr->device;
    imp->attr = gr->attr;
    imp->conn = c;
  }
  m->ptr = p;
  m->map = map;
  m->map_len = map_len;
  m->block = b;
  m->conn_gen = gr->gen;
  m->slot = gr->slot;
  if (imp->youngest) imp->youngest->next = m; else imp->oldest = m;
  imp->youngest = m;
  c->imports++;
  imports_counted();
  *devPtr = p;
  pthread_mutex_unlock(&g.lock);
  return ACL_SUCCESS;
}

/* One import on the connection to k's exporter: the grant is mapped and
 * recorded (devPtr not NULL), or left in *gr with its memfd the caller's. */
static aclError import_via(const char *call, const aipc__key *k, uint64_t flags, void **devPtr, aipc__granted *gr) {
  /* A door of shareable handles has no place: its number is all a handle
   * carries. A key of this process's own place, the usual case, costs no
   * system call and no name. */
  bool remote = k->sdid != aipc__server_sdid();
  if (remote) {
    /* Another server's exporter: through the super-node directory, which
     * this process joins first (it is checked, and an explicit sdid
     * registered there, before anything is sent). */
    aclError rc = aipc__supernode_join(call);
    if (rc != ACL_SUCCESS) return rc;
  } else if (k->nonce != 0 && k->place != aipc__self_place()) {
    char who[64];
    aclError placed = aipc__place_check(call, aipc__cconn_name(k->pid, k->nonce, who), k->place);
    if (placed != ACL_SUCCESS) return placed;
  }
  pthread_mutex_lock(&g.lock);
  aipc__cconn *c = aipc__cconn_get(k->pid, k->nonce, remote, k->sdid);
  pthread_mutex_unlock(&g.lock);
  if (!c) return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);

  uint64_t deadline = aipc__os_now_ms() + (uint64_t)aipc__config_get()->timeout_ms;
  pthread_mutex_lock(&c->mu);
  aclError rc = aipc__cconn_import(call, c, k, flags, deadline, gr);
  if (rc == ACL_SUCCESS && devPtr) rc = import_register(call, c, k, gr, devPtr);
  pthread_mutex_unlock(&c->mu);

  pthread_mutex_lock(&g.lock);
  aipc__cconn_put(c);
  pthread_mutex_unlock(&g.lock);
  return rc;
}

aclError aipc__importer_import(const char *call, const aipc__key *k, uint64_t flags, void **devPtr) {
  aipc__granted gr;
  return import_via(call, k, flags, devPtr, &gr);
}

aclError aipc__importer_fetch(const char *call, const aipc__key *k, int *memfd, uint64_t *size, int32_t *device) {
  aipc__granted gr;
  aclError rc = import_via(call, k, 0, NULL, &gr);
  if (rc == ACL_SUCCESS) {
    *memfd = gr.memfd;
    *size = gr.size;
    *device = gr.device;
  }
  return rc;
}

aclError aipc__importer_close(const aipc__key *k, bool *found) {
  /* An exporter closing its own keys need not queue behind the importer's
   * lock: with nothing imported there is nothing to find. */
  if (__atomic_load_n(&g.n_imports, __ATOMIC_ACQUIRE) == 0) {
    *found = false;
    return ACL_ERROR_INVALID_PARAM;
  }
  pthread_mutex_lock(&g.lock);
  aipc__import *imp = import_lookup(k);
  *found = imp != NULL;
  if (!imp) {
    pthread_mutex_unlock(&g.lock);
    return ACL_ERROR_INVALID_PARAM;
  }
  /* CANN's rule: a close releases the key's oldest mapping. */
  aipc__mapping *m = imp->oldest;
  imp->oldest = m->next;
  if (!imp->oldest) imp->youngest = NULL;
  aipc__cconn *c = imp->conn;
  uint64_t export_id = imp->export_id;
  if (!imp->oldest) {
    aipc__hmap_remove(&g.imports, ikey(imp->nonce, imp->export_id));
    memset(imp->secret, 0, sizeof imp->secret);
    free(imp);
    imports_counted();
  }
  aipc__mem_remove_import(m->block);
  c->imports--;
  c->users++;
  pthread_mutex_unlock(&g.lock);

  /* From here an access to the range faults: the emulator's use-after-close check. */
  aipc__mapper_unmap(m->map, m->map_len);
  pthread_mutex_lock(&c->mu);
  /* One-way, and usually no syscall: the count lands in the ledger (or a
   * RELEASE in the socket queue) before we return, and an exporter's close
   * takes both in before it decides. */
  if (c->gen == m->conn_gen) aipc__cconn_release(c, export_id, m->slot, 1);
  pthread_mutex_unlock(&c->mu);

  pthread_mutex_lock(&g.lock);
  aipc__cconn_put(c);
  pthread_mutex_unlock(&g.lock);
  free(m);
  return ACL_SUCCESS;
}

/* ---- finalize, fork ------------------------------------------------------------- */

/* g.lock held. unmap: aclFinalize; else a forked child, which keeps its
 * parent's mappings, untracked (emu.h). */
static void free_all(bool unmap) {
  aipc__hkey k;
  void *v;
  for (size_t i = 0; aipc__hmap_next(&g.imports, &i, &k, &v);) {
    aipc__import *imp = v;
    for (aipc__mapping *m = imp->oldest, *next; m; m = next) {
      next = m->next;
      if (unmap) {
        aipc__mem_remove_import(m->block);
        aipc__mapper_unmap(m->map, m->map_len);
      }
      free(m);
    }
    memset(imp->secret, 0, sizeof imp->secret);
    free(imp);
  }
  aipc__hmap_clear(&g.imports);
  imports_counted();
  aipc__cconns_clear(unmap);
}

bool aipc__importer_get_attr(const aipc__key *k, uint64_t *attr) {
  pthread_mutex_lock(&g.lock);
  aipc__import *imp = import_lookup(k);
  if (imp) *attr = imp->attr;
  pthread_mutex_unlock(&g.lock);
  return imp != NULL;
}

void aipc__importer_finalize(void) {
  pthread_mutex_lock(&g.lock);
  free_all(true);
  aipc__mapper_finalize();
  pthread_mutex_unlock(&g.lock);
}

void aipc__importer_atfork_prepare(void) { pthread_mutex_lock(&g.lock); }

void aipc__importer_atfork_parent(void) { pthread_mutex_unlock(&g.lock); }

void aipc__importer_atfork_child(void) {
  g.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  free_all(false);
  aipc__mapper_atfork_child();
}
