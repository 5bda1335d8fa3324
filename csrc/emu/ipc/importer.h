/*
 * The importer side of the IPC layer (importer.c, importer_conn.c): one
 * persistent connection per exporter process, and this process's imports
 * and their mappings. Its state is private to those files
 * (importer_internal.h), guarded by a lock of its own (and a lock per
 * connection), none held across a wait on a peer; lock order: a
 * connection's lock -> importer lock -> memory lock. Design:
 * docs/design-ipc.md.
 *
 * Every function takes a parsed key of another process, records a message
 * on failure and returns the CANN code.
 */
#ifndef ASCEND_IPC_EMU_IPC_IMPORTER_H_
#define ASCEND_IPC_EMU_IPC_IMPORTER_H_

#include <stdbool.h>
#include <stdint.h>

#include "acl/acl.h"
#include "emu/ipc/key.h"

/* aclrtIpcMemImportByKey of another process's key: asks the exporter, maps
 * what it grants, and writes the address. */
aclError aipc__importer_import(const char *call, const aipc__key *k, uint64_t flags, void **devPtr);
/* aclrtMemImportFromShareableHandle of another process's handle (kind
 * PHYSICAL): asks the exporter and writes the allocation's memfd, which is
 * the caller's from then on (nothing is mapped or recorded here), its size
 * and the exporter's device. */
aclError aipc__importer_fetch(const char *call, const aipc__key *k, int *memfd, uint64_t *size, int32_t *device);
/* aclrtIpcMemClose of an import: drops one reference; the last unmaps it and
 * gives the exporter its references back. *found is false (and nothing is
 * recorded) when k is no import of this process. */
aclError aipc__importer_close(const aipc__key *k, bool *found);
/* The attribute an import was granted with: true and *attr, or false. */
bool aipc__importer_get_attr(const aipc__key *k, uint64_t *attr);

/* aclFinalize: unmaps and frees every import and connection. */
void aipc__importer_finalize(void);
/* Fork: the tables are held still across it; the child forgets them (the
 * parent's mappings stay mapped in it, untracked). */
void aipc__importer_atfork_prepare(void);
void aipc__importer_atfork_parent(void);
void aipc__importer_atfork_child(void);

#endif
