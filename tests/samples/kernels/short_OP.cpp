// Host stand-in of kernel_func/short_OP.cpp: block i doubles x[i].
#include "aipc_standin.h"

#ifdef AIPC_STANDIN_DEVICE
STANDIN_KERNEL(ShortOPf) {
  uint32_t *x = aipc_standin::args<uint32_t *>(ctx) + ctx->block_idx, v;
  if (!aipc_standin::read(ctx, &v, x, sizeof v)) return;
  v *= 2;
  aipc_standin::write(ctx, x, &v, sizeof v);
}
#else
void ShortOP(uint32_t blockDim, void *stream, uint32_t *x) {
  aipc_standin::launch("ShortOPf", blockDim, stream, {{&x, sizeof x}});
}
#endif
