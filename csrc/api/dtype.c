/*
 * acl_base.h's data-type helpers: pure functions with no runtime behaviour,
 * so they are not calls of core/calls.h (no provider has to offer them).
 */
#include <string.h>

#include "acl/acl.h"

ACL_FUNC_VISIBILITY size_t aclDataTypeSize(aclDataType dataType) {
  switch (dataType) {
    case ACL_STRING:
    case ACL_DT_UNDEFINED: return 0;
    case ACL_UINT1:
    case ACL_INT4: /* sub-byte types count one byte, as in CANN */
    case ACL_BOOL:
    case ACL_INT8:
    case ACL_UINT8:
    case ACL_HIFLOAT8:
    case ACL_FLOAT8_E5M2:
    case ACL_FLOAT8_E4M3FN:
    case ACL_FLOAT8_E8M0: return 1;
    case ACL_FLOAT16:
    case ACL_INT16:
    case ACL_UINT16:
    case ACL_BF16: return 2;
    case ACL_FLOAT:
    case ACL_INT32:
    case ACL_UINT32:
    case ACL_COMPLEX32: return 4;
    case ACL_COMPLEX128: return 16;
    default: return 8; /* 64-bit types, COMPLEX64, and (as in CANN) anything else */
  }
}

ACL_FUNC_VISIBILITY float aclFloat16ToFloat(aclFloat16 value) {
  uint32_t sign = (uint32_t)(value & 0x8000u) << 16;
  uint32_t exp = (value >> 10) & 0x1fu;
  uint32_t man = value & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13); /* inf, NaN (payload kept) */
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign; /* +-0 */
  } else { /* subnormal: normalise */
    int e = -1;
    do {
      e++;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

ACL_FUNC_VISIBILITY aclFloat16 aclFloatToFloat16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  uint32_t exp = (bits >> 23) & 0xffu;
  uint32_t man = bits & 0x7fffffu;
  if (exp == 0xff) /* inf stays inf; NaN stays a (quiet) NaN */
    return (aclFloat16)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
  int32_t e = (int32_t)exp - 127 + 15;
  if (e >= 0x1f) return (aclFloat16)(sign | 0x7c00u); /* overflow: inf */
  if (e <= 0) {                                        /* subnormal or zero */
    if (e < -10) return sign;
    man |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) half++;
    return (aclFloat16)(sign | half);
  }
  uint32_t half = ((uint32_t)e << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++; /* may carry into the exponent: right */
  return (aclFloat16)(sign | half);
}
