// Shared by the host stand-ins of CANN's sample kernels (see README.md here).
//
// A stand-in source is built twice by ascendc.cmake: with AIPC_STANDIN_DEVICE
// defined, as the "device binary" (a shared object of kernels, see
// ascend_ipc/kernel.h); and without it, as the host side the sample links:
// the launchers its headers declare (EasyOP, WriteDo, ...), which launch those
// kernels with CANN's public calls, as the <<<...>>> launches they replace
// do. ascendc_fatbin_library builds the device side only.
#ifndef AIPC_STANDIN_H_
#define AIPC_STANDIN_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <thread>

#include "acl/acl.h"
#include "ascend_ipc/kernel.h"

namespace aipc_standin {

// The kernel's arguments, as the struct the kernel reads: argument i of the
// launch is field i (see ascend_ipc/kernel.h for the layout).
template <typename T>
inline const T &args(const aipc_kernel_ctx *ctx) {
  return *static_cast<const T *>(ctx->args);
}

// Device memory, read and written through the runtime's checked access
// (ascend_ipc/kernel.h): memory the program freed while the kernel ran is
// refused instead of crashing the process, and the kernel faults, as a device
// kernel does on a bad address.
inline bool read(const aipc_kernel_ctx *ctx, void *dst, const void *dev, size_t n) {
  return ctx->read(ctx, dst, dev, n) == 0;
}

inline bool write(const aipc_kernel_ctx *ctx, void *dev, const void *src, size_t n) {
  return ctx->write(ctx, dev, src, n) == 0;
}

struct arg {
  const void *data;
  size_t size;
};

// Dispatch. On an NPU a launched kernel runs at once and a small one is done
// within microseconds, before the host's next call; CANN's samples rely on it
// (a ReadDo followed at once by aclrtIpcMemClose or aclrtDestroyStreamForce).
// The emulator's stream worker is a host thread the scheduler may run later,
// so a launcher waits a little, as the device would have run the kernel: up
// to kStartMs for the kernel to start (it cannot when its stream is busy or
// waiting: then the launch just returns), then up to kDoneMs for it to end.
// The launch itself stays asynchronous: the wait is bounded and nothing
// depends on it. The kernels of ascendc_library stand-ins take a hidden last
// argument for it (STANDIN_KERNEL).
struct dispatch {
  std::atomic<int> refs{2}; // the launcher's and the kernel's
  std::atomic<int> state{0}; // 1: started, 2: done
};
constexpr int kStartMs = 200;
constexpr int kDoneMs = 50;

inline void dispatch_put(dispatch *d) {
  if (d->refs.fetch_sub(1) == 1) delete d;
}

#ifdef AIPC_STANDIN_DEVICE
inline dispatch *dispatch_of(const aipc_kernel_ctx *ctx) {
  dispatch *d;
  std::memcpy(&d, static_cast<const char *>(ctx->args) + ctx->arg_offsets[ctx->arg_count - 1], sizeof d);
  return d;
}
// A kernel of a host launcher: marks its dispatch started (block 0) and done
// (last block). A launch that faults or is dropped leaves it to the
// launcher's bound (and its record, a few bytes, unfreed).
#define STANDIN_KERNEL(name)                                                 \
  static void standin_body__##name(const aipc_kernel_ctx *ctx);              \
  AIPC_KERNEL(name) {                                                        \
    aipc_standin::dispatch *d = aipc_standin::dispatch_of(ctx);              \
    if (ctx->block_idx == 0) d->state.store(1);                              \
    standin_body__##name(ctx);                                               \
    if (ctx->block_idx + 1 == ctx->block_dim) {                              \
      d->state.store(2);                                                     \
      aipc_standin::dispatch_put(d);                                         \
    }                                                                        \
  }                                                                          \
  static void standin_body__##name(const aipc_kernel_ctx *ctx)
#endif

inline bool wait_state(const dispatch *d, int state, int ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (d->state.load() < state) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

#ifndef AIPC_STANDIN_DEVICE
#ifndef AIPC_STANDIN_DEVICE_BINARY
#error "AIPC_STANDIN_DEVICE_BINARY (the path of the device side) is set by ascendc.cmake"
#endif
// Launches kernel name of this source's device binary over blocks blocks on
// stream, in stream order. A <<<...>>> launch returns nothing: a failure to
// queue is printed, and the program sees it as a missing result.
inline void launch(const char *name, uint32_t blocks, void *stream, std::initializer_list<arg> list) {
  aclrtBinHandle bin = nullptr;
  aclrtFuncHandle fn = nullptr;
  aclrtArgsHandle args = nullptr;
  const char *step = "aclrtBinaryLoadFromFile";
  aclError rc = aclrtBinaryLoadFromFile(AIPC_STANDIN_DEVICE_BINARY, nullptr, &bin);
  if (rc == ACL_SUCCESS) {
    step = "aclrtBinaryGetFunction";
    rc = aclrtBinaryGetFunction(bin, name, &fn);
  }
  if (rc == ACL_SUCCESS) {
    step = "aclrtKernelArgsInit";
    rc = aclrtKernelArgsInit(fn, &args);
  }
  dispatch *d = new dispatch;
  for (const arg &a : list) {
    if (rc != ACL_SUCCESS) break;
    aclrtParamHandle p = nullptr;
    step = "aclrtKernelArgsAppend";
    rc = aclrtKernelArgsAppend(args, const_cast<void *>(a.data), a.size, &p);
  }
  if (rc == ACL_SUCCESS) {
    aclrtParamHandle p = nullptr;
    rc = aclrtKernelArgsAppend(args, &d, sizeof d, &p);
  }
  if (rc == ACL_SUCCESS) {
    step = "aclrtKernelArgsFinalize";
    rc = aclrtKernelArgsFinalize(args);
  }
  if (rc == ACL_SUCCESS) {
    step = "aclrtLaunchKernelWithConfig";
    rc = aclrtLaunchKernelWithConfig(fn, blocks, stream, nullptr, args, nullptr);
  }
  if (rc == ACL_SUCCESS) {
    if (wait_state(d, 1, kStartMs)) (void)wait_state(d, 2, kDoneMs);
  } else {
    dispatch_put(d); // the kernel will not run
  }
  dispatch_put(d);
  if (rc != ACL_SUCCESS) {
    const char *msg = aclGetRecentErrMsg();
    std::fprintf(stderr, "[stand-in %s] %s failed (%d): %s\n", name, step, static_cast<int>(rc), msg ? msg : "");
  }
  // Queued launches keep the binary loaded until they have run.
  if (bin != nullptr) (void)aclrtBinaryUnLoad(bin);
}
#endif

// IEEE half precision, for the float16 kernels: round to nearest even.
inline float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(man & 0x400u)) {
        man <<= 1;
        exp--;
      }
      bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xffu) - 127 + 15;
  uint32_t man = x & 0x7fffffu;
  if (((x >> 23) & 0xffu) == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (man ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) half++;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(exp) << 10) | (man >> 13), rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++;  // may carry into the exponent: still right
  return static_cast<uint16_t>(sign | half);
}

}  // namespace aipc_standin

#endif
