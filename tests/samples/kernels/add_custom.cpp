// Host stand-in of kernel_func/add_custom.cpp: z = x + y over 8 x 2048
// float16 values, each block adding its 2048 (the device kernel's fixed
// split: TOTAL_LENGTH / USE_CORE_NUM per block).
#include <vector>

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
  size_t base = static_cast<size_t>(kBlockLength) * ctx->block_idx, bytes = kBlockLength * sizeof(uint16_t);
  std::vector<uint16_t> x(kBlockLength), y(kBlockLength), z(kBlockLength);
  if (!aipc_standin::read(ctx, x.data(), a.x + base, bytes) || !aipc_standin::read(ctx, y.data(), a.y + base, bytes))
    return;
  for (uint32_t i = 0; i < kBlockLength; i++)
    z[i] = aipc_standin::float_to_half(aipc_standin::half_to_float(x[i]) + aipc_standin::half_to_float(y[i]));
  aipc_standin::write(ctx, a.z + base, z.data(), bytes);
}
