// Heavy GEMM epilogues on the Hopper mainloop apply their functor in a rolled loop over staged
// accumulators: the op table's transcendental calls per element, which weigh an epilogue.
#include "compiler/ir/ops.h"

#include <doctest/doctest.h>

#include <utility>

using namespace kfuse;

TEST_CASE("ops: transcendental calls per element, as the CUDA expressions make them") {
  using ir::OpKind;
  for (auto [op, calls] :
       {std::pair{OpKind::Relu, 0}, std::pair{OpKind::Div, 0}, std::pair{OpKind::Sqrt, 0},
        std::pair{OpKind::Gelu, 1}, std::pair{OpKind::Silu, 1}, std::pair{OpKind::Sigmoid, 1},
        std::pair{OpKind::Tanh, 1}, std::pair{OpKind::Elu, 1}, std::pair{OpKind::Erf, 1},
        std::pair{OpKind::Softplus, 2}, std::pair{OpKind::LogSigmoid, 2}, std::pair{OpKind::Pow, 2},
        std::pair{OpKind::Mish, 3}, std::pair{OpKind::Linear, 0}}) {
    CAPTURE(ir::op_info(op).name);
    CHECK(ir::op_info(op).transcendental_calls == calls);
  }
}
