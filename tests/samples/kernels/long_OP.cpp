// Host stand-in of kernel_func/long_OP.cpp: the device kernel's long
// floating-point loop (about a second on the host), then block i adds 1 to
// x[i] when the result is positive. A stream destroyed by force meanwhile
// ends it early, writing nothing.
#include "aipc_standin.h"

#ifdef AIPC_STANDIN_DEVICE
STANDIN_KERNEL(LongOPf) {
  uint32_t *x = aipc_standin::args<uint32_t *>(ctx) + ctx->block_idx, v;
  volatile float sink;
  float temp = 0.0f;
  for (int i = 0; i < 10000; i++) {
    if (ctx->cancelled(ctx)) return;
    temp += 0.00002f;
    temp *= 0.02f;
    for (int j = 0; j < 25000; j++) {
      temp = temp * temp - 0.000002f;
      temp = temp + (temp * 0.05f);
      temp = temp * temp + 0.00001f;
      temp = temp > 1.0f ? 0.0f : temp;
    }
    temp -= 0.00003f * temp;
  }
  sink = temp;
  if (!aipc_standin::read(ctx, &v, x, sizeof v)) return;
  v += sink > 0.0f ? 1 : 0;
  aipc_standin::write(ctx, x, &v, sizeof v);
}
#else
void LongOP(uint32_t blockDim, void *stream, uint32_t *x) {
  aipc_standin::launch("LongOPf", blockDim, stream, {{&x, sizeof x}});
}
#endif
