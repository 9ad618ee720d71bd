/*
 * Isend/Irecv storms between every pair of ranks, K messages per pair per round, sizes up to
 * 4 KiB, every message content-checked. Each round completes its requests another way:
 * MPI_Waitall, MPI_Waitany, MPI_Testsome, MPI_Waitsome, persistent requests (MPI_Startall), and
 * MPI_ANY_SOURCE receives identified by their status.
 */
#include "mpi_test.h"

#define K 16
#define MAXMSG 4097

/* 0..4096 bytes, or less when rdmx carries less (UD: one packet). */
static int maxmsg = MAXMSG;
static size_t msg_size(int src, int dst, int k, int round) {
  return (size_t)((src * 7 + dst * 13 + k * 37 + round * 101) % maxmsg);
}
static uint32_t msg_seed(int src, int dst, int k, int round) {
  return (uint32_t)(src * 1000003 + dst * 7919 + k * 31 + round * 104729);
}

enum { R_WAITALL, R_WAITANY, R_TESTSOME, R_WAITSOME, R_PERSISTENT, R_ANYSOURCE, ROUNDS };
static const char* const round_name[ROUNDS] = {"waitall",  "waitany",    "testsome",
                                               "waitsome", "persistent", "any-source"};

int main(int argc, char** argv) {
  const int n = 2 * K * 64; /* enough request slots for 64 ranks */
  MPI_Request* reqs;
  MPI_Status* sts;
  unsigned char** sbuf;
  unsigned char** rbuf;
  int round, p, k, i;
  t_init(&argc, &argv, "mpi_storm");
  CHECK(t_size <= 64, "at most 64 ranks");
  if (t_size >= 2 && t_message_limit() < (size_t)MAXMSG) {
    maxmsg = (int)t_message_limit() + 1;
  }
  reqs = malloc(sizeof(MPI_Request) * (size_t)n);
  sts = malloc(sizeof(MPI_Status) * (size_t)n);
  sbuf = calloc((size_t)n, sizeof(*sbuf));
  rbuf = calloc((size_t)n, sizeof(*rbuf));
  CHECK(reqs && sts && sbuf && rbuf, "malloc");
  for (i = 0; i < n; ++i) {
    sbuf[i] = malloc(MAXMSG);
    rbuf[i] = malloc(MAXMSG);
    CHECK(sbuf[i] && rbuf[i], "malloc");
  }

  for (round = 0; round < ROUNDS; ++round) {
    int nr = 0, ns, total, done = 0;
    /* Receives first for half the rounds (expected path), after the sends for the others
     * (unexpected path). */
    const int recv_first = round % 2 == 0;
    int phase;
    t_phase(round_name[round]);
    for (phase = 0; phase < 2; ++phase) {
      if ((phase == 0) == recv_first) {
        for (p = 0; p < t_size; ++p) {
          if (p == t_rank) continue;
          for (k = 0; k < K; ++k) {
            const int src = round == R_ANYSOURCE ? MPI_ANY_SOURCE : p;
            memset(rbuf[nr], 0xee, MAXMSG);
            if (round == R_PERSISTENT) {
              CHECK_MPI(
                  MPI_Recv_init(rbuf[nr], MAXMSG, MPI_BYTE, src, k, MPI_COMM_WORLD, &reqs[nr]));
            } else {
              CHECK_MPI(MPI_Irecv(rbuf[nr], MAXMSG, MPI_BYTE, src, k, MPI_COMM_WORLD, &reqs[nr]));
            }
            ++nr;
          }
        }
      } else {
        ns = 0;
        for (p = 0; p < t_size; ++p) {
          if (p == t_rank) continue;
          for (k = 0; k < K; ++k) {
            const int slot = K * 64 + ns;
            const size_t sz = msg_size(t_rank, p, k, round);
            t_fill(sbuf[slot], sz, msg_seed(t_rank, p, k, round));
            if (round == R_PERSISTENT) {
              CHECK_MPI(
                  MPI_Send_init(sbuf[slot], (int)sz, MPI_BYTE, p, k, MPI_COMM_WORLD, &reqs[slot]));
            } else {
              CHECK_MPI(
                  MPI_Isend(sbuf[slot], (int)sz, MPI_BYTE, p, k, MPI_COMM_WORLD, &reqs[slot]));
            }
            ++ns;
          }
        }
      }
    }
    ns = (t_size - 1) * K;
    /* Pack the send requests right after the receives. */
    for (i = 0; i < ns; ++i) {
      reqs[nr + i] = reqs[K * 64 + i];
    }
    total = nr + ns;
    if (round == R_PERSISTENT) {
      CHECK_MPI(MPI_Startall(total, reqs));
    }

    switch (round) {
      case R_WAITALL:
      case R_PERSISTENT:
      case R_ANYSOURCE:
        CHECK_MPI(MPI_Waitall(total, reqs, sts));
        break;
      case R_WAITANY:
        while (done < total) {
          int idx = MPI_UNDEFINED;
          MPI_Status st;
          CHECK_MPI(MPI_Waitany(total, reqs, &idx, &st));
          CHECK(idx != MPI_UNDEFINED, "Waitany: nothing left after %d of %d", done, total);
          sts[idx] = st;
          ++done;
        }
        break;
      case R_TESTSOME:
      case R_WAITSOME:
        while (done < total) {
          int outcount = 0, *out = malloc(sizeof(int) * (size_t)total);
          MPI_Status* ost = malloc(sizeof(MPI_Status) * (size_t)total);
          CHECK(out && ost, "malloc");
          if (round == R_TESTSOME) {
            CHECK_MPI(MPI_Testsome(total, reqs, &outcount, out, ost));
          } else {
            CHECK_MPI(MPI_Waitsome(total, reqs, &outcount, out, ost));
            CHECK(outcount > 0, "Waitsome returned %d", outcount);
          }
          CHECK(outcount != MPI_UNDEFINED, "Testsome: no active requests at %d of %d", done, total);
          for (i = 0; i < outcount; ++i) {
            sts[out[i]] = ost[i];
          }
          done += outcount;
          free(out);
          free(ost);
        }
        break;
      default:
        break;
    }

    /* Check every receive. */
    for (i = 0; i < nr; ++i) {
      const int src = sts[i].MPI_SOURCE, tag = sts[i].MPI_TAG;
      int count = -1;
      size_t expect;
      MPI_Get_count(&sts[i], MPI_BYTE, &count);
      CHECK(src >= 0 && src < t_size && src != t_rank, "round %s: bad source %d", round_name[round],
            src);
      CHECK(tag >= 0 && tag < K, "round %s: bad tag %d", round_name[round], tag);
      if (round != R_ANYSOURCE) {
        CHECK(tag == i % K, "round %s: receive %d got tag %d", round_name[round], i, tag);
      }
      expect = msg_size(src, t_rank, tag, round);
      CHECK(count == (int)expect, "round %s: from %d tag %d: %d bytes, expected %zu",
            round_name[round], src, tag, count, expect);
      CHECK_DATA(rbuf[i], expect, msg_seed(src, t_rank, tag, round));
    }
    if (round == R_PERSISTENT) {
      for (i = 0; i < total; ++i) {
        CHECK_MPI(MPI_Request_free(&reqs[i]));
      }
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (t_rank == 0) {
      printf("note: round %s ok\n", round_name[round]);
      fflush(stdout);
    }
  }

  for (i = 0; i < n; ++i) {
    free(sbuf[i]);
    free(rbuf[i]);
  }
  free(sbuf);
  free(rbuf);
  free(reqs);
  free(sts);
  return t_done();
}
