/*
 * ascend_ipc: CANN's external allocator interface (acl_rt_allocator.h).
 *
 * A program describes its own memory allocator (an object and four
 * functions) and registers it for a stream; the runtime keeps a copy per
 * stream and hands it back (aclrtAllocatorGetByStream) to whoever allocates
 * workspace for work on that stream. The names and types are CANN's ABI.
 */
#ifndef ASCEND_IPC_ACL_RT_ALLOCATOR_H_
#define ASCEND_IPC_ACL_RT_ALLOCATOR_H_

#include "acl_base.h"
#include "acl_rt.h" /* aclrtStream */

#ifdef __cplusplus
extern "C" {
#endif

typedef void *aclrtAllocatorDesc;  /* a description being filled in */
typedef void *aclrtAllocator;      /* the program's allocator object */
typedef void *aclrtAllocatorBlock; /* a block its functions hand out */
typedef void *aclrtAllocatorAddr;  /* an address hint for the advise function */

typedef void *(*aclrtAllocatorAllocFunc)(aclrtAllocator allocator, size_t size);
typedef void (*aclrtAllocatorFreeFunc)(aclrtAllocator allocator, aclrtAllocatorBlock block);
typedef void *(*aclrtAllocatorAllocAdviseFunc)(aclrtAllocator allocator, size_t size, aclrtAllocatorAddr addr);
typedef void *(*aclrtAllocatorGetAddrFromBlockFunc)(aclrtAllocatorBlock block);

/* A new, empty description; NULL when out of memory. */
ACL_FUNC_VISIBILITY aclrtAllocatorDesc aclrtAllocatorCreateDesc(void);
ACL_FUNC_VISIBILITY aclError aclrtAllocatorDestroyDesc(aclrtAllocatorDesc allocatorDesc);
ACL_FUNC_VISIBILITY aclError aclrtAllocatorSetObjToDesc(aclrtAllocatorDesc allocatorDesc, aclrtAllocator allocator);
ACL_FUNC_VISIBILITY aclError aclrtAllocatorSetAllocFuncToDesc(aclrtAllocatorDesc allocatorDesc,
                                                              aclrtAllocatorAllocFunc func);
ACL_FUNC_VISIBILITY aclError aclrtAllocatorSetFreeFuncToDesc(aclrtAllocatorDesc allocatorDesc,
                                                             aclrtAllocatorFreeFunc func);
ACL_FUNC_VISIBILITY aclError aclrtAllocatorSetAllocAdviseFuncToDesc(aclrtAllocatorDesc allocatorDesc,
                                                                    aclrtAllocatorAllocAdviseFunc func);
ACL_FUNC_VISIBILITY aclError aclrtAllocatorSetGetAddrFromBlockFuncToDesc(aclrtAllocatorDesc allocatorDesc,
                                                                         aclrtAllocatorGetAddrFromBlockFunc func);
/* Registers a copy of the description for stream (not the default stream);
 * it needs an object and the alloc, free and get-address functions. */
ACL_FUNC_VISIBILITY aclError aclrtAllocatorRegister(aclrtStream stream, aclrtAllocatorDesc allocatorDesc);
/* What was registered for stream; any output but allocatorDesc may be NULL. */
ACL_FUNC_VISIBILITY aclError aclrtAllocatorGetByStream(aclrtStream stream, aclrtAllocatorDesc *allocatorDesc,
                                                       aclrtAllocator *allocator, aclrtAllocatorAllocFunc *allocFunc,
                                                       aclrtAllocatorFreeFunc *freeFunc,
                                                       aclrtAllocatorAllocAdviseFunc *allocAdviseFunc,
                                                       aclrtAllocatorGetAddrFromBlockFunc *getAddrFromBlockFunc);
ACL_FUNC_VISIBILITY aclError aclrtAllocatorUnregister(aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ASCEND_IPC_ACL_RT_ALLOCATOR_H_ */
