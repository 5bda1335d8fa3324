/* ascend_ipc: umbrella header, as CANN programs include it. */
#ifndef ASCEND_IPC_ACL_H_
#define ASCEND_IPC_ACL_H_

#include "acl_base.h"
#include "acl_rt.h"

#endif /* ASCEND_IPC_ACL_H_ */
