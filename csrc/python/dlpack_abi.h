/*
 * The DLPack 1.x ABI, declared by this project.
 *
 * DLPack is a C ABI: what two libraries must agree on is the layout of a few
 * structs, the numbering of two enums and the meaning of some flag bits. This
 * header states those facts under project-local names (aipc_DL*, AIPC_DL*), so
 * the extension depends on no third-party header. tests/python/test_dlpack_abi.py
 * compiles it beside the dlpack.h that the installed torch wheel ships and checks
 * every size, offset and constant against it.
 *
 * Only the exchange structures are declared; the optional C exchange API of
 * DLPack 1.2+ (function tables) is not used by this project.
 */
#ifndef ASCEND_IPC_PYTHON_DLPACK_ABI_H_
#define ASCEND_IPC_PYTHON_DLPACK_ABI_H_

#include <stddef.h>
#include <stdint.h>

/* The ABI version this project produces. Every 1.x consumer accepts 1.x. */
#define AIPC_DLPACK_MAJOR_VERSION 1
#define AIPC_DLPACK_MINOR_VERSION 0

/* Capsule names of the Python exchange protocol. */
#define AIPC_DLPACK_CAPSULE_LEGACY "dltensor"
#define AIPC_DLPACK_CAPSULE_LEGACY_USED "used_dltensor"
#define AIPC_DLPACK_CAPSULE_VERSIONED "dltensor_versioned"
#define AIPC_DLPACK_CAPSULE_VERSIONED_USED "used_dltensor_versioned"

typedef struct {
  uint32_t major;
  uint32_t minor;
} aipc_DLPackVersion;

/* Device types (DLDeviceType). A C enum has the size of int on every ABI we
 * build for; the test checks sizeof(aipc_DLDevice) against the reference. */
typedef enum {
  AIPC_DL_CPU = 1,
  AIPC_DL_CUDA = 2,
  AIPC_DL_CUDA_HOST = 3,
  AIPC_DL_OPENCL = 4,
  AIPC_DL_VULKAN = 7,
  AIPC_DL_METAL = 8,
  AIPC_DL_VPI = 9,
  AIPC_DL_ROCM = 10,
  AIPC_DL_ROCM_HOST = 11,
  AIPC_DL_EXT_DEV = 12,
  AIPC_DL_CUDA_MANAGED = 13,
  AIPC_DL_ONEAPI = 14,
  AIPC_DL_WEBGPU = 15,
  AIPC_DL_HEXAGON = 16,
  AIPC_DL_MAIA = 17,
} aipc_DLDeviceType;

typedef struct {
  aipc_DLDeviceType device_type;
  int32_t device_id;
} aipc_DLDevice;

/* Type codes (DLDataTypeCode); stored in a uint8_t in aipc_DLDataType. */
typedef enum {
  AIPC_DL_INT = 0,
  AIPC_DL_UINT = 1,
  AIPC_DL_FLOAT = 2,
  AIPC_DL_OPAQUE_HANDLE = 3,
  AIPC_DL_BFLOAT = 4,
  AIPC_DL_COMPLEX = 5,
  AIPC_DL_BOOL = 6,
} aipc_DLDataTypeCode;

typedef struct {
  uint8_t code;   /* aipc_DLDataTypeCode */
  uint8_t bits;   /* bits per lane: 8, 16, 32, 64, 128 */
  uint16_t lanes; /* 1 for scalars */
} aipc_DLDataType;

typedef struct {
  void *data;            /* first byte of the allocation or of the view */
  aipc_DLDevice device;
  int32_t ndim;
  aipc_DLDataType dtype;
  int64_t *shape;        /* ndim entries */
  int64_t *strides;      /* ndim entries, in elements; NULL means C-contiguous */
  uint64_t byte_offset;  /* added to data to reach element 0 */
} aipc_DLTensor;

/* DLPack 0.x / legacy "dltensor" capsules. */
typedef struct aipc_DLManagedTensor {
  aipc_DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct aipc_DLManagedTensor *self);
} aipc_DLManagedTensor;

/* Flag bits of aipc_DLManagedTensorVersioned.flags. */
#define AIPC_DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)
#define AIPC_DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1)
#define AIPC_DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (UINT64_C(1) << 2)

/* DLPack 1.x "dltensor_versioned" capsules: the version comes first so a
 * consumer can check it before touching anything else. */
typedef struct aipc_DLManagedTensorVersioned {
  aipc_DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct aipc_DLManagedTensorVersioned *self);
  uint64_t flags;
  aipc_DLTensor dl_tensor;
} aipc_DLManagedTensorVersioned;

#endif
