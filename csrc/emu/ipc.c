/*
 * The IPC entry points of the emulator (aclrtIpcMem*), fork handling and
 * finalization. The exporter side lives in ipc_server.c, the importer side
 * in ipc_client.c, keys in ipc_key.c, the wire format in ipc_proto.c.
 * Design: docs/design-ipc.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "emu/ipc_internal.h"

#define g aipc__g

aipc__ipc_state aipc__g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .listen_fd = -1,
    .epoll_fd = -1,
    .wake_fd = -1,
};

int aipc__ipc_identity(void) {
  if (!g.pid) g.pid = getpid();
  while (!g.nonce)
    if (aipc__random(&g.nonce, sizeof g.nonce) != 0) return -1;
  return 0;
}

unsigned aipc__ipc_sockaddr(void *out, uint32_t pid, uint64_t nonce) {
  struct sockaddr_un *sa = out;
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  /* Abstract namespace: no file to clean up, gone with the last descriptor. */
  int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "ascend_ipc.%u.%016llx", pid,
                   (unsigned long long)nonce);
  return (unsigned)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* g.lock held: the key names an export of this very process. */
static bool own_key(const aipc__key *k) {
  return g.nonce != 0 && k->nonce == g.nonce && k->pid == (uint32_t)g.pid;
}

/* ---- export ---------------------------------------------------------------------- */

static const char *kind_name(aipc__mem_kind kind) {
  switch (kind) {
    case AIPC_MEM_HOST: return "host memory from aclrtMallocHost";
    case AIPC_MEM_IMPORT: return "imported IPC memory (only the owner of memory can export it)";
    default: return "device memory";
  }
}

aclError aipc__emu_ipc_get_export_key(void *devPtr, size_t size, char *key, size_t len, uint64_t flags) {
#define C "aclrtIpcMemGetExportKey"
  if (!devPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": devPtr is NULL");
  if (!key) return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": key is NULL");
  if (len < ACL_IPC_MEM_KEY_LEN)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": len is %zu; the key buffer needs at least %d bytes", len,
                      ACL_IPC_MEM_KEY_LEN);
  if (flags > ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION)
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      C ": unknown flags 0x%llx (ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT or _DISABLE_PID_VALIDATION)",
                      (unsigned long long)flags);
  if (size == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": size is 0");
  if (!AIPC_IS_PAGE_ALIGNED(devPtr))
    return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": devPtr %p is not aligned to the 4096-byte page", devPtr);
  if (!AIPC_IS_PAGE_ALIGNED(size))
    return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": size %zu is not a multiple of the 4096-byte page", size);

  pthread_mutex_lock(&g.lock);
  aclError rc = ACL_SUCCESS;
  aipc__export *e = NULL;
  aipc__mem_wrlock();
  aipc__block *b = aipc__mem_find(devPtr);
  if (!b) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, C ": devPtr %p is not inside a live aclrtMalloc allocation of this process",
                    devPtr);
  } else if (b->kind != AIPC_MEM_DEVICE) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, C ": devPtr %p is %s, not device memory from aclrtMalloc", devPtr,
                    kind_name(b->kind));
  } else if (b->user_freed) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, C ": devPtr %p belongs to an allocation already freed with aclrtFree",
                    devPtr);
  } else if (size > b->size - ((uintptr_t)devPtr - b->base)) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM,
                    C ": [devPtr, devPtr + %zu) overruns its allocation (%zu bytes at %p, devPtr %p)", size, b->size,
                    (void *)b->base, devPtr);
  } else if ((rc = aipc__server_start(C)) != ACL_SUCCESS) {
    /* message recorded */
  } else if (!(e = calloc(1, sizeof *e))) {
    rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, C ": out of memory");
  } else if (aipc__random(e->secret, AIPC_SECRET_LEN) != 0) {
    rc = aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, C ": getrandom failed: %s", strerror(errno));
  } else {
    e->id = ++g.next_export_id;
    e->ptr = devPtr;
    e->size = size;
    e->device = b->device;
    e->offset = b->arena_offset + ((uintptr_t)devPtr - b->base);
    e->block = b;
    e->flags = flags;
    e->attr = ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_SIO;
    if (aipc__hmap_put(&g.exports, (aipc__hkey){e->id, 0}, e) != 0)
      rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, C ": out of memory");
    else
      aipc__mem_pin(b);
  }
  aipc__mem_unlock();
  char text[AIPC_KEY_CHARS + 1];
  if (rc == ACL_SUCCESS) {
    aipc__key k;
    k.pid = (uint32_t)g.pid;
    k.sdid = aipc__config_get()->sdid;
    k.nonce = g.nonce;
    k.export_id = e->id;
    memcpy(k.secret, e->secret, AIPC_SECRET_LEN);
    aipc__key_format(&k, text);
    memset(k.secret, 0, sizeof k.secret);
  } else {
    free(e);
  }
  pthread_mutex_unlock(&g.lock);
  if (rc == ACL_SUCCESS) memcpy(key, text, sizeof text);
  return rc;
#undef C
}

/* g.lock held: the live export of this process that k names, or a recorded error. */
static aclError own_export(const char *call, const aipc__key *k, aipc__export **out) {
  if (!own_key(k))
    return aipc__fail(ACL_ERROR_RT_NO_PERMISSION,
                      "%s: only the exporting process (%u) may do this; this is process %d", call, k->pid,
                      (int)getpid());
  aipc__export *e = aipc__export_lookup(k);
  if (!e || e->closed)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: key is not a live export of this process (%s)", call,
                      e ? "it was closed" : "closed, never issued, or forged");
  *out = e;
  return ACL_SUCCESS;
}

static int whitelist_add(aipc__export *e, int32_t pid) {
  return aipc__hmap_put(&e->whitelist, (aipc__hkey){(uint64_t)(uint32_t)pid, 0}, (void *)1);
}

aclError aipc__emu_ipc_set_import_pid(const char *key, int32_t *pid, size_t num) {
#define C "aclrtIpcMemSetImportPid"
  aipc__key k;
  aclError rc = aipc__key_parse(C, key, &k);
  if (rc != ACL_SUCCESS) return rc;
  if (!pid) return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": pid is NULL");
  if (num == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": num is 0");
  for (size_t i = 0; i < num; i++)
    if (pid[i] <= 0)
      return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": pid[%zu] = %d is not a process id", i, (int)pid[i]);
  pthread_mutex_lock(&g.lock);
  aipc__export *e;
  rc = own_export(C, &k, &e);
  for (size_t i = 0; rc == ACL_SUCCESS && i < num; i++)
    if (whitelist_add(e, pid[i]) != 0) rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, C ": out of memory");
  pthread_mutex_unlock(&g.lock);
  return rc;
#undef C
}

aclError aipc__emu_ipc_import_pid_inter_server(const char *key, aclrtServerPid *serverPids, size_t num) {
#define C "aclrtIpcMemImportPidInterServer"
  aipc__key k;
  aclError rc = aipc__key_parse(C, key, &k);
  if (rc != ACL_SUCCESS) return rc;
  if (!serverPids) return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": serverPids is NULL");
  if (num == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": num is 0");
  for (size_t i = 0; i < num; i++) {
    if (!serverPids[i].pid) return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": serverPids[%zu].pid is NULL", i);
    if (serverPids[i].num == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": serverPids[%zu].num is 0", i);
    for (size_t j = 0; j < serverPids[i].num; j++)
      if (serverPids[i].pid[j] <= 0)
        return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": serverPids[%zu].pid[%zu] = %d is not a process id", i, j,
                          (int)serverPids[i].pid[j]);
  }
  uint32_t here = aipc__config_get()->sdid;
  pthread_mutex_lock(&g.lock);
  aipc__export *e;
  rc = own_export(C, &k, &e);
  for (size_t i = 0; rc == ACL_SUCCESS && i < num; i++) {
    const aclrtServerPid *s = &serverPids[i];
    for (size_t j = 0; rc == ACL_SUCCESS && j < s->num; j++) {
      if (s->sdid == here) {
        if (whitelist_add(e, s->pid[j]) != 0) rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, C ": out of memory");
        continue;
      }
      /* Another server: recorded (an importer there would need the fabric). */
      if (e->n_remote == e->cap_remote) {
        size_t cap = e->cap_remote ? e->cap_remote * 2 : 8;
        aipc__rpeer *v = realloc(e->remote, cap * sizeof *v);
        if (!v) {
          rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, C ": out of memory");
          break;
        }
        e->remote = v;
        e->cap_remote = cap;
      }
      e->remote[e->n_remote++] = (aipc__rpeer){s->sdid, s->pid[j]};
    }
  }
  pthread_mutex_unlock(&g.lock);
  return rc;
#undef C
}

aclError aipc__emu_ipc_set_attr(const char *key, aclrtIpcMemAttrType type, uint64_t attr) {
#define C "aclrtIpcMemSetAttr"
  aipc__key k;
  aclError rc = aipc__key_parse(C, key, &k);
  if (rc != ACL_SUCCESS) return rc;
  if (type != ACL_RT_IPC_MEM_ATTR_ACCESS_LINK)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": unknown attribute type %d (ACL_RT_IPC_MEM_ATTR_ACCESS_LINK)",
                      (int)type);
  if (attr == ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_UB_ONE_PORT_PATH ||
      attr == ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_UB_MULTI_PORT_PATH)
    return aipc__fail(ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED,
                      C ": access link %llu (UB) is not supported by the emulated device; use SIO (0) or HCCS (1)",
                      (unsigned long long)attr);
  if (attr > ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_HCCS)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": unknown access link %llu (SIO 0, HCCS 1, UB 2 or 3)",
                      (unsigned long long)attr);
  pthread_mutex_lock(&g.lock);
  aipc__export *e;
  rc = own_export(C, &k, &e);
  if (rc == ACL_SUCCESS && e->imported)
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM,
                    C ": the key was already imported; attributes must be set before the first import");
  if (rc == ACL_SUCCESS) e->attr = (uint32_t)attr;
  pthread_mutex_unlock(&g.lock);
  return rc;
#undef C
}

aclError aipc__emu_ipc_get_attr(const char *key, aclrtIpcMemAttrType type, uint64_t *attr) {
#define C "ipc_get_attr"
  aipc__key k;
  aclError rc = aipc__key_parse(C, key, &k);
  if (rc != ACL_SUCCESS) return rc;
  if (type != ACL_RT_IPC_MEM_ATTR_ACCESS_LINK)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": unknown attribute type %d", (int)type);
  if (!attr) return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": attr is NULL");
  pthread_mutex_lock(&g.lock);
  aipc__import *imp = aipc__import_lookup(&k);
  aipc__export *e = imp || !own_key(&k) ? NULL : aipc__export_lookup(&k);
  if (imp)
    *attr = imp->attr;
  else if (e)
    *attr = e->attr;
  else
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, C ": key is neither an export nor an import of this process");
  pthread_mutex_unlock(&g.lock);
  return rc;
#undef C
}

/* ---- import, close ---------------------------------------------------------------- */

aclError aipc__emu_ipc_import_by_key(void **devPtr, const char *key, uint64_t flags) {
#define C "aclrtIpcMemImportByKey"
  if (!devPtr) return aipc__fail(ACL_ERROR_INVALID_PARAM, C ": devPtr is NULL");
  aipc__key k;
  aclError rc = aipc__key_parse(C, key, &k);
  if (rc != ACL_SUCCESS) return rc;
  if (flags > ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS)
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      C ": unknown flags 0x%llx (ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT or _ENABLE_PEER_ACCESS)",
                      (unsigned long long)flags);
  uint32_t here = aipc__config_get()->sdid;
  if (k.sdid != here)
    return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      C ": the key was exported on server %u and this is server %u (ASCEND_IPC_SDID): cross-server "
                      "import needs the super-node fabric; the emulator has none",
                      k.sdid, here);
  pthread_mutex_lock(&g.lock);
  if (own_key(&k)) {
    /* One's own key: no socket, the exporter's own pointer, one more reference. */
    aipc__export *e = aipc__export_lookup(&k);
    bool freed;
    if (!e)
      rc = aipc__fail(ACL_ERROR_RT_IPC_ERROR, C ": key not exported by process %d (closed, never issued, or forged)",
                      (int)g.pid);
    else if (e->closed)
      rc = aipc__fail(ACL_ERROR_RT_IPC_ERROR, C ": key was closed by its exporter (process %d): no new imports",
                      (int)g.pid);
    else if (aipc__mem_rdlock(), freed = e->block->user_freed, aipc__mem_unlock(), freed)
      rc = aipc__fail(ACL_ERROR_RT_IPC_ERROR, C ": the memory of this key was freed by its exporter (aclrtFree)");
    else if (e->self_refs == UINT32_MAX)
      rc = aipc__fail(ACL_ERROR_INVALID_PARAM, C ": key imported too many times");
    if (rc == ACL_SUCCESS) {
      e->self_refs++;
      e->refs_total++;
      e->imported = true;
      *devPtr = e->ptr;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
  }
  pthread_mutex_unlock(&g.lock);
  return aipc__client_import(&k, flags, devPtr);
#undef C
}

aclError aipc__emu_ipc_close(const char *key) {
#define C "aclrtIpcMemClose"
  aipc__key k;
  aclError rc = aipc__key_parse(C, key, &k);
  if (rc != ACL_SUCCESS) return rc;
  pthread_mutex_lock(&g.lock);
  /* A process that both imported and exported a key closes the import first. */
  aipc__import *imp = aipc__import_lookup(&k);
  if (imp) return aipc__client_close(imp); /* unlocks */
  aipc__export *e = own_key(&k) ? aipc__export_lookup(&k) : NULL;
  if (!e) {
    pthread_mutex_unlock(&g.lock);
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      C ": key is neither an export nor an import of this process (already closed, or forged?)");
  }
  if (e->self_refs) {
    e->self_refs--;
    e->refs_total--;
    aipc__export_maybe_finish(e);
    pthread_mutex_unlock(&g.lock);
    return ACL_SUCCESS;
  }
  if (e->closed) {
    unsigned long long n = (unsigned long long)e->refs_total;
    pthread_mutex_unlock(&g.lock);
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      C ": key was already closed by this process (%llu importer reference(s) still hold the memory)",
                      n);
  }
  /* What importers already sent (RELEASE, EOF) counts before deciding. */
  aipc__export_drain(e);
  if (e->refs_total && aipc__config_get()->strict) {
    char who[160];
    aipc__export_importers(e, who, sizeof who);
    unsigned long long n = (unsigned long long)e->refs_total;
    pthread_mutex_unlock(&g.lock);
    return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR,
                      C ": key is still imported by process(es) %s (%llu reference(s)); every importer must call "
                      "aclrtIpcMemClose first (ASCEND_IPC_STRICT=1)",
                      who, n);
  }
  e->closed = true;
  aipc__export_closing(e);
  aipc__export_maybe_finish(e);
  pthread_mutex_unlock(&g.lock);
  return ACL_SUCCESS;
#undef C
}

/* ---- fork, finalize --------------------------------------------------------------- */

void aipc__ipc_atfork_prepare(void) { pthread_mutex_lock(&g.lock); }

void aipc__ipc_atfork_parent(void) { pthread_mutex_unlock(&g.lock); }

void aipc__ipc_atfork_child(void) {
  static const pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  memcpy(&g.lock, &fresh, sizeof fresh);
  aipc__server_child_reset();
  aipc__client_child_reset();
  aipc__random_reset(); /* never hand out the parent's random bytes */
  g.pid = 0;
  g.nonce = 0; /* a new process, a new name */
}

void aipc__ipc_finalize(void) {
  aipc__server_stop_thread();
  pthread_mutex_lock(&g.lock);
  aipc__server_clear();
  aipc__client_clear();
  pthread_mutex_unlock(&g.lock);
}
