/* The CANN name of every call of calls.h, in its order. */
#include "core/calls.h"

const char *const aipc__call_names[AIPC_CALL_COUNT] = {
#define AIPC_CALL_NAME_(ret, symbol, field, params, args, since, need) #symbol,
    AIPC_CALLS(AIPC_CALL_NAME_)
#undef AIPC_CALL_NAME_
};
