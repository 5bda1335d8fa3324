/*
 * What the emulated device says about itself, and the settings a process
 * keeps per device: the run mode, the chip's name and profile, versions and
 * CANN attributes, resource limits, the saturation mode and the overflow
 * flag, and the calling thread's last error.
 *
 * The chip is named by ASCEND_IPC_EMU_SOC (default Ascend910B1, an Atlas A2
 * chip, the SOC_VERSION tests/samples builds for). Its profile (cube,
 * vector and AI CPU counts, NPU architecture) is that chip's, as CANN's
 * platform files give it, for the names in g_socs; another name gets
 * Ascend910B1's counts and no architecture. No core exists: kernels run on
 * the host (their stand-ins), so the counts bound resource limits and what
 * a launch may ask, nothing more. Queries whose answer would be made up are
 * refused with ACL_ERROR_RT_FEATURE_NOT_SUPPORT.
 *
 * Codes: a NULL pointer is ACL_ERROR_INVALID_PARAM (CANN's ACL layer checks
 * it); a value CANN's runtime layer checks (a limit, a mode, a flag, an
 * attribute) is ACL_ERROR_RT_PARAM_INVALID, as there.
 *
 * State: atomics, no lock. aclFinalize resets them.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

#define SOC_DEFAULT "Ascend910B1"
#define SOC_MAX 64
/* The CANN release the project follows (docs/hardware.md). */
#define CANN_VERSION "9.0.0"
#define CANN_VERSION_NUM 90000000 /* CANN's encoding: major*1e7 + minor*1e5 + patch*1e3 */
/* 0: the version calls answer as a runtime that does not know its version
 * (the test suite builds such a library to stand for an older CANN). */
#ifndef AIPC_EMU_VERSION_KNOWN
#define AIPC_EMU_VERSION_KNOWN 1
#endif

typedef struct soc_profile {
  const char *prefix; /* a name, or a family's prefix ending in '*' */
  int32_t arch;       /* CANN's NpuArch number */
  uint32_t cube, vector, aicpu;
} soc_profile;

/* First match wins: exact names before their family's prefix. */
static const soc_profile g_socs[] = {
    {"Ascend910B1", 2201, 24, 48, 6},   {"Ascend910B2", 2201, 24, 48, 6},   {"Ascend910B2C", 2201, 24, 48, 6},
    {"Ascend910B3", 2201, 20, 40, 6},   {"Ascend910B4", 2201, 20, 40, 6},   {"Ascend910B4-1", 2201, 20, 40, 6},
    {"Ascend910_9362", 2201, 20, 40, 6}, {"Ascend910_9363", 2201, 20, 40, 6}, {"Ascend910_9372", 2201, 20, 40, 6},
    {"Ascend910_93*", 2201, 24, 48, 6}, {"Ascend910B", 1001, 30, 0, 6},     {"Ascend910ProB", 1001, 30, 0, 4},
    {"Ascend910*", 1001, 32, 0, 4},     {"Ascend310P1", 2002, 10, 8, 8},    {"Ascend310P*", 2002, 8, 7, 8},
    {"Ascend310B*", 3002, 1, 1, 4},     {"Ascend950*", 3510, 32, 64, 6},    {"Ascend350*", 3510, 16, 32, 4},
};

static const soc_profile *soc_lookup(const char *name) {
  for (size_t i = 0; i < sizeof g_socs / sizeof g_socs[0]; i++) {
    const char *p = g_socs[i].prefix;
    size_t n = strlen(p);
    if (p[n - 1] == '*' ? strncmp(name, p, n - 1) == 0 : strcmp(name, p) == 0) return &g_socs[i];
  }
  return NULL;
}

static char g_soc[SOC_MAX];
static soc_profile g_profile;
static pthread_once_t g_soc_once = PTHREAD_ONCE_INIT;

/* Limit + 1 per device and kind; 0: none set (the cores). */
static _Atomic uint32_t g_limit[AIPC_MAX_DEVICES][2];
/* The process's overflow mode (CANN keeps one per process), + 1; 0: never
 * set (INFNAN, an A2's default). */
static _Atomic int g_sat_mode;
static _Atomic uint32_t g_overflow[AIPC_MAX_DEVICES];

/* A name CANN's tools accept as a SOC_VERSION: letters, digits, _ and -. */
static bool soc_name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= SOC_MAX) return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') return false;
  return true;
}

static void soc_load(void) {
  const char *e = getenv("ASCEND_IPC_EMU_SOC");
  strcpy(g_soc, e && soc_name_ok(e) ? e : SOC_DEFAULT);
  const soc_profile *p = soc_lookup(g_soc);
  g_profile = p ? *p : (soc_profile){NULL, 0, 24, 48, 6};
}

static const soc_profile *profile(void) {
  pthread_once(&g_soc_once, soc_load);
  return &g_profile;
}

static aclError check_device(const char *call, const char *what, int64_t id) {
  uint32_t n = aipc__config_get()->devices;
  if (id < 0 || id >= (int64_t)n)
    return aipc__fail(ACL_ERROR_RT_INVALID_DEVICEID, "%s: %s %lld is out of range: %u device%s (0..%u)", call, what,
                      (long long)id, n, n == 1 ? "" : "s", n - 1);
  return ACL_SUCCESS;
}

static aclError check_res_type(const char *call, int type) {
  if (type != ACL_RT_DEV_RES_CUBE_CORE && type != ACL_RT_DEV_RES_VECTOR_CORE)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: type %d is not an aclrtDevResLimitType (ACL_RT_DEV_RES_CUBE_CORE 0, "
                      "ACL_RT_DEV_RES_VECTOR_CORE 1)",
                      call, type);
  return ACL_SUCCESS;
}

uint32_t aipc__dev_cores(int type) { return type == ACL_RT_DEV_RES_CUBE_CORE ? profile()->cube : profile()->vector; }

uint32_t aipc__dev_res_limit(int32_t device, int type) {
  if (device < 0 || device >= AIPC_MAX_DEVICES || (type != 0 && type != 1)) return 0;
  uint32_t v = atomic_load(&g_limit[device][type]);
  return v ? v - 1 : aipc__dev_cores(type);
}

void aipc__dev_overflow_raise(int32_t device) {
  if (device >= 0 && device < AIPC_MAX_DEVICES) atomic_store(&g_overflow[device], 1);
}

uint32_t aipc__dev_overflow_get(int32_t device) {
  return device >= 0 && device < AIPC_MAX_DEVICES ? atomic_load(&g_overflow[device]) : 0;
}

void aipc__dev_overflow_clear(int32_t device) {
  if (device >= 0 && device < AIPC_MAX_DEVICES) atomic_store(&g_overflow[device], 0);
}

void aipc__devinfo_finalize(void) {
  atomic_store(&g_sat_mode, 0);
  for (int d = 0; d < AIPC_MAX_DEVICES; d++) {
    atomic_store(&g_limit[d][0], 0);
    atomic_store(&g_limit[d][1], 0);
    atomic_store(&g_overflow[d], 0);
  }
}

/* ---- the device -------------------------------------------------------- */

aclError aipc__emu_get_run_mode(aclrtRunMode *runMode) {
  if (!runMode) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: runMode is NULL", AIPC_CALL_NAME(get_run_mode));
  *runMode = ACL_HOST; /* the program runs on the host, beside its (emulated) devices */
  return ACL_SUCCESS;
}

aipc_cstr aipc__emu_get_soc_name(void) {
  (void)profile();
  return g_soc;
}

aclError aipc__emu_check_arch_compatibility(const char *socVersion, int32_t *canCompatible) {
  const char *call = AIPC_CALL_NAME(check_arch_compatibility);
  if (!socVersion) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: socVersion is NULL", call);
  if (!canCompatible) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: canCompatible is NULL", call);
  /* CANN's rule: compatible when both chips have the same NPU architecture;
   * a name it does not know is an error. */
  const soc_profile *theirs = soc_lookup(socVersion), *ours = profile();
  if (!theirs && strcmp(socVersion, aipc__emu_get_soc_name()) != 0)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: socVersion \"%.64s\" is not a SoC the runtime knows", call,
                      socVersion);
  *canCompatible = theirs && ours->arch ? theirs->arch == ours->arch : strcmp(socVersion, aipc__emu_get_soc_name()) == 0;
  return ACL_SUCCESS;
}

aclError aipc__emu_get_device_info(uint32_t deviceId, aclrtDevAttr attr, int64_t *value) {
  const char *call = AIPC_CALL_NAME(get_device_info);
  if (!value) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: value is NULL", call);
  aclError rc = check_device(call, "deviceId", (int64_t)deviceId);
  if (rc) return rc;
  int64_t v;
  switch ((int)attr) {
    case ACL_DEV_ATTR_AICPU_CORE_NUM: v = profile()->aicpu; break;
    case ACL_DEV_ATTR_AICORE_CORE_NUM:
    case ACL_DEV_ATTR_CUBE_CORE_NUM: v = profile()->cube; break;
    case ACL_DEV_ATTR_VECTOR_CORE_NUM: v = profile()->vector; break;
    case ACL_DEV_ATTR_NPU_ARCH:
      if (!profile()->arch)
        return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "%s: the emulated chip %s has no known NPU architecture",
                          call, aipc__emu_get_soc_name());
      v = profile()->arch;
      break;
    case ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE: v = (int64_t)aipc__config_get()->memory; break;
    case ACL_DEV_ATTR_SMP_ID: v = 0; break; /* every emulated device is in this one OS */
    case ACL_DEV_ATTR_PHY_CHIP_ID: v = (int64_t)deviceId; break;
    case ACL_DEV_ATTR_HD_CONNECT_TYPE: v = ACL_HOST_DEVICE_CONNECT_TYPE_PCIE; break;
    case ACL_DEV_ATTR_IS_VIRTUAL: v = 0; break;
    case ACL_DEV_ATTR_WARP_SIZE:
    case ACL_DEV_ATTR_MAX_THREAD_PER_VECTOR_CORE:
    case ACL_DEV_ATTR_UBUF_PER_VECTOR_CORE:
    case ACL_DEV_ATTR_MAX_GRID_DIM_X:
    case ACL_DEV_ATTR_MAX_GRID_DIM_Y:
    case ACL_DEV_ATTR_MAX_GRID_DIM_Z:
    case ACL_DEV_ATTR_MAX_BLOCK_PER_GRID:
    case ACL_DEV_ATTR_MAX_THREADS_PER_BLOCK:
    case ACL_DEV_ATTR_MAX_BLOCK_DIM_X:
    case ACL_DEV_ATTR_MAX_BLOCK_DIM_Y:
    case ACL_DEV_ATTR_MAX_BLOCK_DIM_Z:
    case ACL_DEV_ATTR_L2_CACHE_SIZE:
    case ACL_DEV_ATTR_SUPER_POD_DEVICE_ID:
    case ACL_DEV_ATTR_SUPER_POD_SERVER_ID:
    case ACL_DEV_ATTR_SUPER_POD_ID:
    case ACL_DEV_ATTR_CUST_OP_PRIVILEGE:
    case ACL_DEV_ATTR_MAINBOARD_ID:
    case ACL_DEV_ATTR_DEVICE_FORM_FACTOR:
      return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                        "%s: attribute %d is not modelled by the emulated device (it has no such hardware to report on)",
                        call, (int)attr);
    default:
      return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: attr %d is not an aclrtDevAttr", call, (int)attr);
  }
  *value = v;
  return ACL_SUCCESS;
}

aclError aipc__emu_get_device_capability(int32_t deviceId, aclrtDevFeatureType devFeatureType, int32_t *value) {
  const char *call = AIPC_CALL_NAME(get_device_capability);
  if (!value) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: value is NULL", call);
  aclError rc = check_device(call, "deviceId", deviceId);
  if (rc) return rc;
  switch ((int)devFeatureType) {
    case ACL_FEATURE_TSCPU_TASK_UPDATE_SUPPORT_AIC_AIV: /* no task scheduler CPU updates tasks here */
    case ACL_FEATURE_SYSTEM_MEMQ_EVENT_CROSS_DEV:      /* no memory queues */
      *value = ACL_DEV_FEATURE_NOT_SUPPORT;
      return ACL_SUCCESS;
    default:
      return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: devFeatureType %d is not an aclrtDevFeatureType", call,
                        (int)devFeatureType);
  }
}

aclError aipc__emu_query_device_status(int32_t deviceId, aclrtDeviceStatus *deviceStatus) {
  const char *call = AIPC_CALL_NAME(query_device_status);
  if (!deviceStatus) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: deviceStatus is NULL", call);
  aclError rc = check_device(call, "deviceId", deviceId);
  if (rc) return rc;
  *deviceStatus = ACL_RT_DEVICE_STATUS_NORMAL; /* an emulated device has no faults */
  return ACL_SUCCESS;
}

aclError aipc__emu_get_device_utilization_rate(int32_t deviceId, aclrtUtilizationInfo *info) {
  const char *call = AIPC_CALL_NAME(get_device_utilization_rate);
  if (!info) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: utilizationInfo is NULL", call);
  if (info->utilizationExtend)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: utilizationInfo->utilizationExtend is reserved and must be NULL",
                      call);
  aclError rc = check_device(call, "deviceId", deviceId);
  if (rc) return rc;
  /* No cores run (kernels are host stand-ins): they are idle. CANN reports
   * memory as -1 (not measured), and so does this. */
  info->cubeUtilization = 0;
  info->vectorUtilization = profile()->vector ? 0 : -1; /* CANN: -1, the chip has no vector cores */
  info->aicpuUtilization = 0;
  info->memoryUtilization = -1;
  return ACL_SUCCESS;
}

aclError aipc__emu_device_get_stream_priority_range(int32_t *leastPriority, int32_t *greatestPriority) {
  const char *call = AIPC_CALL_NAME(device_get_stream_priority_range);
  if (!leastPriority) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: leastPriority is NULL", call);
  if (!greatestPriority) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: greatestPriority is NULL", call);
  *leastPriority = 7; /* CANN's range: 0 (highest) .. 7 (lowest) */
  *greatestPriority = 0;
  return ACL_SUCCESS;
}

aclError aipc__emu_device_disable_peer_access(int32_t peerDeviceId) {
  const char *call = AIPC_CALL_NAME(device_disable_peer_access);
  aclError rc = check_device(call, "peerDeviceId", peerDeviceId);
  if (rc) return rc;
  if (peerDeviceId == aipc__device_current())
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: peerDeviceId %d is the current device; a peer is another device",
                      call, (int)peerDeviceId);
  /* Every emulated device reaches every other (see aclrtDeviceEnablePeerAccess): nothing to undo. */
  return ACL_SUCCESS;
}

/* ---- resource limits ---------------------------------------------------- */

aclError aipc__emu_set_device_res_limit(int32_t deviceId, aclrtDevResLimitType type, uint32_t value) {
  const char *call = AIPC_CALL_NAME(set_device_res_limit);
  aclError rc;
  if ((rc = check_device(call, "deviceId", deviceId)) || (rc = check_res_type(call, (int)type))) return rc;
  uint32_t cores = aipc__dev_cores((int)type);
  if (value > cores) /* CANN's only rule: not more than the chip has */
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: value %u is more than the device's %u %s cores", call, value,
                      cores, type == ACL_RT_DEV_RES_CUBE_CORE ? "cube" : "vector");
  atomic_store(&g_limit[deviceId][type], value + 1);
  return ACL_SUCCESS;
}

aclError aipc__emu_get_device_res_limit(int32_t deviceId, aclrtDevResLimitType type, uint32_t *value) {
  const char *call = AIPC_CALL_NAME(get_device_res_limit);
  if (!value) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: value is NULL", call);
  aclError rc;
  if ((rc = check_device(call, "deviceId", deviceId)) || (rc = check_res_type(call, (int)type))) return rc;
  *value = aipc__dev_res_limit(deviceId, (int)type);
  return ACL_SUCCESS;
}

aclError aipc__emu_reset_device_res_limit(int32_t deviceId) {
  aclError rc = check_device(AIPC_CALL_NAME(reset_device_res_limit), "deviceId", deviceId);
  if (rc) return rc;
  atomic_store(&g_limit[deviceId][0], 0);
  atomic_store(&g_limit[deviceId][1], 0);
  return ACL_SUCCESS;
}

aclError aipc__emu_get_res_in_current_thread(aclrtDevResLimitType type, uint32_t *value) {
  const char *call = AIPC_CALL_NAME(get_res_in_current_thread);
  if (!value) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: value is NULL", call);
  aclError rc = check_res_type(call, (int)type);
  if (rc) return rc;
  /* No stream-level limit exists in the emulator: the process's limit on
   * the thread's current device, else the device's cores. */
  *value = aipc__dev_res_limit(aipc__device_current(), (int)type);
  return ACL_SUCCESS;
}

/* ---- saturation mode ----------------------------------------------------- */

aclError aipc__emu_set_device_sat_mode(aclrtFloatOverflowMode mode) {
  const char *call = AIPC_CALL_NAME(set_device_sat_mode);
  if (mode != ACL_RT_OVERFLOW_MODE_SATURATION && mode != ACL_RT_OVERFLOW_MODE_INFNAN)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: mode %d is not ACL_RT_OVERFLOW_MODE_SATURATION (0) or ACL_RT_OVERFLOW_MODE_INFNAN (1)", call,
                      (int)mode);
  atomic_store(&g_sat_mode, (int)mode + 1); /* the process's, as in CANN */
  return ACL_SUCCESS;
}

aclError aipc__emu_get_device_sat_mode(aclrtFloatOverflowMode *mode) {
  if (!mode) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: mode is NULL", AIPC_CALL_NAME(get_device_sat_mode));
  int m = atomic_load(&g_sat_mode);
  *mode = m ? (aclrtFloatOverflowMode)(m - 1) : ACL_RT_OVERFLOW_MODE_INFNAN;
  return ACL_SUCCESS;
}

/* ---- versions and CANN attributes ----------------------------------------- */

/* The packages this runtime stands for: CANN's runtime (the package name
 * CANN's samples ask about) and the toolkit as a whole. */
static aclError check_pkg(const char *call, const char *pkgName) {
  if (strcmp(pkgName, "runtime") == 0 || strcmp(pkgName, "cann") == 0) return ACL_SUCCESS;
  return aipc__fail(ACL_ERROR_INVALID_FILE,
                    "%s: package \"%.64s\" is not installed: the emulated runtime has version information for "
                    "\"runtime\" and \"cann\" only",
                    call, pkgName);
}

aclError aipc__emu_sys_get_version_str(char *pkgName, char *versionStr) {
  const char *call = AIPC_CALL_NAME(sys_get_version_str);
  if (!AIPC_EMU_VERSION_KNOWN)
    return aipc__fail(ACL_ERROR_INVALID_FILE, "%s: this build of the runtime reports no version", call);
  if (!versionStr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: versionStr is NULL", call);
  if (!pkgName) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: pkgName is NULL", call);
  aclError rc = check_pkg(call, pkgName);
  if (rc) return rc;
  strcpy(versionStr, CANN_VERSION); /* the buffer holds ACL_PKG_VERSION_MAX_SIZE bytes */
  return ACL_SUCCESS;
}

aclError aipc__emu_sys_get_version_num(char *pkgName, int32_t *versionNum) {
  const char *call = AIPC_CALL_NAME(sys_get_version_num);
  if (!AIPC_EMU_VERSION_KNOWN)
    return aipc__fail(ACL_ERROR_INVALID_FILE, "%s: this build of the runtime reports no version", call);
  if (!versionNum) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: versionNum is NULL", call);
  if (!pkgName) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: pkgName is NULL", call);
  aclError rc = check_pkg(call, pkgName);
  if (rc) return rc;
  *versionNum = CANN_VERSION_NUM;
  return ACL_SUCCESS;
}

/* Every attribute CANN defines, and whether this runtime has it: INF_NAN
 * (the inf/NaN overflow mode, aclrtSetDeviceSatMode) yes; BF16 yes (a type
 * the data-type calls and kernel stand-ins handle); JIT compilation of
 * operators no (there is no operator compiler). */
static const aclCannAttr g_attrs[] = {ACL_CANN_ATTR_INF_NAN, ACL_CANN_ATTR_BF16, ACL_CANN_ATTR_JIT_COMPILE};

aclError aipc__emu_get_cann_attribute_list(const aclCannAttr **cannAttrList, size_t *num) {
  const char *call = AIPC_CALL_NAME(get_cann_attribute_list);
  if (!cannAttrList) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: cannAttrList is NULL", call);
  if (!num) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: num is NULL", call);
  *cannAttrList = g_attrs;
  *num = sizeof g_attrs / sizeof g_attrs[0];
  return ACL_SUCCESS;
}

aclError aipc__emu_get_cann_attribute(aclCannAttr cannAttr, int32_t *value) {
  const char *call = AIPC_CALL_NAME(get_cann_attribute);
  if (!value) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: value is NULL", call);
  switch ((int)cannAttr) {
    case ACL_CANN_ATTR_INF_NAN:
    case ACL_CANN_ATTR_BF16: *value = 1; return ACL_SUCCESS;
    case ACL_CANN_ATTR_JIT_COMPILE: *value = 0; return ACL_SUCCESS;
    default:
      return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: cannAttr %d is not an aclCannAttr (0..2)", call, (int)cannAttr);
  }
}

/* ---- the last error --------------------------------------------------------- */

static aclError check_level(const char *call, aclrtLastErrLevel level) {
  if (level != ACL_RT_THREAD_LEVEL)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: level %d is not ACL_RT_THREAD_LEVEL (0), the only level", call,
                      (int)level);
  return ACL_SUCCESS;
}

aclError aipc__emu_get_last_error(aclrtLastErrLevel level) {
  aclError rc = check_level(AIPC_CALL_NAME(get_last_error), level);
  if (rc) return rc;
  return aipc__last_error(1);
}

aclError aipc__emu_peek_at_last_error(aclrtLastErrLevel level) {
  aclError rc = check_level(AIPC_CALL_NAME(peek_at_last_error), level);
  if (rc) return rc;
  return aipc__last_error(0);
}

aclError aipc__emu_get_error_verbose(int32_t deviceId, aclrtErrorInfo *errorInfo) {
  const char *call = AIPC_CALL_NAME(get_error_verbose);
  if (!errorInfo) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: errorInfo is NULL", call);
  aclError rc = check_device(call, "deviceId", deviceId);
  if (rc) return rc;
  /* A device fault (memory UCE, AI Core, link) cannot happen to an emulated
   * device: there is never one to report. */
  memset(errorInfo, 0, sizeof *errorInfo);
  errorInfo->errorType = ACL_RT_NO_ERROR;
  return ACL_SUCCESS;
}
