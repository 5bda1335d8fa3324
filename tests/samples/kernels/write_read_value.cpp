// Host stand-in of kernel_func/write_read_value.cpp: DeviceWrite stores value
// in devPtr[i] for block i and prints it; DeviceRead prints devPtr[i].
#include "aipc_standin.h"

namespace {
struct WriteArgs {
  int *devPtr;
  int value;
};
}  // namespace

#ifdef AIPC_STANDIN_DEVICE
STANDIN_KERNEL(DeviceWrite) {
  const WriteArgs &a = aipc_standin::args<WriteArgs>(ctx);
  if (!aipc_standin::write(ctx, a.devPtr + ctx->block_idx, &a.value, sizeof a.value)) return;
  std::printf("Source data: %d\n", a.value);
  std::fflush(stdout);
}

STANDIN_KERNEL(DeviceRead) {
  int *devPtr = aipc_standin::args<int *>(ctx), value;
  if (!aipc_standin::read(ctx, &value, devPtr + ctx->block_idx, sizeof value)) return;
  std::printf("Destination data: %d\n", value);
  std::fflush(stdout);
}
#else
void WriteDo(uint32_t blockDim, void *stream, int *devPtr, int value) {
  aipc_standin::launch("DeviceWrite", blockDim, stream, {{&devPtr, sizeof devPtr}, {&value, sizeof value}});
}

void ReadDo(uint32_t blockDim, void *stream, int *devPtr) {
  aipc_standin::launch("DeviceRead", blockDim, stream, {{&devPtr, sizeof devPtr}});
}
#endif
