// What a pipeline is compiled for, built once from kfuse::Options (rt::PipelineAccess::request)
// and carried from lower() into the Executable: the NVRTC arch, the precision of the GEMMs, and
// the limit on split-K the launches keep, and the ranks that exchange batch statistics. Precision
// is the one enum kfuse::Precision; its names are parsed here, for the command line and Python
// alike.
#pragma once

#include "kfuse/kfuse.h"

#include <optional>
#include <string>

namespace kfuse {

struct Target {
  std::string arch; // the NVRTC target: "sm_90a" gives tf32 and bf16 GEMMs the Hopper mainloop
  Precision precision = Precision::FP32;
  int max_split_k = 0; // Options::max_split_k: a cap on split-K's count (0: the rule's own)
  // Options::batch_stats_ranks: the ranks whose train-mode batch statistics a run exchanges
  // (0: none).
  int batch_stats_ranks = 0;
};

// "fp32", "tf32", "bf16", "3xtf32".
const char *precision_name(Precision p);
// The precision spelled so; nullopt for any other text.
std::optional<Precision> parse_precision(const std::string &name);
// Throws kfuse::Error for a value that is no Precision.
void require_supported(Precision p);

} // namespace kfuse
