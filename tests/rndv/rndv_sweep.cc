// rndv_sweep: the eager/rendezvous latency crossover on this device (not a test).
//   rndv_sweep [rc|ud] [iterations] [device0] [device1] [rounds]
// (RC is the meaningful one: on UD the eager limit is one packet, larger "eager" sizes go by
// rendezvous anyway.)
// Two ranks, each with two workers: one that sends every size eagerly (large buffers of 256 KiB,
// eager limit 256 KiB, threshold off) and one that sends every size by rendezvous (threshold 1).
// For each size, ping-pongs alternate between the two so that both see the same machine load;
// prints the median half round trip of each and the ratio: the crossover is the first size from
// which rendezvous stays faster (rendezvous/README.md, "Threshold").
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

namespace {

struct Sample {
  double p50 = 0;  // median half round trip, us
  double p10 = 0;  // 10th percentile: the protocol's cost without most scheduling stalls
};

Sample pingpong(Rank& rank, Pair& p, std::vector<char>& buf, std::size_t size, int iters) {
  std::vector<double> samples;
  for (int i = -20; i < iters; ++i) {
    rdmx_request_t s, r;
    const auto t0 = std::chrono::steady_clock::now();
    RDMX_CHECK_OK(rank, rdmx_tag_recv(p.worker, buf.data(), size, RDMX_ANY_SOURCE, 1, ~0ull, &r,
                                      nullptr, nullptr));
    if (rank.rank() == 0) {
      RDMX_CHECK_OK(rank, rdmx_tag_send(p.ep, buf.data(), size, 1, 0, &s, nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, p.worker, &s, nullptr, "send"));
      RDMX_CHECK_OK(rank, wait_request(rank, p.worker, &r, nullptr, "recv"));
    } else {
      RDMX_CHECK_OK(rank, wait_request(rank, p.worker, &r, nullptr, "recv"));
      RDMX_CHECK_OK(rank, rdmx_tag_send(p.ep, buf.data(), size, 1, 0, &s, nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, p.worker, &s, nullptr, "send"));
    }
    if (i >= 0) {
      samples.push_back(seconds_since(t0) * 1e6 / 2);
    }
  }
  std::sort(samples.begin(), samples.end());
  return Sample{samples[samples.size() / 2], samples[samples.size() / 10]};
}

}  // namespace

int main(int argc, char** argv) {
  const rdmx_transport_t t =
      (argc > 1 && std::strcmp(argv[1], "ud") == 0) ? RDMX_TRANSPORT_UD : RDMX_TRANSPORT_RC;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 200;
  const std::string d0 = argc > 3 ? argv[3] : "";
  const std::string d1 = argc > 4 ? argv[4] : d0;
  const std::vector<std::size_t> sizes = {1024,      2048,       4096,       8192,      12 * 1024,
                                          16 * 1024, 24 * 1024,  32 * 1024,  48 * 1024, 64 * 1024,
                                          96 * 1024, 128 * 1024, 192 * 1024, 256 * 1024};
  constexpr std::size_t kMax = 256 * 1024;
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 3;
  const bool ok = run_ranks(
      2,
      [&](Rank& rank) {
        const std::string dev = rank.rank() == 0 ? d0 : d1;
        rdmx_config_t eager = test_config(dev, t);
        eager.large_buf_size = kMax;
        eager.eager_limit = kMax;
        eager.rndv_thresh = SIZE_MAX;
        eager.srq_depth = 64;  // 256 KiB buffers: keep the pinned memory reasonable
        rdmx_config_t rndv = test_config(dev, t);
        rndv.rndv_thresh = 1;
        Pair pe = open_pair(rank, eager);
        Pair pr = open_pair(rank, rndv);
        std::vector<char> buf(kMax + 1, 'x');
        if (rank.rank() == 0) {
          std::printf(
              "# rdmx %s eager vs rendezvous, half round trip in us (%d iterations per point, "
              "%d rounds alternating eager and rendezvous); per column the median over the "
              "rounds of each round's median (p50) and 10th percentile (p10)\n",
              t == RDMX_TRANSPORT_RC ? "rc" : "ud", iters, rounds);
          std::printf("# %8s %10s %10s %7s %10s %10s %7s\n", "size", "eager_p50", "rndv_p50",
                      "ratio", "eager_p10", "rndv_p10", "ratio");
        }
        for (const std::size_t size : sizes) {
          std::vector<double> e50, r50, e10, r10;
          for (int k = 0; k < rounds; ++k) {
            const Sample e = pingpong(rank, pe, buf, size, iters);
            const Sample r = pingpong(rank, pr, buf, size, iters);
            e50.push_back(e.p50);
            e10.push_back(e.p10);
            r50.push_back(r.p50);
            r10.push_back(r.p10);
          }
          if (rank.rank() == 0) {
            auto med = [](std::vector<double> v) {
              std::sort(v.begin(), v.end());
              return v[v.size() / 2];
            };
            const double a = med(e50), b = med(r50), c = med(e10), d = med(r10);
            std::printf("  %8zu %10.1f %10.1f %7.2f %10.1f %10.1f %7.2f\n", size, a, b, b / a, c, d,
                        d / c);
            std::fflush(stdout);
          }
        }
        rank.barrier();
        rdmx_ep_destroy(pe.ep);
        rdmx_ep_destroy(pr.ep);
        rdmx_worker_destroy(pe.worker);
        rdmx_worker_destroy(pr.worker);
      },
      RunOptions{.timeout = std::chrono::seconds(1800)});
  return ok ? 0 : 1;
}
