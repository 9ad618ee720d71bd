/*
 * Host unit test of plugin/ompi/mtl_rdmx_tag.h: for every combination of message (context id,
 * source rank, tag, including Open MPI's negative internal tags) and receive (context id,
 * source or MPI_ANY_SOURCE, tag or MPI_ANY_TAG), rdmx's rule
 *   (msg.tag & mask) == (recv.tag & mask)
 * must agree with MPI's matching rule, and a received tag must decode to the sender's rank and
 * MPI tag. (rdmx also matches the source on the worker uid; the tag's source bits agree.)
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "mtl_rdmx_tag.h"

static int failures = 0;

#define EXPECT(cond, ...)                                    \
  do {                                                       \
    if (!(cond)) {                                           \
      if (failures++ < 20) {                                 \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                        \
        fprintf(stderr, "\n");                               \
      }                                                      \
    }                                                        \
  } while (0)

static int mpi_matches(uint32_t mcid, int msrc, int mtag, uint32_t rcid, int rsrc, int rtag) {
  if (mcid != rcid) return 0;
  if (rsrc != MPI_ANY_SOURCE && rsrc != msrc) return 0;
  if (rtag == MPI_ANY_TAG) return mtag >= 0; /* wildcards never see internal tags */
  return rtag == mtag;
}

int main(void) {
  const uint32_t cids[] = {0, 1, 2, 3, 1000, MTL_RDMX_MAX_CONTEXTID - 1, MTL_RDMX_MAX_CONTEXTID};
  const int srcs[] = {0, 1, 2, 7, 4095, MTL_RDMX_MAX_COMM_SIZE - 2, MTL_RDMX_MAX_COMM_SIZE - 1};
  /* user tags, then Open MPI internal (negative) ones: coll_tags.h runs from -10 downwards */
  const int tags[] = {0,       1,   2,   7,   32767,  65536,       INT_MAX - 1,
                      INT_MAX, -10, -11, -27, -32767, INT_MIN + 1, INT_MIN};
  const size_t nc = sizeof(cids) / sizeof(cids[0]);
  const size_t ns = sizeof(srcs) / sizeof(srcs[0]);
  const size_t nt = sizeof(tags) / sizeof(tags[0]);
  size_t a, b, c, d, e, f;
  long checked = 0;

  for (a = 0; a < nc; ++a) {
    for (b = 0; b < ns; ++b) {
      for (c = 0; c < nt; ++c) {
        const uint64_t t = mtl_rdmx_send_tag(cids[a], srcs[b], tags[c]);
        EXPECT(mtl_rdmx_tag_source(t) == srcs[b], "source %d decoded as %d", srcs[b],
               mtl_rdmx_tag_source(t));
        EXPECT(mtl_rdmx_tag_mpi_tag(t) == tags[c], "tag %d decoded as %d", tags[c],
               mtl_rdmx_tag_mpi_tag(t));
        EXPECT(mtl_rdmx_tag_context_id(t) == cids[a], "cid %u decoded as %u", cids[a],
               mtl_rdmx_tag_context_id(t));
        for (d = 0; d < nc; ++d) {
          for (e = 0; e <= ns; ++e) {
            const int rsrc = e == ns ? MPI_ANY_SOURCE : srcs[e];
            for (f = 0; f <= nt; ++f) {
              const int rtag = f == nt ? MPI_ANY_TAG : tags[f];
              uint64_t match, mask;
              int got, want;
              uint64_t comm_tag, comm_mask;
              mtl_rdmx_recv_tag(cids[d], rsrc, rtag, &match, &mask);
              /* The receive is picked by its own communicator's tag, never another's. */
              mtl_rdmx_comm_tag(cids[a], &comm_tag, &comm_mask);
              EXPECT((((match ^ comm_tag) & comm_mask) == 0) == (cids[a] == cids[d]),
                     "recv (cid %u, src %d, tag %d) %s by communicator %u's tag", cids[d], rsrc,
                     rtag, cids[a] == cids[d] ? "not picked" : "picked", cids[a]);
              got = (t & mask) == (match & mask);
              want = mpi_matches(cids[a], srcs[b], tags[c], cids[d], rsrc, rtag);
              EXPECT(got == want,
                     "msg (cid %u, src %d, tag %d) vs recv (cid %u, src %d, tag %d): rdmx %s, "
                     "MPI %s",
                     cids[a], srcs[b], tags[c], cids[d], rsrc, rtag, got ? "matches" : "no",
                     want ? "matches" : "no");
              ++checked;
            }
          }
        }
      }
    }
  }
  if (failures != 0) {
    fprintf(stderr, "%d of %ld combinations wrong\n", failures, checked);
    return 1;
  }
  printf("tag layout: %ld combinations agree with MPI matching\n", checked);
  return 0;
}
