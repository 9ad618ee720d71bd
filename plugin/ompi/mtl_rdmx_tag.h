/*
 * How an MPI (communicator, source rank, tag) triple maps onto rdmx's 64-bit tag and tag mask.
 *
 *    63            50 49                 32 31 30                          0
 *   +----------------+---------------------+--+-----------------------------+
 *   |   context id   |  sender's comm rank |S |       MPI tag, low 31       |
 *   |    14 bits     |       18 bits       |  |                             |
 *   +----------------+---------------------+--+-----------------------------+
 *                                          \_______ MPI tag: 32 bits, two's complement
 *
 * context id   comm->c_contextid. pml cm learns the limit from mtl_max_contextid and add_comm
 *              refuses a larger one, so communicators never alias.
 * comm rank    comm->c_my_rank of the SENDER (for an intercommunicator: its rank in its local
 *              group, which is the receiver's remote group). Only used to report MPI_SOURCE
 *              without a reverse lookup; matching on the source is done by rdmx itself, on the
 *              sending worker's uid (see mtl_rdmx_uid_of in mtl_rdmx.h).
 * MPI tag      all 32 bits of the int, so Open MPI's negative internal tags (collectives,
 *              coll/base/coll_tags.h) round-trip exactly; S is their sign bit.
 *
 * Matching: (msg.tag & mask) == (recv.tag & mask).
 *   context id   always in the mask.
 *   source       in the mask for a specific source (redundant with rdmx's uid match, kept as a
 *                cross-check), out of it for MPI_ANY_SOURCE.
 *   tag          specific tag: all 32 bits. MPI_ANY_TAG: only S, expected 0, so a wildcard
 *                receive matches every tag >= 0 and never an internal negative one (the same
 *                trick as mtl_ofi's mpi_tag_mask >> 1 and psm2's 0x80000000 tag selector).
 *
 * No protocol bits are needed: synchronous sends use RDMX_SEND_SYNC, rendezvous is rdmx's.
 */
#ifndef MTL_RDMX_TAG_H
#define MTL_RDMX_TAG_H

#include <limits.h>
#include <mpi.h>
#include <stdint.h>

#define MTL_RDMX_CID_BITS 14
#define MTL_RDMX_SOURCE_BITS 18
#define MTL_RDMX_TAG_BITS 32

#define MTL_RDMX_TAG_SHIFT 0
#define MTL_RDMX_SOURCE_SHIFT MTL_RDMX_TAG_BITS
#define MTL_RDMX_CID_SHIFT (MTL_RDMX_TAG_BITS + MTL_RDMX_SOURCE_BITS)

#define MTL_RDMX_TAG_MASK UINT64_C(0x00000000FFFFFFFF)
#define MTL_RDMX_TAG_SIGN UINT64_C(0x0000000080000000)
#define MTL_RDMX_SOURCE_MASK UINT64_C(0x0003FFFF00000000)
#define MTL_RDMX_CID_MASK UINT64_C(0xFFFC000000000000)

/* Largest context id and largest communicator (local or remote group) the layout can carry. */
#define MTL_RDMX_MAX_CONTEXTID ((1 << MTL_RDMX_CID_BITS) - 1)
#define MTL_RDMX_MAX_COMM_SIZE (1 << MTL_RDMX_SOURCE_BITS)
/* MPI_TAG_UB: every non-negative int fits. */
#define MTL_RDMX_MAX_TAG INT_MAX

_Static_assert(MTL_RDMX_CID_BITS + MTL_RDMX_SOURCE_BITS + MTL_RDMX_TAG_BITS == 64,
               "the three fields fill the 64-bit tag exactly");
_Static_assert((MTL_RDMX_CID_MASK & MTL_RDMX_SOURCE_MASK) == 0 &&
                   (MTL_RDMX_CID_MASK & MTL_RDMX_TAG_MASK) == 0 &&
                   (MTL_RDMX_SOURCE_MASK & MTL_RDMX_TAG_MASK) == 0,
               "fields do not overlap");
_Static_assert((MTL_RDMX_CID_MASK | MTL_RDMX_SOURCE_MASK | MTL_RDMX_TAG_MASK) == UINT64_MAX,
               "no unused bits");
_Static_assert(MTL_RDMX_SOURCE_MASK ==
                   (((UINT64_C(1) << MTL_RDMX_SOURCE_BITS) - 1) << MTL_RDMX_SOURCE_SHIFT),
               "source mask matches its shift and width");
_Static_assert(MTL_RDMX_CID_MASK == (UINT64_MAX << MTL_RDMX_CID_SHIFT),
               "context id mask matches its shift");
_Static_assert(MTL_RDMX_TAG_SIGN == (UINT64_C(1) << (MTL_RDMX_TAG_BITS - 1)) &&
                   (MTL_RDMX_TAG_SIGN & MTL_RDMX_TAG_MASK) == MTL_RDMX_TAG_SIGN,
               "S is the top bit of the tag field");
_Static_assert(sizeof(int) * CHAR_BIT == MTL_RDMX_TAG_BITS, "an MPI tag is a 32-bit int");
_Static_assert(MPI_ANY_TAG < 0 && MPI_ANY_SOURCE < 0,
               "wildcards are negative, never valid tags or ranks");

/* The tag a message is sent with. */
static inline uint64_t mtl_rdmx_send_tag(uint32_t context_id, int my_rank, int tag) {
  return ((uint64_t)context_id << MTL_RDMX_CID_SHIFT) |
         (((uint64_t)(uint32_t)my_rank << MTL_RDMX_SOURCE_SHIFT) & MTL_RDMX_SOURCE_MASK) |
         (uint64_t)(uint32_t)tag;
}

/* The tag and mask a receive or probe matches with. */
static inline void mtl_rdmx_recv_tag(uint32_t context_id, int source, int tag, uint64_t* match,
                                     uint64_t* mask) {
  uint64_t m = ((uint64_t)context_id << MTL_RDMX_CID_SHIFT);
  uint64_t k = MTL_RDMX_CID_MASK;
  if (source != MPI_ANY_SOURCE) {
    m |= ((uint64_t)(uint32_t)source << MTL_RDMX_SOURCE_SHIFT) & MTL_RDMX_SOURCE_MASK;
    k |= MTL_RDMX_SOURCE_MASK;
  }
  if (tag == MPI_ANY_TAG) {
    k |= MTL_RDMX_TAG_SIGN; /* S must be 0: user tags only */
  } else {
    m |= (uint64_t)(uint32_t)tag;
    k |= MTL_RDMX_TAG_MASK;
  }
  *match = m;
  *mask = k;
}

/* The tag and mask that pick every receive posted in a communicator, whatever its source and
 * tag: a receive's match agrees with tag in the bits of mask exactly when its context id is
 * context_id (rdmx_tag_recv_fail_any_source). */
static inline void mtl_rdmx_comm_tag(uint32_t context_id, uint64_t* tag, uint64_t* mask) {
  *tag = (uint64_t)context_id << MTL_RDMX_CID_SHIFT;
  *mask = MTL_RDMX_CID_MASK;
}

/* MPI_SOURCE and MPI_TAG of a received or probed message. */
static inline int mtl_rdmx_tag_source(uint64_t tag) {
  return (int)((tag & MTL_RDMX_SOURCE_MASK) >> MTL_RDMX_SOURCE_SHIFT);
}
static inline int mtl_rdmx_tag_mpi_tag(uint64_t tag) {
  return (int)(int32_t)(uint32_t)(tag & MTL_RDMX_TAG_MASK);
}
static inline uint32_t mtl_rdmx_tag_context_id(uint64_t tag) {
  return (uint32_t)(tag >> MTL_RDMX_CID_SHIFT);
}

#endif /* MTL_RDMX_TAG_H */
