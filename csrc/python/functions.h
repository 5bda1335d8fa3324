/* The module-level functions of ascend_ipc._C (functions.c). */
#ifndef ASCEND_IPC_PYTHON_FUNCTIONS_H_
#define ASCEND_IPC_PYTHON_FUNCTIONS_H_

#include "module.h"

/* The module's method table (PyModuleDef.m_methods). */
extern PyMethodDef aipc_py_module_functions[];

#endif
