/* Element types a DeviceArray can hold, and their DLPack codes. */
#include "dtype.h"

int aipc_py_dtype_supported(PyArray_Descr *d) {
  switch (d->type_num) {
    case NPY_BOOL:
    case NPY_BYTE:
    case NPY_UBYTE:
    case NPY_SHORT:
    case NPY_USHORT:
    case NPY_INT:
    case NPY_UINT:
    case NPY_LONG:
    case NPY_ULONG:
    case NPY_LONGLONG:
    case NPY_ULONGLONG:
    case NPY_HALF:
    case NPY_FLOAT:
    case NPY_DOUBLE:
    case NPY_CFLOAT:
    case NPY_CDOUBLE:
      return 1;
    default:
      return 0;
  }
}

PyArray_Descr *aipc_py_dtype_converter(PyObject *obj) {
  PyArray_Descr *d = NULL;
  if (obj == NULL || obj == Py_None) {
    PyErr_SetString(PyExc_TypeError, "dtype must be given (e.g. 'float32' or numpy.float32), not None");
    return NULL;
  }
  if (!PyArray_DescrConverter(obj, &d)) {
    /* numpy says TypeError for names it does not know; keep its message. */
    return NULL;
  }
  if (!aipc_py_dtype_supported(d)) {
    PyErr_Format(PyExc_TypeError,
                 "dtype %R is not supported on device memory (supported: bool, int8, int16, int32, "
                 "int64, uint8, uint16, uint32, uint64, float16, float32, float64, complex64, "
                 "complex128; bfloat16 through ascend_ipc.torch)",
                 (PyObject *)d);
    Py_DECREF(d);
    return NULL;
  }
  if (!PyArray_ISNBO(d->byteorder)) {
    PyErr_Format(PyExc_ValueError,
                 "dtype %R is not in the machine's byte order; device memory holds native values",
                 (PyObject *)d);
    Py_DECREF(d);
    return NULL;
  }
  return d;
}

aipc_DLDataType aipc_py_dtype_dlpack(PyArray_Descr *d) {
  aipc_DLDataType t;
  t.lanes = 1;
  t.bits = (uint8_t)(PyDataType_ELSIZE(d) * 8);
  switch (d->kind) {
    case 'b':
      t.code = AIPC_DL_BOOL;
      break;
    case 'i':
      t.code = AIPC_DL_INT;
      break;
    case 'u':
      t.code = AIPC_DL_UINT;
      break;
    case 'f':
      t.code = AIPC_DL_FLOAT;
      break;
    default: /* 'c' */
      t.code = AIPC_DL_COMPLEX;
      break;
  }
  return t;
}
