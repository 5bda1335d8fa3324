/*
 * The public acl* entry points of libascendcl_emu.so: one forwarder per call
 * of core/calls.h, to the emulator's provider table. Nothing else in the
 * library is visible outside it (libascendcl_emu.map, -fvisibility=hidden).
 */
#include "core/provider.h"

#define AIPC_FORWARDER_(ret, symbol, field, params, args, since, need) \
  ret symbol params { return aipc__emu_provider()->field args; }
AIPC_CALLS(AIPC_FORWARDER_)
#undef AIPC_FORWARDER_
