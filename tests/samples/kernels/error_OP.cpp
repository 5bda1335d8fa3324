// Host stand-in of kernel_func/error_OP.cpp: a kernel that traps. Every block
// faults as the device kernel's trap does: the task fails with the AI Core
// exception code and the exception callback hears of it.
#include "aipc_standin.h"

#ifdef AIPC_STANDIN_DEVICE
STANDIN_KERNEL(ErrorOPf) { ctx->fault(ctx, 507015 /* ACL_ERROR_RT_AICORE_EXCEPTION */, "ErrorOPf executed a trap"); }
#else
void ErrorOP(uint32_t blockDim, void *stream) { aipc_standin::launch("ErrorOPf", blockDim, stream, {}); }
#endif
