/*
 * ascend_ipc: base types and error codes of the CANN runtime subset.
 *
 * The numbers below are facts of the CANN ABI; programs written against the
 * CANN documentation compile against this header unchanged.
 */
#ifndef ASCEND_IPC_ACL_BASE_H_
#define ASCEND_IPC_ACL_BASE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(ACL_BUILDING_LIBRARY)
#define ACL_FUNC_VISIBILITY __attribute__((visibility("default")))
#else
#define ACL_FUNC_VISIBILITY
#endif

typedef int aclError;

/* Half-precision float, as raw IEEE 754 binary16 bits. */
typedef uint16_t aclFloat16;

/* Tensor element types (CANN's numbering; the gaps are CANN's). */
typedef enum {
  ACL_DT_UNDEFINED = -1,
  ACL_FLOAT = 0,
  ACL_FLOAT16 = 1,
  ACL_INT8 = 2,
  ACL_INT32 = 3,
  ACL_UINT8 = 4,
  ACL_INT16 = 6,
  ACL_UINT16 = 7,
  ACL_UINT32 = 8,
  ACL_INT64 = 9,
  ACL_UINT64 = 10,
  ACL_DOUBLE = 11,
  ACL_BOOL = 12,
  ACL_STRING = 13,
  ACL_COMPLEX64 = 16,
  ACL_COMPLEX128 = 17,
  ACL_BF16 = 27,
  ACL_INT4 = 29,
  ACL_UINT1 = 30,
  ACL_COMPLEX32 = 33,
  ACL_HIFLOAT8 = 34,
  ACL_FLOAT8_E5M2 = 35,
  ACL_FLOAT8_E4M3FN = 36,
  ACL_FLOAT8_E8M0 = 37,
  ACL_FLOAT6_E3M2 = 38,
  ACL_FLOAT6_E2M3 = 39,
  ACL_FLOAT4_E2M1 = 40,
  ACL_FLOAT4_E1M2 = 41,
} aclDataType;

/* Tensor memory layouts (CANN's numbering). */
typedef enum {
  ACL_FORMAT_UNDEFINED = -1,
  ACL_FORMAT_NCHW = 0,
  ACL_FORMAT_NHWC = 1,
  ACL_FORMAT_ND = 2,
  ACL_FORMAT_NC1HWC0 = 3,
  ACL_FORMAT_FRACTAL_Z = 4,
  ACL_FORMAT_NC1HWC0_C04 = 12,
  ACL_FORMAT_HWCN = 16,
  ACL_FORMAT_NDHWC = 27,
  ACL_FORMAT_FRACTAL_NZ = 29,
  ACL_FORMAT_NCDHW = 30,
  ACL_FORMAT_NDC1HWC0 = 32,
  ACL_FRACTAL_Z_3D = 33,
  ACL_FORMAT_NC = 35,
  ACL_FORMAT_NCL = 47,
  ACL_FORMAT_FRACTAL_NZ_C0_16 = 50,
  ACL_FORMAT_FRACTAL_NZ_C0_32 = 51,
  ACL_FORMAT_FRACTAL_NZ_C0_2 = 52,
  ACL_FORMAT_FRACTAL_NZ_C0_4 = 53,
  ACL_FORMAT_FRACTAL_NZ_C0_8 = 54,
} aclFormat;

/* Features of the installed CANN that aclGetCannAttribute reports on. */
typedef enum {
  ACL_CANN_ATTR_UNDEFINED = -1,
  ACL_CANN_ATTR_INF_NAN = 0,
  ACL_CANN_ATTR_BF16 = 1,
  ACL_CANN_ATTR_JIT_COMPILE = 2,
} aclCannAttr;

/* Bytes per element of dataType (sub-byte types count 1; ACL_STRING and
 * ACL_DT_UNDEFINED 0; an unknown value 8, as CANN does). */
ACL_FUNC_VISIBILITY size_t aclDataTypeSize(aclDataType dataType);
/* binary16 <-> float, rounding to nearest even; NaN and infinities kept. */
ACL_FUNC_VISIBILITY float aclFloat16ToFloat(aclFloat16 value);
ACL_FUNC_VISIBILITY aclFloat16 aclFloatToFloat16(float value);

/*
 * The one table of error codes: X(symbol, number, message).
 * It yields the constants below and, inside the library, the name and
 * message functions, so the three can never disagree.
 */
#define ACL_ERROR_CODE_TABLE(X)                                                \
  X(ACL_SUCCESS, 0, "success")                                                 \
  X(ACL_ERROR_INVALID_PARAM, 100000, "invalid parameter")                      \
  X(ACL_ERROR_INVALID_FILE, 100003, "invalid file")                            \
  X(ACL_ERROR_RT_PARAM_INVALID, 107000, "runtime: invalid parameter")          \
  X(ACL_ERROR_RT_INVALID_DEVICEID, 107001, "runtime: invalid device id")       \
  X(ACL_ERROR_RT_CONTEXT_NULL, 107002, "runtime: no current context")         \
  X(ACL_ERROR_RT_STREAM_CONTEXT, 107003, "runtime: stream not in the current context") \
  X(ACL_ERROR_RT_STREAM_MODEL, 107005, "runtime: stream not in a model")      \
  X(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, 107006, "runtime: event timestamp invalid") \
  X(ACL_ERROR_RT_STREAM_SUBSCRIBE, 107011, "runtime: stream subscription error") \
  X(ACL_ERROR_RT_THREAD_SUBSCRIBE, 107012, "runtime: thread subscription error") \
  X(ACL_ERROR_RT_STREAM_NO_CB_REG, 107015, "runtime: no callback thread subscribed to the stream") \
  X(ACL_ERROR_RT_INVALID_HANDLE, 107017, "runtime: invalid handle")           \
  X(ACL_ERROR_RT_WAIT_TIMEOUT, 107019, "runtime: wait timeout")                \
  X(ACL_ERROR_RT_TASK_TIMEOUT, 107020, "runtime: task timeout")                \
  X(ACL_ERROR_RT_STREAM_ABORT, 107023, "runtime: stream aborted")             \
  X(ACL_ERROR_RT_STREAM_CAPTURED, 107027, "runtime: stream is captured")      \
  X(ACL_ERROR_RT_STREAM_NOT_CAPTURED, 107029, "runtime: stream is not in capture status") \
  X(ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD, 107038, "runtime: capture ended in another thread than it began") \
  X(ACL_ERROR_BAD_ALLOC, 200000, "memory allocation failed")                   \
  X(ACL_ERROR_INVALID_DEVICE, 200002, "invalid device")                        \
  X(ACL_ERROR_FEATURE_UNSUPPORTED, 200006, "feature not supported")            \
  X(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, 207000, "runtime: feature not supported") \
  X(ACL_ERROR_RT_MEMORY_ALLOCATION, 207001, "runtime: device memory allocation failed") \
  X(ACL_ERROR_RT_NO_PERMISSION, 207006, "runtime: no permission")              \
  X(ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED, 207021, "runtime: link type not supported") \
  X(ACL_ERROR_RT_INTERNAL_ERROR, 507000, "runtime: internal error")            \
  X(ACL_ERROR_RT_REPORT_TIMEOUT, 507012, "runtime: report timeout")            \
  X(ACL_ERROR_RT_AICORE_EXCEPTION, 507015, "runtime: AI Core exception")      \
  X(ACL_ERROR_RT_AICORE_TRAP_EXCEPTION, 507016, "runtime: AI Core trap exception") \
  X(ACL_ERROR_RT_IPC_ERROR, 507022, "runtime: IPC error")                      \
  X(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, 507046, "runtime: stream synchronize timeout") \
  X(ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, 507047, "runtime: event synchronize timeout") \
  X(ACL_ERROR_RT_DRV_INTERNAL_ERROR, 507899, "runtime: driver internal error") \
  X(ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED, 507903, "runtime: the stream capture was invalidated") \
  X(ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED, 507910, "host memory range already registered") \
  X(ACL_ERROR_HOST_MEMORY_NOT_REGISTERED, 507911, "host memory has not been registered")

#define ACL_ERROR_CODE_ENUM_(sym, num, msg) sym = num,
enum { ACL_ERROR_CODE_TABLE(ACL_ERROR_CODE_ENUM_) };
#undef ACL_ERROR_CODE_ENUM_

/*
 * Returns the message of the most recent failure on the calling thread and
 * clears it, or NULL when no failure happened since the last call.
 * Ownership: the string belongs to the library and stays valid on this
 * thread until the next call of aclGetRecentErrMsg.
 */
ACL_FUNC_VISIBILITY const char *aclGetRecentErrMsg(void);

/* Library lifetime. configPath may be NULL; the emulator reads no file. */
ACL_FUNC_VISIBILITY aclError aclInit(const char *configPath);
ACL_FUNC_VISIBILITY aclError aclFinalize(void);

#ifdef __cplusplus
}
#endif

#endif /* ASCEND_IPC_ACL_BASE_H_ */
