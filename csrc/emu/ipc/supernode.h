/*
 * The emulated super-node (docs/design-ipc.md, "Super-node"): a server is a
 * network namespace, the servers of one super-node share the PID namespace
 * and meet in one rendezvous directory of filesystem Unix sockets
 * (ASCEND_IPC_SUPERNODE_DIR), which crosses network namespaces but not
 * users. This file owns this process's server id (sdid), the directory and
 * its checks, and the registry of explicitly set sdids kept there.
 * Thread-safe; its lock is taken inside each call and calls nothing that
 * takes another lock.
 */
#ifndef ASCEND_IPC_EMU_IPC_SUPERNODE_H_
#define ASCEND_IPC_EMU_IPC_SUPERNODE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "acl/acl.h"

/* The inode of the host's initial network namespace (fixed by the kernel). */
#define AIPC_INIT_NET_INO 4026531833u

/* This process's server: ASCEND_IPC_SDID when set, else derived from its
 * network namespace (0 for the host's initial one, else the namespace's
 * inode number, unique among live namespaces). Read at the first call; a
 * forked child reads it again (it may have entered another namespace). */
uint32_t aipc__server_sdid(void);
/* The inode of this process's network namespace, 0 if unknown. */
uint64_t aipc__server_netns(void);

/* Opens (creating it 0700) and checks the rendezvous directory, reads (or
 * creates) the super-node's id there and registers this process's sdid
 * when ASCEND_IPC_SDID set it. Once per process; every later call returns
 * the first answer. ACL_SUCCESS, or a recorded ACL_ERROR_RT_NO_PERMISSION
 * (a directory of another user, a symlink, group- or world-writable) or
 * ACL_ERROR_RT_IPC_ERROR. */
aclError aipc__supernode_join(const char *call);
/* The super-node's id (after a successful join; 0 before). */
uint64_t aipc__supernode_id(void);
/* Writes the address of exporter (pid, nonce)'s socket in the directory to
 * sun (a struct sockaddr_un) and returns its length; 0 when the path does
 * not fit. */
unsigned aipc__supernode_sockaddr(void *sun, uint32_t pid, uint64_t nonce);
/* The server of process pid, by the kernel's word: its network namespace,
 * mapped to the sdid registered for it (by a live process) or else the
 * derived one. *same: it is this process's namespace. 0, or -1 (its
 * namespace cannot be read: gone, or not ours to read). */
int aipc__supernode_peer(pid_t pid, uint32_t *sdid, bool *same);

/* For `python -m ascend_ipc doctor`: this process's server, directory, the
 * super-node's id (0 when the directory cannot be used: *why says why, else
 * "") and network namespace inode. */
void aipc__supernode_info(uint32_t *sdid, char *dir, size_t dir_cap, uint64_t *id, uint64_t *netns, char *why,
                          size_t why_cap);

void aipc__supernode_atfork_prepare(void);
void aipc__supernode_atfork_parent(void);
void aipc__supernode_atfork_child(void);

#endif
