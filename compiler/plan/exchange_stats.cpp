#include "compiler/plan/exchange_stats.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kfuse::plan {

void exchange_batch_stats(Plan &p, int ranks) {
  if (ranks < 1)
    throw std::logic_error("internal error: batch statistics exchanged across " +
                           std::to_string(ranks) + " ranks");
  p.stats_ranks = ranks;
  std::vector<Kernel> kernels;
  for (Kernel &k : p.kernels) {
    if (k.exchanged) {
      k.rules.push_back("exchange_stats");
      std::sort(k.rules.begin(), k.rules.end());
      Kernel summary;
      summary.kind = KernelKind::Summary;
      summary.stats_of = k.stats_of;
      summary.covers = k.covers;
      summary.rules = {"exchange_stats"};
      kernels.push_back(std::move(summary));
    }
    kernels.push_back(std::move(k));
  }
  p.kernels = std::move(kernels);
}

} // namespace kfuse::plan
