#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define AIPC_MSG_MAX 512

/* Two buffers: the pending message, and the one handed out, which must stay
 * valid after the pending one is cleared. */
static __thread char tl_pending[AIPC_MSG_MAX];
static __thread char tl_handed_out[AIPC_MSG_MAX];
static __thread int tl_has_pending;
/* aclrtGetLastError's code: every failure sets it, independently of the
 * message, which aclGetRecentErrMsg consumes on its own. */
static __thread aclError tl_last_error;

const char *aipc__error_name(aclError code) {
  switch (code) {
#define AIPC_NAME_CASE_(sym, num, msg) \
  case num:                           \
    return #sym;
    ACL_ERROR_CODE_TABLE(AIPC_NAME_CASE_)
#undef AIPC_NAME_CASE_
  }
  return "ACL_ERROR_UNKNOWN";
}

const char *aipc__error_text(aclError code) {
  switch (code) {
#define AIPC_TEXT_CASE_(sym, num, msg) \
  case num:                           \
    return msg;
    ACL_ERROR_CODE_TABLE(AIPC_TEXT_CASE_)
#undef AIPC_TEXT_CASE_
  }
  return "unknown error";
}

aclError aipc__fail(aclError code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_pending, sizeof tl_pending, fmt, ap);
  va_end(ap);
  tl_has_pending = 1;
  if (code != 0) tl_last_error = code;
  return code;
}

const char *aipc__recent_err_msg(void) {
  if (!tl_has_pending) return NULL;
  memcpy(tl_handed_out, tl_pending, sizeof tl_handed_out);
  tl_has_pending = 0;
  return tl_handed_out;
}

aclError aipc__last_error(int clear) {
  aclError code = tl_last_error;
  if (clear) tl_last_error = 0;
  return code;
}
