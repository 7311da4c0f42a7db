// Rounding to an element type's values, shared by the IR (ir::round_to, the interpreter's
// roundings) and the runtime's host-side encoding, which knows no IR.
#pragma once

#include "kfuse/kfuse.h"

namespace kfuse {

// x rounded to `digits` significant bits, ties to even (nearbyint in the default rounding
// mode), with exponents below `min_exp` rounded on the subnormal grid, and values beyond
// `max` to infinity (IEEE round to nearest overflows where the rounded value would exceed it).
double round_significand(double x, int digits, int min_exp, double max);

// x rounded to the nearest value of type t (ties to even); f32 values are returned as they are.
double round_to_element(DType t, double x);

} // namespace kfuse
