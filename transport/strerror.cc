// rdmx_strerror: one static English sentence per code, naming the usual cause.
#include "rdmx/rdmx.h"

extern "C" const char* rdmx_strerror(int code) {
  switch (code) {
    case RDMX_OK:
      return "success";
    case RDMX_INPROGRESS:
      return "operation in progress (not complete yet)";
    case RDMX_ERR_INVALID_PARAM:
      return "invalid argument (a NULL pointer, a bad flag or an out-of-range value)";
    case RDMX_ERR_NO_MEMORY:
      return "out of memory or memory registration failed (check `ulimit -l`)";
    case RDMX_ERR_NO_DEVICE:
      return "no usable RDMA device, active port or GID (set RDMX_DEVICE, RDMX_PORT, "
             "RDMX_GID_INDEX)";
    case RDMX_ERR_UNSUPPORTED:
      return "not supported (by the device, the peer, or this version: e.g. a message above the "
             "eager limit before rendezvous exists)";
    case RDMX_ERR_TRUNCATED:
      return "message truncated: the receive buffer is shorter than the message "
             "(status.length holds the message length)";
    case RDMX_ERR_CANCELED:
      return "request cancelled";
    case RDMX_ERR_UNREACHABLE:
      return "peer unreachable: it stopped answering, failed, or the endpoint was destroyed";
    case RDMX_ERR_NO_RESOURCE:
      return "out of queue resources: progress the worker and retry";
    case RDMX_ERR_IO:
      return "an RDMA verbs operation failed (RDMX_VERBOSE=1 prints which)";
    case RDMX_ERR_BUSY:
      return "busy: the request is already matched or is a send";
    case RDMX_ERR_BAD_ADDRESS:
      return "malformed peer address, or one from an incompatible rdmx version or transport";
    case RDMX_ERR_TIMED_OUT:
      return "timed out";
    case RDMX_ERR_TOO_MANY_THREADS:
      return "a send from a thread past max_threads (raise RDMX_MAX_THREADS)";
    default:
      return "unknown rdmx error code";
  }
}
