// Host stand-in of kernel_func/easy_OP.cpp: block i adds 1 to x[i].
#include "aipc_standin.h"

#ifdef AIPC_STANDIN_DEVICE
STANDIN_KERNEL(EasyOPf) {
  uint32_t *x = aipc_standin::args<uint32_t *>(ctx) + ctx->block_idx, v;
  if (!aipc_standin::read(ctx, &v, x, sizeof v)) return;
  v += 1;
  aipc_standin::write(ctx, x, &v, sizeof v);
}
#else
void EasyOP(uint32_t blockDim, void *stream, uint32_t *x) {
  aipc_standin::launch("EasyOPf", blockDim, stream, {{&x, sizeof x}});
}
#endif
