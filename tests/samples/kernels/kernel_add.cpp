// Host stand-in of kernel_func/kernel_add.cpp: dst = srcA + srcB in float,
// each block adding its totalSize / blockDim values tile by tile (8 tiles,
// double-buffered), as the device kernel splits them.
#include <vector>

#include "aipc_standin.h"

namespace {
constexpr uint32_t kTileNum = 8;
constexpr uint32_t kBufferNum = 2;

struct AddArgs {
  float *srcA, *srcB, *dst;
  uint32_t totalSize;
};
}  // namespace

#ifdef AIPC_STANDIN_DEVICE
STANDIN_KERNEL(AddKernel) {
  const AddArgs &a = aipc_standin::args<AddArgs>(ctx);
  uint32_t perBlock = a.totalSize / ctx->block_dim;
  uint32_t tileLength = perBlock / kTileNum / kBufferNum;
  size_t start = static_cast<size_t>(ctx->block_idx) * perBlock;
  size_t n = static_cast<size_t>(kTileNum) * kBufferNum * tileLength, bytes = n * sizeof(float);
  if (n == 0) return;
  std::vector<float> x(n), y(n), z(n);
  if (!aipc_standin::read(ctx, x.data(), a.srcA + start, bytes) ||
      !aipc_standin::read(ctx, y.data(), a.srcB + start, bytes))
    return;
  for (size_t i = 0; i < n; i++) z[i] = x[i] + y[i];
  aipc_standin::write(ctx, a.dst + start, z.data(), bytes);
}
#else
void AddDo(uint32_t blockDim, void *stream, float *srcA, float *srcB, float *dst, uint32_t totalSize) {
  aipc_standin::launch("AddKernel", blockDim, stream,
                       {{&srcA, sizeof srcA}, {&srcB, sizeof srcB}, {&dst, sizeof dst}, {&totalSize, sizeof totalSize}});
}
#endif
