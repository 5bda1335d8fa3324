// Host stand-in of kernel_func/kernel_print.cpp: every block prints
// "Hello World".
#include "aipc_standin.h"

#ifdef AIPC_STANDIN_DEVICE
STANDIN_KERNEL(KernelPrint) {
  std::printf("Hello World\n");
  std::fflush(stdout);
}
#else
void PrintDo(uint32_t blockDim, void *stream) { aipc_standin::launch("KernelPrint", blockDim, stream, {}); }
#endif
