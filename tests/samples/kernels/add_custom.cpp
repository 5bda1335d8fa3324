// Host stand-in of kernel_func/add_custom.cpp: z = x + y over 8 x 2048
// float16 values, each block adding its 2048 (the device kernel's fixed
// split: TOTAL_LENGTH / USE_CORE_NUM per block).
#include "aipc_standin.h"

namespace {
constexpr uint32_t kTotalLength = 8 * 2048;
constexpr uint32_t kUseCoreNum = 8;
constexpr uint32_t kBlockLength = kTotalLength / kUseCoreNum;

struct AddArgs {
  uint16_t *x, *y, *z;
};
}  // namespace

AIPC_KERNEL(add_custom) {
  const AddArgs &a = aipc_standin::args<AddArgs>(ctx);
  size_t base = static_cast<size_t>(kBlockLength) * ctx->block_idx;
  for (uint32_t i = 0; i < kBlockLength; i++)
    a.z[base + i] = aipc_standin::float_to_half(aipc_standin::half_to_float(a.x[base + i]) +
                                                aipc_standin::half_to_float(a.y[base + i]));
}
