/*
 * Where the importer maps a granted allocation (mapper.c).
 *
 * Unmapping a range whose page tables nothing else uses frees them, and
 * the kernel then flushes the TLB of every CPU the process last ran on,
 * idle ones included (an interrupt each: tens of microseconds on a virtual
 * machine); the next import's first touch allocates them again. A large
 * import (whose first page sits alone in its 2 MiB of address space) paid
 * that at every close. So memory imports go just above an anchor: one page
 * of PROT_NONE address space kept for the runtime's life, in the same 2 MiB
 * and 1 GiB of address space as the import's first page, whose page tables
 * then outlive the import. An import of 2 MiB or more goes on the 2 MiB
 * boundary above the anchor's, shifted by its file offset's place in 2 MiB,
 * so that the allocation's huge pages (transparent, or hugetlbfs) map
 * whole, one fault and one page-table entry per 2 MiB. Each anchor holds
 * one import at a time; when none is free (or something else took the
 * space above one), the kernel chooses the range, and the 2 MiB placement
 * is kept there too.
 * What an import can reach does not change: exactly the granted range, and
 * nothing once it is unmapped. State private to mapper.c, lock-free.
 */
#ifndef ASCEND_IPC_EMU_IPC_MAPPER_H_
#define ASCEND_IPC_EMU_IPC_MAPPER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Maps size bytes of fd at offset, shared, read-write; above an anchor
 * when anchored and one is free. The mapping, or NULL with errno. */
void *aipc__mapper_map(int fd, uint64_t offset, size_t size, bool anchored);
/* Unmaps what aipc__mapper_map returned, and frees its anchor. */
void aipc__mapper_unmap(void *p, size_t size);
/* aclFinalize, after every import is unmapped: gives the anchors back. */
void aipc__mapper_finalize(void);
/* A forked child forgets the anchors: like its parent's imports, they stay
 * mapped in it, untracked, and it makes its own when it imports. */
void aipc__mapper_atfork_child(void);

#endif
