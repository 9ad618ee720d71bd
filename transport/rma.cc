// One-sided RDMA of the C API (rdmx_put, rdmx_get): an RDMA write or read between memory the
// caller registered in the worker's PD and a peer's, over an RC connection to the peer.
//
// They go where rendezvous writes go (the channel's write queue): in RC mode the large class's
// QP, so that small messages on the small class's QP never queue behind them; in UD mode the
// peer's on-demand RC write QP (ud_write_qp.cc), set up by the first put or get that needs it
// (RDMX_ERR_NO_RESOURCE until it is up, as for an RC connection still being set up). Each is one
// signalled work request of kind kRma whose descriptor cookie is its request: the completion,
// success or error, completes the request, and an error completion fails the connection as any RC
// send error does (send.cc). Teardown fails a request still posted (cancel_rma) and clears the
// cookie, so that the work request's flushed completion, polled while the QP drains, finds no
// request to complete. rdmx_tag_send_zcopy's SEND is of this kind too (rc_send.cc,
// post_rc_gather), on the QP of the receiver's size class: its completion and teardown are these.
#include "transport/channel/rc_channel.h"
#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

int Worker::rma(Peer& peer, bool get, void* buffer, std::size_t length, std::uint32_t lkey,
                std::uint64_t remote_addr, std::uint32_t rkey, Request* r, rdmx_callback_t callback,
                void* user_data) {
  if (r == nullptr || (buffer == nullptr && length != 0) || length > port_attr_.max_msg_sz) {
    return RDMX_ERR_INVALID_PARAM;
  }
  if (peer.shm.on()) {
    return RDMX_ERR_UNSUPPORTED;  // no RC connection to the peer's memory
  }
  if (peer.state == PeerState::kFailed) {
    return failed_code_ != 0 ? failed_code_ : RDMX_ERR_UNREACHABLE;
  }
  if (peer.state != PeerState::kConnected) {
    return RDMX_ERR_NO_RESOURCE;  // the handshake rdmx_ep_create started is still under way
  }
  eager::SendQueue* sq = nullptr;
  if (!ud_mode_) {
    if (!peer.rc_ready) {
      return RDMX_ERR_NO_RESOURCE;
    }
    sq = &peer.rc.sq[1];
  } else {
    // Connecting; or every write QP busy, or the peer at its own cap: one frees as transfers end.
    if (ud_write_connection(peer) != rendezvous::WriteConnection::kReady) {
      return RDMX_ERR_NO_RESOURCE;
    }
    sq = &peer.ud.wqp_sq;
  }
  ibv_sge sge{.addr = reinterpret_cast<std::uintptr_t>(buffer),
              .length = static_cast<std::uint32_t>(length),
              .lkey = lkey};
  ibv_send_wr wr{};
  wr.opcode = get ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = length != 0 ? 1 : 0;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  const int rc = sq->post(*tx_->send, wr,
                          eager::SendQueue::Post{.kind = protocol::WrKind::kRma,
                                                 .want_signal = true,
                                                 .peer = &peer,
                                                 .cookie = reinterpret_cast<std::uintptr_t>(r)});
  if (rc == EAGAIN) {
    return RDMX_ERR_NO_RESOURCE;
  }
  if (rc == ESHUTDOWN) {
    // RC: the connection failed and takes no more work. UD: the write QP failed and is being
    // retired; the next one is made on demand.
    return ud_mode_ ? RDMX_ERR_NO_RESOURCE : RDMX_ERR_UNREACHABLE;
  }
  if (rc != 0) {
    verbs::log_verb_failure("ibv_post_send", rc,
                            get ? "RDMA read (rdmx_get)" : "RDMA write (rdmx_put)");
    return RDMX_ERR_IO;
  }
  init_request(r, ReqType::kRma, callback, user_data);
  r->peer = &peer;
  r->status.length = length;
  r->status.source = peer.uid;
  r->rma_desc = protocol::decode(wr.wr_id).slot;
  activate(r);  // teardown fails it
  peer.send_epoch = progress_calls_;
  return RDMX_OK;
}

void Worker::on_rma_completion(Request* r, const ibv_wc& wc) {
  int code = RDMX_OK;
  if (wc.status == IBV_WC_WR_FLUSH_ERR) {
    code = RDMX_ERR_UNREACHABLE;  // behind another failure of the connection
  } else if (wc.status != IBV_WC_SUCCESS) {
    code = RDMX_ERR_IO;  // refused by either adapter (a key, an address, access rights)
  }
  complete(r, code);
}

void Worker::cancel_rma(Request* r) {
  threads_[r->thread].send->desc(r->rma_desc).cookie = 0;
  complete(r, RDMX_ERR_CANCELED);
}

}  // namespace rdmx::transport
