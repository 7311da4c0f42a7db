// `kfuse plan|emit|compile|run --backward` where no GPU is needed: the two plans and sources, and
// the refusals made before the GPU.
#include "tests/support/run_tool.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

using kfuse::testing::read_text;
using kfuse::testing::run_kfuse;
using kfuse::testing::ToolRun;

TEST_CASE("cli backward: plan --backward plans the forward that saves and the backward, saying "
          "what each reads and writes") {
  ToolRun r = run_kfuse("plan examples/gemm_scale_bn.kf --backward --mode eval --dim N=64");
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.rfind("# forward (eval mode): output 0, then saves saved_h for the backward\n"
                    "plan gemm_scale_bn (mode eval): ",
                    0) == 0);
  CHECK(r.out.find("\n# backward (eval mode): reads grad_out0, saved_h; the gradients of x, "
                   "weight, bias, scale, bn_weight, bn_bias\nplan gemm_scale_bn_backward (mode "
                   "eval): ") != std::string::npos);
  // Each plan ends with its GEMM configs: the backward's dX and dW products are GEMMs too.
  const size_t backward = r.out.find("plan gemm_scale_bn_backward");
  CHECK(r.out.find("GEMM configs") < backward);
  CHECK(r.out.find("GEMM configs", backward) != std::string::npos);
  CHECK(r.out.find("matmul_tn", backward) != std::string::npos);

  ToolRun json = run_kfuse("plan examples/gemm_scale_bn.kf --backward --json");
  REQUIRE(json.exit_code == 0);
  CHECK(json.out.rfind("{\n\"forward\": {", 0) == 0);
  CHECK(json.out.find("\n\"backward\": {") != std::string::npos);
  CHECK(json.out.find("\"gemm_scale_bn_backward\"") != std::string::npos);
}

TEST_CASE("cli backward: --frozen leaves gradients out, and what only they need") {
  ToolRun r = run_kfuse("plan examples/gemm_scale_bn.kf --backward --mode eval --frozen x,bn_bias");
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("\n# backward (eval mode): reads grad_out0, saved_h; the gradients of "
                   "weight, bias, scale, bn_weight\n") != std::string::npos);
  const size_t backward = r.out.find("plan gemm_scale_bn_backward");
  // dW's GEMM is left, dX's (the product with the weight) is not.
  CHECK(r.out.find("= matmul_tn(", backward) != std::string::npos);
  CHECK(r.out.find("= matmul(", backward) == std::string::npos);
  ToolRun all = run_kfuse("plan examples/gemm_scale_bn.kf --backward --mode eval");
  CHECK(all.out.find("= matmul(", all.out.find("plan gemm_scale_bn_backward")) !=
        std::string::npos);

  ToolRun unknown = run_kfuse("plan examples/gemm_scale_bn.kf --backward --frozen y");
  CHECK(unknown.exit_code == 1);
  CHECK(unknown.err.find("grad: frozen 'y' is no input or param of pipeline 'gemm_scale_bn'") !=
        std::string::npos);
  ToolRun alone = run_kfuse("plan examples/gemm_scale_bn.kf --frozen x");
  CHECK(alone.exit_code == 2);
  CHECK(alone.err.find("--frozen names inputs and params the backward computes no gradient for; "
                       "it needs --backward") != std::string::npos);
}

TEST_CASE("cli backward: emit --backward writes both translation units") {
  ToolRun both = run_kfuse("emit examples/gemm_scale_bn.kf --backward");
  REQUIRE(both.exit_code == 0);
  CHECK(both.out.rfind("// The forward that saves what the backward reads "
                       "(examples/gemm_scale_bn.kf (train mode, forward that saves)).\n",
                       0) == 0);
  CHECK(both.out.find("\n// The backward (examples/gemm_scale_bn.kf (train mode, backward)).\n") !=
        std::string::npos);

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "kfuse-test-emit-backward";
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "out.cu").string();
  ToolRun r = run_kfuse("emit examples/gemm_scale_bn.kf --backward -o " + out);
  CHECK(r.exit_code == 0);
  const std::string forward = read_text(out),
                    backward = read_text((dir / "out.backward.cu").string());
  CHECK(!forward.empty());
  CHECK(!backward.empty());
  CHECK(both.out.find(forward) != std::string::npos);
  CHECK(both.out.find(backward) != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("cli backward: what has no backward is refused, before any GPU work") {
  ToolRun prove = run_kfuse("plan examples/gemm_scale_bn.kf --backward --prove");
  CHECK(prove.exit_code == 2);
  CHECK(prove.err == "kfuse plan: --prove checks the file's own plan, not its backward's (kfuse "
                     "run --backward checks the gradients)\n");
  for (const char *option : {"--save DIR", "--inputs DIR"}) {
    ToolRun run = run_kfuse(std::string("run examples/gemm_scale_bn.kf --backward ") + option);
    CHECK(run.exit_code == 2);
    CHECK(run.err == "kfuse run: --backward runs on random inputs and output gradients: it takes "
                     "no --inputs or --save\n");
  }
  // A second derivative: the pool's gradient op has no rule of its own.
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / "kfuse-test-second-derivative.kf";
  std::ofstream(file) << "pipeline second {\n  dim N\n  input g: f32[N, 3]\n"
                         "  input y: f32[N, 7]\n"
                         "  return max_pool1d_backward(g, y, kernel_size=3, stride=2)\n}\n";
  const std::string refusal = "error: grad: %2 (max_pool1d_backward) has no vector-Jacobian "
                              "product";
  ToolRun pool = run_kfuse("plan " + file.string() + " --backward");
  CHECK(pool.exit_code == 1);
  CHECK(pool.err.find("kfuse plan: " + refusal) == 0);
  ToolRun bench = run_kfuse("bench " + file.string() + " --backward --dim N=4");
  CHECK(bench.exit_code == 1);
  CHECK(bench.err.find("kfuse bench: " + refusal) == 0);
  std::filesystem::remove(file);
}

TEST_CASE("cli backward: with statistics exchanged across ranks the backward plan exchanges "
          "batchnorm's gradient means, not the parameter gradients' sums") {
  ToolRun ranks = run_kfuse("plan examples/gemm_scale_bn.kf --backward --batch-stats-ranks 2");
  INFO(ranks.err);
  REQUIRE(ranks.exit_code == 0);
  const std::string backward = ranks.out.substr(ranks.out.find("# backward"));
  CHECK(backward.find("summaries(grad_out0) of 2 ranks, all-gathered") != std::string::npos);
  CHECK(backward.find("writes   summary(grad_out0): count, mean, M2 per feature, for the "
                      "all-gather") != std::string::npos);
  // bn_bias's gradient: the rank's own sum of the same matrix, from its partials.
  CHECK(backward.find("op       t16 = col_sum(grad_out0, local=true)\n  reads    "
                      "partials(grad_out0)") != std::string::npos);
}
