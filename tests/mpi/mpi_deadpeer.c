/*
 * A peer that dies: the survivor's pending requests to it must fail within a bounded time
 * instead of hanging. Rank 1 kills itself (SIGKILL: no MPI_Finalize, no goodbye) once connected;
 * rank 0 then posts a receive from it, eager sends and a synchronous send to it and checks
 * that the Issend and the Irecv complete with an error (MPI_ERRORS_RETURN) and nothing is still
 * pending after RDMX_DEADPEER_BOUND seconds
 * (default 90; the transport's peer timeout is set lower by the test). A message rank 1 sent
 * before dying, received only once its death is known (its sends failed), must still arrive
 * whole: dead means nothing more comes, not that what came is lost. Run with mpirun options
 * that let the job go on after a rank dies (tests/mpi/CMakeLists.txt). Rank 0 prints
 * "PASS mpi_deadpeer ..." and leaves with _exit(0): MPI_Finalize would wait for the dead rank.
 *
 * `mpi_deadpeer recv`: the receive-only variant. Rank 0 sends nothing to rank 1 after its death
 * (everything sent before is acknowledged first), so only rdmx's liveness probes can find it:
 * rank 0 waits in MPI_Recv from rank 1 with an MPI_ANY_SOURCE Irecv posted, and both must fail
 * within the bound; then MPI_Probe from rank 1, MPI_Probe and MPI_Recv from MPI_ANY_SOURCE must
 * fail at once (the MTL's MPI_ANY_SOURCE rule, plugin/ompi/mtl_rdmx_failure.c).
 *
 * `mpi_deadpeer never`: rank 1 dies before any message between the two; rank 0's MPI_Recv from
 * it must still fail within the bound (the MTL connects to a source on the first receive, and
 * the unanswered connection fails the peer).
 *
 * `mpi_deadpeer mid`: rank 1 starts an 8 MiB MPI_Isend (rendezvous: its request-to-send leaves,
 * the data waits for the receiver) and dies; rank 0's matching MPI_Recv, and a second one after
 * it, must fail within the bound, not complete with the bytes half there.
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NSENDS 32

static const int kLastWord = 0x1a57; /* rank 1's message before it dies */

static void fail(const char* what) {
  fprintf(stderr, "mpi_deadpeer: FAIL: %s\n", what);
  fflush(stderr);
  _exit(1);
}

static const char* err_text(int rc, char* buf) {
  int n = 0;
  MPI_Error_string(rc, buf, &n);
  return buf;
}

/* Progresses (MPI_Iprobe) for `seconds`: what this rank sent is acknowledged by then. */
static void progress_for(double seconds) {
  const double t0 = MPI_Wtime();
  int flag = 0;
  while (MPI_Wtime() - t0 < seconds) {
    (void)MPI_Iprobe(MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    usleep(1000);
  }
}

static void recv_only(int rank, double bound) {
  MPI_Request any, alone_any;
  MPI_Status st;
  MPI_Comm alone; /* each rank by itself: a communicator without the rank that dies */
  int inbox = 0, anybox = 0, alone_box = 0, flag = 0, rc;
  const int word = 0x5e1f;
  double t0, detect, any_done;
  char text[MPI_MAX_ERROR_STRING];
  if (MPI_SUCCESS != MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &alone)) {
    fail("MPI_Comm_split");
  }
  progress_for(2.0); /* both ways: nothing of rank 0's is left unacknowledged */
  if (rank == 1) {
    raise(SIGKILL);
  }
  t0 = MPI_Wtime();
  if (MPI_SUCCESS != MPI_Irecv(&alone_box, 1, MPI_INT, MPI_ANY_SOURCE, 7, alone, &alone_any)) {
    fail("posting the MPI_ANY_SOURCE Irecv of the communicator without the dead rank");
  }
  if (MPI_SUCCESS != MPI_Irecv(&anybox, 1, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &any)) {
    fail("posting the MPI_ANY_SOURCE Irecv");
  }
  rc = MPI_Recv(&inbox, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, &st);
  detect = MPI_Wtime() - t0;
  if (rc == MPI_SUCCESS) {
    fail("MPI_Recv from a dead rank reported success (it never sent)");
  }
  printf("mpi_deadpeer: MPI_Recv from the dead rank failed after %.1f s: %s\n", detect,
         err_text(rc, text));
  if (detect > bound) {
    fail("MPI_Recv from a dead rank took longer than the bound");
  }
  /* The MPI_ANY_SOURCE receive of a communicator with the dead rank fails too. */
  do {
    rc = MPI_Test(&any, &flag, &st);
    if (MPI_Wtime() - t0 > bound) {
      fail("an MPI_ANY_SOURCE Irecv in a communicator with a dead rank still pending");
    }
  } while (!flag && rc == MPI_SUCCESS);
  any_done = MPI_Wtime() - t0;
  if (rc == MPI_SUCCESS) {
    fail("an MPI_ANY_SOURCE Irecv reported success (nobody sent)");
  }
  printf("mpi_deadpeer: the MPI_ANY_SOURCE Irecv failed after %.1f s\n", any_done);
  /* The one of a communicator without the dead rank is still posted, and takes its message. */
  if (MPI_SUCCESS != MPI_Test(&alone_any, &flag, &st) || flag) {
    fail("an MPI_ANY_SOURCE Irecv of a communicator without the dead rank completed");
  }
  if (MPI_SUCCESS != MPI_Send(&word, 1, MPI_INT, 0, 7, alone) ||
      MPI_SUCCESS != MPI_Wait(&alone_any, &st) || alone_box != word) {
    fail("an MPI_ANY_SOURCE Irecv of a communicator without the dead rank lost its message");
  }
  t0 = MPI_Wtime();
  if (MPI_SUCCESS == MPI_Probe(1, 8, MPI_COMM_WORLD, &st)) {
    fail("MPI_Probe from a dead rank reported success");
  }
  if (MPI_SUCCESS == MPI_Probe(MPI_ANY_SOURCE, 8, MPI_COMM_WORLD, &st)) {
    fail("MPI_Probe(MPI_ANY_SOURCE) in a communicator with a dead rank reported success");
  }
  if (MPI_SUCCESS == MPI_Recv(&inbox, 1, MPI_INT, MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &st)) {
    fail("MPI_Recv(MPI_ANY_SOURCE) in a communicator with a dead rank reported success");
  }
  if (MPI_Wtime() - t0 > 5.0) {
    fail("probes and receives with a rank known dead took more than 5 s to fail");
  }
  printf("PASS mpi_deadpeer recv-only (np 2), detected after %.1f s\n", detect);
  fflush(stdout);
  _exit(0);
}

static void mid_transfer(int rank, double bound) {
  enum { kBytes = 8 << 20 };
  char* buf = malloc(kBytes);
  MPI_Request r;
  int rc, inbox = 0;
  double t0;
  char text[MPI_MAX_ERROR_STRING];
  if (buf == NULL) {
    fail("malloc");
  }
  memset(buf, 0x5a, kBytes);
  if (rank == 1) {
    (void)MPI_Isend(buf, kBytes, MPI_BYTE, 0, 6, MPI_COMM_WORLD, &r);
    progress_for(0.2); /* the RTS is on its way */
    raise(SIGKILL);
  }
  sleep(1); /* rank 1 is gone by now, its RTS here */
  memset(buf, 0, kBytes);
  t0 = MPI_Wtime();
  rc = MPI_Recv(buf, kBytes, MPI_BYTE, 1, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (rc == MPI_SUCCESS) {
    fail("a rendezvous MPI_Recv from a sender that died before sending its data succeeded");
  }
  printf(
      "mpi_deadpeer: a rendezvous receive from a sender dead mid-transfer failed after %.1f s: "
      "%s\n",
      MPI_Wtime() - t0, err_text(rc, text));
  if (MPI_SUCCESS == MPI_Recv(&inbox, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE)) {
    fail("a receive from the dead rank succeeded");
  }
  if (MPI_Wtime() - t0 > bound) {
    fail("receives from a sender dead mid-transfer took longer than the bound");
  }
  printf("PASS mpi_deadpeer mid-transfer (np 2)\n");
  fflush(stdout);
  _exit(0);
}

static void never_connected(int rank, double bound) {
  int inbox = 0, rc;
  double t0;
  char text[MPI_MAX_ERROR_STRING];
  if (rank == 1) {
    raise(SIGKILL);
  }
  sleep(1); /* rank 1 is gone by now */
  t0 = MPI_Wtime();
  rc = MPI_Recv(&inbox, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (rc == MPI_SUCCESS) {
    fail("MPI_Recv from a dead rank reported success (it never sent)");
  }
  printf("mpi_deadpeer: MPI_Recv from a dead rank never connected failed after %.1f s: %s\n",
         MPI_Wtime() - t0, err_text(rc, text));
  if (MPI_Wtime() - t0 > bound) {
    fail("MPI_Recv from a dead rank never connected took longer than the bound");
  }
  printf("PASS mpi_deadpeer never-connected (np 2)\n");
  fflush(stdout);
  _exit(0);
}

int main(int argc, char** argv) {
  static char payload[NSENDS][256]; /* eager on rc and on ud (one packet) */
  MPI_Request req[NSENDS + 2];      /* sends, Issend, Irecv */
  int done[NSENDS + 2];
  int errors[NSENDS + 2];
  int inbox = 0;
  int rank, size, i, ping = 0, left, failed = 0;
  double t0, bound;
  char text[MPI_MAX_ERROR_STRING];
  const char* env = getenv("RDMX_DEADPEER_BOUND");
  bound = env != NULL ? atof(env) : 90.0;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  alarm((unsigned)bound + 60); /* whatever happens, never hang the test */
  if (size != 2) {
    fail("run with -np 2");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (argc > 1 && 0 == strcmp(argv[1], "never")) {
    never_connected(rank, bound);
  }
  /* The last word: sent before the ping, so in order it is here once the ping is. */
  if (argc == 1 && rank == 1 &&
      MPI_SUCCESS != MPI_Send(&kLastWord, 1, MPI_INT, 0, 10, MPI_COMM_WORLD)) {
    fail("sending the last word before the death");
  }
  /* Connected both ways before the death. */
  if (MPI_SUCCESS != MPI_Sendrecv_replace(&ping, 1, MPI_INT, 1 - rank, 1, 1 - rank, 1,
                                          MPI_COMM_WORLD, MPI_STATUS_IGNORE)) {
    fail("ping before the death");
  }
  if (MPI_SUCCESS != MPI_Barrier(MPI_COMM_WORLD)) {
    fail("barrier before the death");
  }
  if (argc > 1 && 0 == strcmp(argv[1], "recv")) {
    recv_only(rank, bound);
  }
  if (argc > 1 && 0 == strcmp(argv[1], "mid")) {
    mid_transfer(rank, bound);
  }
  if (rank == 1) {
    raise(SIGKILL);
  }
  sleep(1); /* rank 1 is gone by now */

  t0 = MPI_Wtime();
  errors[NSENDS + 1] = MPI_Irecv(&inbox, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, &req[NSENDS + 1]);
  done[NSENDS + 1] = errors[NSENDS + 1] != MPI_SUCCESS;
  for (i = 0; i < NSENDS; ++i) {
    memset(payload[i], i, sizeof(payload[i]));
    errors[i] =
        MPI_Isend(payload[i], (int)sizeof(payload[i]), MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[i]);
    done[i] = errors[i] != MPI_SUCCESS;
  }
  errors[NSENDS] = MPI_Issend(&ping, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, &req[NSENDS]);
  done[NSENDS] = errors[NSENDS] != MPI_SUCCESS;
  do {
    left = 0;
    for (i = 0; i <= NSENDS + 1; ++i) {
      int flag = 0;
      MPI_Status st;
      if (done[i]) {
        continue;
      }
      errors[i] = MPI_Test(&req[i], &flag, &st);
      if (flag || errors[i] != MPI_SUCCESS) {
        done[i] = 1;
      } else {
        ++left;
      }
    }
    if (left > 0 && MPI_Wtime() - t0 > bound) {
      fprintf(stderr,
              "mpi_deadpeer: %d of %d requests to the dead rank still pending after %.0f s\n", left,
              NSENDS + 2, bound);
      fail("pending requests to a dead peer hang");
    }
  } while (left > 0);
  for (i = 0; i <= NSENDS + 1; ++i) {
    failed += errors[i] != MPI_SUCCESS;
  }
  printf("mpi_deadpeer: %d of %d requests with the dead rank failed after %.1f s (Issend: %s)\n",
         failed, NSENDS + 2, MPI_Wtime() - t0,
         errors[NSENDS] != MPI_SUCCESS ? err_text(errors[NSENDS], text) : "succeeded");
  if (errors[NSENDS] == MPI_SUCCESS) {
    fail("an Issend to a dead rank reported success (nobody matched it)");
  }
  if (errors[NSENDS + 1] == MPI_SUCCESS) {
    fail("an Irecv from a dead rank reported success (it never sent)");
  }
  /* Once the peer is known dead, a new send fails at once. */
  t0 = MPI_Wtime();
  if (MPI_SUCCESS == MPI_Send(&ping, 1, MPI_INT, 1, 4, MPI_COMM_WORLD)) {
    fail("MPI_Send to a rank known dead reported success");
  }
  if (MPI_SUCCESS == MPI_Recv(&inbox, 1, MPI_INT, 1, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE)) {
    fail("MPI_Recv from a rank known dead reported success");
  }
  if (MPI_Wtime() - t0 > 5.0) {
    fail("MPI_Send / MPI_Recv with a rank known dead took more than 5 s to fail");
  }
  inbox = 0;
  if (MPI_SUCCESS != MPI_Recv(&inbox, 1, MPI_INT, 1, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE) ||
      inbox != kLastWord) {
    fail("a message the rank sent before dying was lost once its death was known");
  }
  printf("PASS mpi_deadpeer (np 2)\n");
  fflush(stdout);
  _exit(0);
}
