/* Element types a DeviceArray can hold, and their DLPack codes. */
#ifndef ASCEND_IPC_PYTHON_DTYPE_H_
#define ASCEND_IPC_PYTHON_DTYPE_H_

#include "module.h" /* Python.h first: it sets the feature macros */
#include "dlpack_abi.h"

/* A new reference to the dtype obj names (anything numpy.dtype() accepts),
 * or NULL with TypeError if it is not one of: bool, int8..int64,
 * uint8..uint64, float16/32/64, complex64/128; ValueError if its byte order
 * is not the machine's. */
PyArray_Descr *aipc_py_dtype_converter(PyObject *obj);

/* 1 if d is one of the supported types (any byte order), else 0. */
int aipc_py_dtype_supported(PyArray_Descr *d);

/* d's DLPack type; d must be supported. */
aipc_DLDataType aipc_py_dtype_dlpack(PyArray_Descr *d);

#endif
