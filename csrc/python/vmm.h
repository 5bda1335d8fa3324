/* The virtual-memory functions of ascend_ipc._C (vmm.c), added to the module at exec. */
#ifndef ASCEND_IPC_PYTHON_VMM_H_
#define ASCEND_IPC_PYTHON_VMM_H_

#include "module.h"

extern PyMethodDef aipc_py_vmm_functions[];

#endif
