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
AIPC_KERNEL(DeviceWrite) {
  const WriteArgs &a = aipc_standin::args<WriteArgs>(ctx);
  a.devPtr[ctx->block_idx] = a.value;
  std::printf("Source data: %d\n", a.value);
  std::fflush(stdout);
}

AIPC_KERNEL(DeviceRead) {
  int *devPtr = aipc_standin::args<int *>(ctx);
  std::printf("Destination data: %d\n", devPtr[ctx->block_idx]);
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
