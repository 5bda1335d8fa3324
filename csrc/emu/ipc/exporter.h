/*
 * The exporter side of the IPC layer (exporter*.c): this process's exports,
 * and the server thread that answers importers on its abstract Unix socket.
 * Its state (exports, connections, references, release ledgers, grants) is
 * private to those files (exporter_internal.h says which owns what) and
 * guarded by one lock of its own, taken inside each function below and
 * never held across a wait on a peer; lock order: exporter lock -> memory
 * lock. Design: docs/design-ipc.md.
 *
 * The entry points (ipc.c) check their arguments and parse keys; every
 * function here takes a parsed key, records a message on failure (naming
 * the entry point `call`) and returns the CANN code.
 */
#ifndef ASCEND_IPC_EMU_IPC_EXPORTER_H_
#define ASCEND_IPC_EMU_IPC_EXPORTER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "acl/acl.h"
#include "emu/ipc/key.h"

/* aclrtIpcMemGetExportKey after its argument checks (kind MEMORY): exports
 * [devPtr, devPtr + size) of a live aclrtMalloc block and writes the key.
 * The other kinds export the whole state page of an event or notify
 * (aipc__mem_sync_alloc). flags: ACL_RT_IPC_MEM_EXPORT_FLAG_*. */
aclError aipc__exporter_export(const char *call, aipc__object_kind kind, void *devPtr, size_t size, uint64_t flags,
                               char key[AIPC_KEY_CHARS + 1]);
/* aclrtMemExportToShareableHandle after its checks: exports the physical
 * allocation behind fd (size bytes from offset 0, of device), which the
 * export keeps a descriptor of its own for until it is closed, and writes
 * the 64-bit shareable handle (key.h). Importers get a descriptor of their
 * own and owe nothing back. flags: ACL_RT_VMM_EXPORT_FLAG_*. */
aclError aipc__exporter_export_physical(const char *call, int fd, uint64_t size, int32_t device, uint64_t flags,
                                        uint64_t *handle);
/* The same for an ACL_MEM_SHARE_HANDLE_TYPE_FABRIC handle: an export of
 * kind PHYSICAL named like a key (pid, nonce, id, 128-bit secret), offered
 * on the super-node socket too; *out is that key (key.h: fabric handles). */
aclError aipc__exporter_export_fabric(const char *call, int fd, uint64_t size, int32_t device, uint64_t flags,
                                      aipc__key *out);
/* Whether k names an export of this process (its pid and nonce; the secret
 * is checked by the calls below). */
bool aipc__exporter_owns(const aipc__key *k);
/* Adds pids to the whitelist of k (aclrtIpcMemSetImportPid). */
aclError aipc__exporter_allow(const char *call, const aipc__key *k, const int32_t *pids, size_t num);
/* aclrtIpcMemImportPidInterServer: entries of server `here` are whitelisted,
 * others recorded. */
aclError aipc__exporter_allow_servers(const char *call, const aipc__key *k, const aclrtServerPid *servers,
                                      size_t num, uint32_t here);
/* aclrtIpcMemSetAttr (the value already checked): before the first import only. */
aclError aipc__exporter_set_attr(const char *call, const aipc__key *k, uint32_t attr);
/* The attribute of a live export of this process: true and *attr, or false. */
bool aipc__exporter_get_attr(const aipc__key *k, uint64_t *attr);
/* An import of one's own key: the exporter's own pointer, one more reference. */
aclError aipc__exporter_import_own(const char *call, const aipc__key *k, void **devPtr);
/*
 * aclrtIpcMemClose of an own key: drops an own import if there is one, else
 * ends the export (refused under ASCEND_IPC_STRICT=1 while importers hold
 * it, unless lenient). *found is false (and nothing recorded) when k is no
 * export of this process.
 */
aclError aipc__exporter_close(const char *call, const aipc__key *k, bool lenient, bool *found);

/* aclFinalize: stops the server, ends every export (unpinning its block). */
void aipc__exporter_finalize(void);
/* A key or handle of this process was just handed to one receiver, whose
 * request is on its way: the server thread polls for up to
 * AIPC_EXPECT_WINDOWS times ASCEND_IPC_POLL_US for it (woken now if it
 * sleeps), instead of waking only when the request comes. No lock; no-op
 * before the server starts or with polling off. */
#define AIPC_EXPECT_WINDOWS 10
void aipc__exporter_expect_request(void);
/* How many of the server thread's waits polled for an expected request (for tests). */
uint64_t aipc__exporter_expected_waits(void);
/* Fork: the state is held still across it; the child drops what it copied
 * (without touching blocks: memory.c already forgot them). */
void aipc__exporter_atfork_prepare(void);
void aipc__exporter_atfork_parent(void);
void aipc__exporter_atfork_child(void);

/* ---- seams for the fuzz target and white-box tests ------------------------ */

/* Stops and joins the server thread: from then on the caller serves by hand. */
void aipc__exporter_stop_server(void);
/* Registers a connected socket as if the server had accepted it from a peer
 * with these credentials (without the checks made at accept), and takes
 * every message read from it to carry them, standing in for the kernel's
 * SCM_CREDENTIALS. Returns its serial (never 0), or 0 when out of memory. */
uint64_t aipc__exporter_adopt(int fd, pid_t pid, uid_t uid);
/* From now on, messages read from adopted connection serial carry (pid,
 * uid): the peer changed its credentials (setuid), or another process
 * holds the socket. */
void aipc__exporter_impersonate(uint64_t serial, pid_t pid, uid_t uid);
/* Serves up to max messages queued on connection serial. False once it is closed. */
bool aipc__exporter_serve(uint64_t serial, int max);
/* Closed exports take their importers' ledger releases (at most every 20 ms). */
void aipc__exporter_sweep(void);
/* Frees the records of closed connections. */
void aipc__exporter_reap(void);

typedef struct aipc__exporter_counts {
  size_t exports;     /* live or closing */
  size_t references;  /* (export, connection) pairs */
  size_t connections; /* open */
  size_t closing;     /* closed exports importers still hold */
} aipc__exporter_counts;
void aipc__exporter_count(aipc__exporter_counts *out);
/* Checks that the books balance; NULL, or the first rule they break. */
const char *aipc__exporter_audit(void);

#endif
