// rdmx_lat: a quick ping-pong latency probe for experiments (not a test).
//   rdmx_lat [rc|ud] [size] [iterations] [device0] [device1]
// Forks two ranks, prints the median and mean half round trip and the worker stats.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/transport/support/procs.h"

using namespace rdmx::test;

int main(int argc, char** argv) {
  const rdmx_transport_t t =
      (argc > 1 && std::strcmp(argv[1], "ud") == 0) ? RDMX_TRANSPORT_UD : RDMX_TRANSPORT_RC;
  const std::size_t size = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 8;
  const int iters = argc > 3 ? std::atoi(argv[3]) : 1000;
  const std::string d0 = argc > 4 ? argv[4] : "";
  const std::string d1 = argc > 5 ? argv[5] : d0;
  const bool ok = run_ranks(2, [&](Rank& rank) {
    const Pair pair = open_pair(rank, test_config(rank.rank() == 0 ? d0 : d1, t));
    rdmx_worker_t* const w = pair.worker;
    rdmx_ep_t* const ep = pair.ep;
    std::vector<char> buf(size + 1);
    std::vector<double> samples;
    for (int i = -100; i < iters; ++i) {
      rdmx_request_t s, r;
      const auto t0 = std::chrono::steady_clock::now();
      if (rank.rank() == 0) {
        RDMX_CHECK_OK(rank, rdmx_tag_recv(w, buf.data(), size, RDMX_ANY_SOURCE, 1, ~0ull, &r,
                                          nullptr, nullptr));
        RDMX_CHECK_OK(rank, rdmx_tag_send(ep, buf.data(), size, 1, 0, &s, nullptr, nullptr));
        RDMX_CHECK_OK(rank, wait_request(rank, w, &s, nullptr, "send"));
        RDMX_CHECK_OK(rank, wait_request(rank, w, &r, nullptr, "recv"));
      } else {
        RDMX_CHECK_OK(rank, rdmx_tag_recv(w, buf.data(), size, RDMX_ANY_SOURCE, 1, ~0ull, &r,
                                          nullptr, nullptr));
        RDMX_CHECK_OK(rank, wait_request(rank, w, &r, nullptr, "recv"));
        RDMX_CHECK_OK(rank, rdmx_tag_send(ep, buf.data(), size, 1, 0, &s, nullptr, nullptr));
        RDMX_CHECK_OK(rank, wait_request(rank, w, &s, nullptr, "send"));
      }
      if (i >= 0) {
        samples.push_back(seconds_since(t0) * 1e6 / 2);
      }
    }
    if (rank.rank() == 0) {
      std::sort(samples.begin(), samples.end());
      double sum = 0;
      for (double x : samples) {
        sum += x;
      }
      rdmx_stats_t st{};
      rdmx_worker_stats(w, &st);
      std::printf(
          "rdmx %s %zu B: half round trip median %.2f us, mean %.2f us, p99 %.2f us "
          "(%d iterations); node rnr naks %llu retransmits %llu\n",
          t == RDMX_TRANSPORT_RC ? "rc" : "ud", size, samples[samples.size() / 2],
          sum / static_cast<double>(samples.size()), samples[samples.size() * 99 / 100], iters,
          static_cast<unsigned long long>(st.node_rnr_naks),
          static_cast<unsigned long long>(st.ud_retransmits));
    }
    rank.barrier();
    rdmx_ep_destroy(ep);
    rdmx_worker_destroy(w);
  });
  return ok ? 0 : 1;
}
