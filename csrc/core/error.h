/* Error codes, names, messages and the per-thread recent error message. */
#ifndef ASCEND_IPC_CORE_ERROR_H_
#define ASCEND_IPC_CORE_ERROR_H_

#include "acl/acl_base.h"

/* Symbolic name of code ("ACL_ERROR_RT_IPC_ERROR"), or "ACL_ERROR_UNKNOWN". Static storage. */
const char *aipc__error_name(aclError code);
/* Short generic description of code. Static storage. */
const char *aipc__error_text(aclError code);

/*
 * Records a failure for the calling thread and returns code, so call sites
 * read `return aipc__fail(ACL_ERROR_INVALID_PARAM, "size %zu is not ...", n);`.
 * The message should say what was wrong and, where it helps, what to do.
 */
aclError aipc__fail(aclError code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* aclGetRecentErrMsg semantics: message or NULL, then cleared. */
const char *aipc__recent_err_msg(void);

/* aclrtGetLastError (clear) / aclrtPeekAtLastError semantics: the code of
 * the calling thread's latest failure, or ACL_SUCCESS. */
aclError aipc__last_error(int clear);

#endif
