// Random .kf pipelines for the planner's proof-by-interpretation tests: op chains over
// small features that mix every user op, with values reused (so some have several
// readers) and an occasional second output.
#pragma once

#include <cstdint>
#include <string>

namespace kfuse::testing {

// Deterministic in `seed`. Every pipeline has `dim N`, input x: f32[N, K].
std::string random_pipeline(uint64_t seed);

} // namespace kfuse::testing
