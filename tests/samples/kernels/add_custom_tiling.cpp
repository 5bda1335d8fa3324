// Host stand-in of kernel_func/add_custom_tiling.cpp: z = x + y in float16,
// the length and the tile count read through two pointer arguments
// (placeholders); each of the 8 blocks adds its share, tile by tile, as the
// device kernel does (nothing when the tile count is 0).
#include <vector>

#include "aipc_standin.h"

namespace {
constexpr uint32_t kUseCoreNum = 8;
constexpr uint32_t kBufferNum = 2;

struct AddTilingArgs {
  uint16_t *x, *y, *z;
  int32_t *totalLength, *tileNum;
};
}  // namespace

AIPC_KERNEL(add_custom) {
  const AddTilingArgs &a = aipc_standin::args<AddTilingArgs>(ctx);
  uint32_t total = static_cast<uint32_t>(*a.totalLength), tiles = static_cast<uint32_t>(*a.tileNum);
  if (tiles == 0) return;
  uint32_t blockLength = total / kUseCoreNum;
  uint32_t tileLength = blockLength / tiles / kBufferNum;
  size_t base = static_cast<size_t>(blockLength) * ctx->block_idx;
  size_t n = static_cast<size_t>(tiles) * kBufferNum * tileLength, bytes = n * sizeof(uint16_t);
  if (n == 0) return;
  std::vector<uint16_t> x(n), y(n), z(n);
  if (!aipc_standin::read(ctx, x.data(), a.x + base, bytes) || !aipc_standin::read(ctx, y.data(), a.y + base, bytes))
    return;
  for (size_t i = 0; i < n; i++)
    z[i] = aipc_standin::float_to_half(aipc_standin::half_to_float(x[i]) + aipc_standin::half_to_float(y[i]));
  aipc_standin::write(ctx, a.z + base, z.data(), bytes);
}
