/*
 * Exporter side, the calls of exporter.h: exporting a range of memory, an
 * event's or notify's state or a physical allocation, whitelisting
 * importers, attributes, an import of one's own key, and closing. What they
 * act on lives below (exporter_internal.h): the export table, the
 * connections, the server, which the first export starts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu/ipc/exporter_internal.h"
#include "emu/ipc/identity.h"
#include "emu/ipc/supernode.h"

/* The last id of an export of memory or of a state page (a shareable
 * handle's is drawn at random); the exporter lock guards it. */
static uint64_t next_export_id;

/* ---- exports ------------------------------------------------------------------- */

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
  if (e->self_refs && n + 16 < cap) snprintf(buf + n, cap - n, "%s%d", n ? ", " : "", (int)aipc__exporter_me->pid);
}

aclError aipc__exporter_export(const char *call, aipc__object_kind kind, void *devPtr, size_t size, uint64_t flags,
                               char key[AIPC_KEY_CHARS + 1]) {
  if (kind != AIPC_OBJECT_MEMORY) {
    /* The runtime's own call for an event's or notify's state page */
    aipc__block b;
    bool ok = aipc__mem_lookup(devPtr, &b) && b.kind == AIPC_MEM_SYNC && b.base == (uintptr_t)devPtr && size == b.size;
    if (!ok) return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: %p is not an event's or notify's state", call, devPtr);
  }
  aipc__exporter_lock();
  aclError rc = ACL_SUCCESS;
  aipc__export *e = NULL;
  /* Checked and pinned under memory's lock; the server starts outside it. */
  aipc__mem_pinned pin = {0};
  if ((rc = aipc__mem_export_pin(call, devPtr, size, kind == AIPC_OBJECT_MEMORY ? AIPC_MEM_DEVICE : AIPC_MEM_SYNC,
                                 &pin)) != ACL_SUCCESS) {
    /* message recorded */
  } else if ((rc = aipc__exporter_start(call)) != ACL_SUCCESS) {
    /* message recorded */
  } else if (!(e = calloc(1, sizeof *e))) {
    rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
  } else if (aipc__random(e->secret, AIPC_SECRET_LEN) != 0) {
    rc = aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: getrandom failed: %s", call, strerror(errno));
  } else {
    e->id = ++next_export_id;
    e->fd = -1;
    e->kind = kind;
    e->ptr = devPtr;
    e->size = size;
    e->device = pin.device;
    e->offset = pin.offset;
    e->block = pin.block;
    e->flags = flags;
    e->attr = ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_SIO;
    if (aipc__export_put(e) != 0) rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
  }
  if (rc == ACL_SUCCESS) {
    aipc__key_write(kind, aipc__exporter_me->pid, aipc__server_sdid(), aipc__exporter_me->nonce, aipc__exporter_me->place, e->id, e->secret, key);
  } else {
    if (pin.block) aipc__mem_unpin(pin.block);
    free(e);
  }
  aipc__exporter_unlock();
  return rc;
}

/* Lock held. Fills e (calloc'd, e->fd -1) as the physical export id of the
 * allocation behind fd and puts it in the table; on failure the caller
 * frees e. */
static aclError physical_put(const char *call, aipc__export *e, uint64_t id, int fd, uint64_t size, int32_t device,
                             uint64_t flags) {
  if ((e->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
    return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: cannot keep the allocation's descriptor: %s", call,
                      strerror(errno));
  e->id = id;
  e->kind = AIPC_OBJECT_PHYSICAL;
  e->size = size;
  e->device = device;
  e->flags = flags;
  e->attr = ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_SIO;
  if (aipc__export_put(e) != 0) return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
  return ACL_SUCCESS;
}

aclError aipc__exporter_export_physical(const char *call, int fd, uint64_t size, int32_t device, uint64_t flags,
                                        uint64_t *handle) {
  aipc__exporter_lock();
  aclError rc = aipc__exporter_start(call);
  aipc__export *e = NULL;
  if (rc != ACL_SUCCESS) goto out;
  if ((rc = aipc__exporter_door_open(call)) != ACL_SUCCESS) goto out;
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
    uint64_t cand = (uint64_t)aipc__exporter_door() << AIPC_SHAREABLE_DOOR_SHIFT | r;
    if (r != 0 && !aipc__export_get(cand)) id = cand;
  }
  if (id == 0) {
    rc = aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: getrandom failed: %s", call, strerror(errno));
    goto out;
  }
  if ((rc = physical_put(call, e, id, fd, size, device, flags)) != ACL_SUCCESS) goto out;
  *handle = id;
  e = NULL;
out:
  if (e) aipc__export_free(e);
  aipc__exporter_unlock();
  return rc;
}

aclError aipc__exporter_export_fabric(const char *call, int fd, uint64_t size, int32_t device, uint64_t flags,
                                      aipc__key *out) {
  aclError rc = aipc__supernode_join(call); /* a fabric handle is for other servers: the directory first */
  if (rc != ACL_SUCCESS) return rc;
  aipc__exporter_lock();
  aipc__export *e = NULL;
  if ((rc = aipc__exporter_start(call)) != ACL_SUCCESS) goto out;
  if ((rc = aipc__exporter_supernode_open(call)) != ACL_SUCCESS) goto out;
  if (!(e = calloc(1, sizeof *e))) {
    rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
    goto out;
  }
  e->fd = -1;
  if (aipc__random(e->secret, AIPC_SECRET_LEN) != 0) {
    rc = aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: getrandom failed: %s", call, strerror(errno));
    goto out;
  }
  /* never near a door handle's id: counters stay far below 2^32 */
  if ((rc = physical_put(call, e, ++next_export_id, fd, size, device, flags)) != ACL_SUCCESS) goto out;
  *out = (aipc__key){.kind = AIPC_OBJECT_PHYSICAL, .pid = aipc__exporter_me->pid, .sdid = aipc__server_sdid(),
                     .nonce = aipc__exporter_me->nonce, .place = aipc__exporter_me->place, .export_id = e->id};
  memcpy(out->secret, e->secret, AIPC_SECRET_LEN);
  e = NULL;
out:
  if (e) aipc__export_free(e);
  aipc__exporter_unlock();
  return rc;
}

/* ---- whitelists, attributes -------------------------------------------------------- */

bool aipc__exporter_owns(const aipc__key *k) {
  /* A shareable handle names its exporter by door (nonce 0). */
  if (k->kind == AIPC_OBJECT_PHYSICAL && k->nonce == 0)
    return k->pid != 0 && k->pid == aipc__exporter_door();
  /* The place too: a key has one spelling, and that is the one issued here. */
  return aipc__self_is(k->pid, k->nonce) && k->place == __atomic_load_n(&aipc__exporter_me->place, __ATOMIC_RELAXED);
}

/* The lock held: the live export of this process that k names, or a recorded error. */
static aclError own_export(const char *call, const aipc__key *k, aipc__export **out) {
  if (!aipc__exporter_owns(k) && k->nonce == 0)
    return aipc__fail(ACL_ERROR_RT_NO_PERMISSION,
                      "%s: only the exporting process may do this, and this process (%d) did not export the handle",
                      call, (int)getpid());
  if (!aipc__exporter_owns(k))
    return aipc__fail(ACL_ERROR_RT_NO_PERMISSION,
                      "%s: only the exporting process (%u) may do this; this is process %d", call, k->pid,
                      (int)getpid());
  aipc__export *e = aipc__export_lookup(k->export_id, k->secret);
  if (e && e->kind != k->kind) e = NULL; /* an id of another kind's export: no such key */
  if (!e || e->closed)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: key is not a live export of this process (%s)", call,
                      e ? "it was closed" : "closed, never issued, or forged");
  *out = e;
  return ACL_SUCCESS;
}

/* The whitelist values of pids (aipc__whitelist_value), in a new array, or a recorded error. */
static aclError whitelist_values(const char *call, const aipc__key *k, const int32_t *pids, size_t num,
                                 void ***out) {
  *out = NULL;
  if (!aipc__exporter_owns(k)) { /* the cheap refusal before any /proc read */
    aipc__exporter_lock();
    aipc__export *e;
    aclError rc = own_export(call, k, &e);
    aipc__exporter_unlock();
    return rc;
  }
  void **v = malloc((num ? num : 1) * sizeof *v);
  if (!v) return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
  for (size_t i = 0; i < num; i++) {
    aclError rc = aipc__whitelist_value(call, pids[i], &v[i]);
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
  aipc__exporter_lock();
  aipc__export *e = NULL;
  rc = own_export(call, k, &e);
  for (size_t i = 0; rc == ACL_SUCCESS && i < num; i++)
    if (aipc__whitelist_add(e, pids[i], values[i]) != 0)
      rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
  aipc__exporter_unlock();
  free(values);
  return rc;
}

aclError aipc__exporter_allow_servers(const char *call, const aipc__key *k, const aclrtServerPid *servers,
                                      size_t num, uint32_t here) {
  /* Every pid bound to its process first: the servers of a super-node
   * share the PID namespace, so a pid of another server is read here too. */
  size_t n = 0;
  bool remote = false;
  for (size_t i = 0; i < num; i++) {
    n += servers[i].num;
    remote |= servers[i].sdid != here;
  }
  int32_t *pids = calloc(n ? n : 1, sizeof *pids);
  if (!pids) return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
  n = 0;
  for (size_t i = 0; i < num; i++)
    for (size_t j = 0; j < servers[i].num; j++) pids[n++] = servers[i].pid[j];
  void **values;
  aclError rc = whitelist_values(call, k, pids, n, &values);
  free(pids);
  if (rc != ACL_SUCCESS) return rc;
  /* Importers of other servers come through the super-node directory. */
  if (remote && (rc = aipc__supernode_join(call)) != ACL_SUCCESS) {
    free(values);
    return rc;
  }
  aipc__exporter_lock();
  aipc__export *e = NULL;
  rc = own_export(call, k, &e);
  if (rc == ACL_SUCCESS && remote) rc = aipc__exporter_supernode_open(call);
  size_t next = 0;
  for (size_t i = 0; rc == ACL_SUCCESS && i < num; i++) {
    const aclrtServerPid *sp = &servers[i];
    for (size_t j = 0; rc == ACL_SUCCESS && j < sp->num; j++) {
      void *v = values[next++];
      int bad = sp->sdid == here ? aipc__whitelist_add(e, sp->pid[j], v) : aipc__remote_add(e, sp->sdid, sp->pid[j], v);
      if (bad) rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of memory", call);
    }
  }
  aipc__exporter_unlock();
  free(values);
  return rc;
}

aclError aipc__exporter_set_attr(const char *call, const aipc__key *k, uint32_t attr) {
  aipc__exporter_lock();
  aipc__export *e = NULL;
  aclError rc = own_export(call, k, &e);
  if (rc == ACL_SUCCESS && e->imported)
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM,
                    "%s: the key was already imported; attributes must be set before the first import", call);
  if (rc == ACL_SUCCESS) e->attr = attr;
  aipc__exporter_unlock();
  return rc;
}

bool aipc__exporter_get_attr(const aipc__key *k, uint64_t *attr) {
  if (!aipc__exporter_owns(k)) return false;
  aipc__exporter_lock();
  aipc__export *e = aipc__export_lookup(k->export_id, k->secret);
  if (e) *attr = e->attr;
  aipc__exporter_unlock();
  return e != NULL;
}

/* ---- an import of one's own key, close ------------------------------------------------ */

aclError aipc__exporter_import_own(const char *call, const aipc__key *k, void **devPtr) {
  aclError rc = ACL_SUCCESS;
  aipc__exporter_lock();
  aipc__export *e = aipc__export_lookup(k->export_id, k->secret);
  if (!e)
    rc = aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: key not exported by process %d (closed, never issued, or forged)",
                    call, (int)aipc__exporter_me->pid);
  else if (e->closed)
    rc = aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: key was closed by its exporter (process %d): no new imports", call,
                    (int)aipc__exporter_me->pid);
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
  aipc__exporter_unlock();
  return rc;
}

aclError aipc__exporter_close(const char *call, const aipc__key *k, bool lenient, bool *found) {
  *found = false;
  if (!aipc__exporter_owns(k)) return ACL_ERROR_INVALID_PARAM;
  aclError rc = ACL_SUCCESS;
  aipc__exporter_lock();
  aipc__export *e = aipc__export_lookup(k->export_id, k->secret);
  if (!e || e->kind != k->kind) {
    rc = ACL_ERROR_INVALID_PARAM;
    goto out;
  }
  *found = true;
  if (e->self_refs) {
    e->self_refs--;
    e->refs_total--;
    aipc__export_maybe_finish(e);
    goto out;
  }
  if (e->closed) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM,
                    "%s: key was already closed by this process (%llu importer reference(s) still hold the memory)",
                    call, (unsigned long long)e->refs_total);
    goto out;
  }
  /* What importers already sent (RELEASE, EOF) counts before deciding. */
  aipc__export_drain(e);
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
  if (aipc__export_closing(e)) aipc__exporter_wake(); /* the server starts sweeping */
  aipc__export_maybe_finish(e);
out:
  aipc__exporter_unlock();
  return rc;
}
