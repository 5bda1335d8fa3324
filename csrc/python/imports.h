/*
 * The order of this process's imports of each key.
 *
 * In CANN every aclrtIpcMemImportByKey is a mapping of its own, and each
 * aclrtIpcMemClose(key) in an importer releases the key's OLDEST mapping,
 * whoever calls it. Python objects over imports of one key are closed in any
 * order (by the user, the garbage collector, a DLPack consumer), so no close
 * may go to the runtime just because one object is done: that would unmap an
 * older mapping still in use.
 *
 * So the extension keeps, per key, its imports in the runtime's order. When
 * the last user of one lets go, it is marked closed; then, while the oldest
 * of the key is marked, aclrtIpcMemClose(key) releases it. A mapping goes
 * once it and every older import of its key are closed.
 *
 * A process that exports a key and imports it too (its own key) would have
 * its exporter close release an import instead: such a close waits until
 * the process holds no import of the key.
 *
 * The runtime's order is the lists' order because imports and closes of one
 * key never overlap (other keys run in parallel). Every function here runs
 * without the GIL and touches no Python object. The table is process-wide C
 * state, not module state: it mirrors the runtime's own per-process lists,
 * which every interpreter of the process shares. A forked child starts with
 * an empty table, as its runtime does.
 */
#ifndef ASCEND_IPC_PYTHON_IMPORTS_H_
#define ASCEND_IPC_PYTHON_IMPORTS_H_

#include "module.h"

/* One import (one mapping) of a key. Opaque. */
typedef struct aipc_py_import aipc_py_import;

/* Sets up the fork handlers, once per process. 0, or -1 (no exception set). */
int aipc_py_imports_init(void);

/* aclrtIpcMemImportByKey, recorded as the key's youngest import: *ptr and
 * *rec on success. Without the GIL. Returns the call's result (failure in f). */
aclError aipc_py_import_open(const aipc_provider *p, aipc_py_failure *f, const char *key, uint64_t flags,
                             void **ptr, aipc_py_import **rec);

/*
 * rec's user is done with it: marks it, then closes the key's oldest imports
 * while they are marked (aclrtIpcMemClose each), then ends an exporter close
 * that was waiting for them. A failure closing rec itself goes to f: with
 * keep_on_failure rec is unmarked again (still usable, its caller can retry);
 * without, it stays marked and the key's next close retries it. Failures
 * closing older imports or a waiting export (their owners are gone) go to
 * later. Without the GIL.
 */
aclError aipc_py_import_close(const aipc_provider *p, aipc_py_failure *f, aipc_py_import *rec,
                              int keep_on_failure, aipc_py_failure *later);

/*
 * Ends an export of this process (aclrtIpcMemClose). If the process holds
 * imports of the same key (its own key imported), the close is left to the
 * last of them (*deferred = 1, ACL_SUCCESS). Without the GIL.
 */
aclError aipc_py_export_close(const aipc_provider *p, aipc_py_failure *f, const char *key, int *deferred);

#endif
