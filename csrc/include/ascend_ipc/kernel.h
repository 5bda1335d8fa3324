/*
 * ascend_ipc: the emulator's "device binary" (emulator only; CANN has no
 * such header).
 *
 * A device kernel cannot run on the host, so the emulated runtime's
 * aclrtBinaryLoadFromFile loads a host shared object (an ELF .so, whatever
 * the file's extension, opened with dlopen) and aclrtBinaryGetFunction finds
 * kernels in it by name. A kernel is defined with AIPC_KERNEL:
 *
 *   #include <ascend_ipc/kernel.h>
 *   struct add_args { uint16_t *x, *y, *z; };     // the appended arguments
 *   AIPC_KERNEL(add_custom) {
 *     const struct add_args *a = (const struct add_args *)ctx->args;
 *     ... block ctx->block_idx of ctx->block_dim ...
 *     if (bad) { ctx->fault(ctx, 0, "what went wrong"); return; }
 *   }
 *
 * and the object is built with -shared -fPIC. aclrtLaunchKernelWithConfig
 * queues a task that calls the kernel once per block, blocks 0 .. numBlocks-1
 * in order, on the stream's worker thread, in stream order.
 *
 * The argument buffer is a C struct of the arguments appended with
 * aclrtKernelArgsAppend, in order: an argument of 1, 2 or 4 bytes starts at a
 * multiple of its size, any other at a multiple of 8. A placeholder
 * (aclrtKernelArgsAppendPlaceHolder) is a pointer to a copy, made at launch,
 * of what the program wrote in its buffer (aclrtKernelArgsGetPlaceHolderBuffer).
 * Device pointers are host addresses in the emulator: a kernel may read and
 * write device memory through them directly, but memory the program frees
 * while the kernel runs is then unmapped under it (a crash, where a device
 * would raise an exception); ctx->read and ctx->write check every access
 * and turn a bad one into a fault.
 *
 * A kernel that finds an error a device would trap on calls ctx->fault and
 * returns: no later block runs, the task fails with code (0:
 * ACL_ERROR_RT_AICORE_EXCEPTION; else one of the device exception codes, see
 * AIPC_KERNEL_FAULT_CODES), the process's exception callback
 * (aclrtSetExceptionInfoCallback) gets the task's ids, and
 * aclrtSynchronizeStream returns the code.
 */
#ifndef ASCEND_IPC_KERNEL_H_
#define ASCEND_IPC_KERNEL_H_

#include <stddef.h>
#include <stdint.h>

#define AIPC_KERNEL_ABI 1u
#define AIPC_KERNEL_MAGIC 0x4b435041u /* "APCK" */
/* The codes a kernel may fault with (any other becomes the first):
 * ACL_ERROR_RT_AICORE_EXCEPTION, ACL_ERROR_RT_AICORE_TRAP_EXCEPTION. */
#define AIPC_KERNEL_FAULT_CODES {507015, 507016}

typedef struct aipc_kernel_ctx aipc_kernel_ctx;
struct aipc_kernel_ctx {
  uint32_t abi;        /* AIPC_KERNEL_ABI */
  uint32_t block_idx;  /* this call's block, 0 .. block_dim-1 */
  uint32_t block_dim;  /* numBlocks of the launch */
  int32_t device;      /* the stream's device */
  void *args;          /* the argument buffer (see above); the kernel may write it */
  size_t args_size;    /* its size in bytes */
  uint32_t arg_count;  /* how many arguments were appended */
  const size_t *arg_offsets; /* their offsets in args */
  /* Ends the launch as a device exception; why is copied (may be NULL). */
  void (*fault)(const aipc_kernel_ctx *ctx, int32_t code, const char *why);
  /* Nonzero once the launch should stop at once: its stream is being
   * destroyed by force (or its device reset). A long kernel polls it and
   * returns, as a device abandons a killed kernel; no later block runs. */
  int (*cancelled)(const aipc_kernel_ctx *ctx);
  /* Checked access to device memory (local or imported, any device): copy n
   * bytes from device memory src to the kernel's own memory dst (read), or
   * from its own memory src to device memory dst (write). 0, or -1 when the
   * range is not live device memory: the launch then faults (as a device
   * kernel does on a bad address) and the kernel should return. */
  int (*read)(const aipc_kernel_ctx *ctx, void *dst, const void *src, size_t n);
  int (*write)(const aipc_kernel_ctx *ctx, void *dst, const void *src, size_t n);
  void *runtime_;      /* the runtime's */
};

typedef void (*aipc_kernel_fn)(const aipc_kernel_ctx *ctx);

/* What aclrtBinaryGetFunction(bin, "name") looks up: the exported symbol
 * aipc_kernel__<name>, which must be defined by that object itself. */
typedef struct aipc_kernel_desc {
  uint32_t magic; /* AIPC_KERNEL_MAGIC */
  uint32_t abi;   /* AIPC_KERNEL_ABI */
  const char *name;
  aipc_kernel_fn fn;
} aipc_kernel_desc;

#define AIPC_KERNEL_SYMBOL_PREFIX "aipc_kernel__"

#ifdef __cplusplus
#define AIPC_KERNEL_EXTERN_ extern "C"
#else
#define AIPC_KERNEL_EXTERN_
#endif

#define AIPC_KERNEL(name)                                                                                  \
  static void aipc_kernel_body__##name(const aipc_kernel_ctx *ctx);                                        \
  AIPC_KERNEL_EXTERN_ __attribute__((visibility("default"))) const aipc_kernel_desc aipc_kernel__##name = { \
      AIPC_KERNEL_MAGIC, AIPC_KERNEL_ABI, #name, aipc_kernel_body__##name};                                \
  static void aipc_kernel_body__##name(const aipc_kernel_ctx *ctx)

#endif /* ASCEND_IPC_KERNEL_H_ */
