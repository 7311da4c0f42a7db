// The `kfuse` command line on bad input and failing output: exit codes and the exact reason.
#include "tests/support/run_tool.h"

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

using kfuse::testing::run_kfuse;
using kfuse::testing::ToolRun;

TEST_CASE("cli: --dim follows one set of rules in every command that takes it") {
  struct Case {
    std::string args, reason;
  };
  const std::string kf = "examples/gemm_scale_bn.kf";
  for (const Case &c : {
           Case{"--dim M=5", "--dim M=5: pipeline 'gemm_scale_bn' has no dim 'M' (its dims: N)"},
           Case{"--dim N=+5", "--dim N: '+5' is not an integer in [1, 2147483647]"},
           Case{"--dim N=-1", "--dim N: '-1' is not an integer in [1, 2147483647]"},
           Case{"--dim N=0", "--dim N: '0' is not an integer in [1, 2147483647]"},
           Case{"--dim N=2147483648", "--dim N: '2147483648' is not an integer in [1, 2147483647]"},
           Case{"--dim N=99999999999999",
                "--dim N: '99999999999999' is not an integer in [1, 2147483647]"},
           Case{"--dim N=4 --dim N=8", "--dim N is given twice (4 and 8)"},
           Case{"--dim N", "--dim expects NAME=VALUE, got 'N'"},
       }) {
    for (const char *command : {"plan", "run", "bench", "tune"}) {
      INFO(command, " ", c.args);
      ToolRun r = run_kfuse(std::string(command) + " " + kf + " " + c.args);
      CHECK(r.exit_code == 2);
      CHECK(r.err == "kfuse " + std::string(command) + ": " + c.reason + "\n");
      CHECK(r.out.empty());
    }
    // check: the same reason and exit status (its message carries the usage line too).
    ToolRun r = run_kfuse("check " + kf + " " + c.args);
    CHECK(r.exit_code == 2);
    CHECK(r.err.rfind("kfuse check: error: " + c.reason + "\n", 0) == 0);
  }
  ToolRun emit = run_kfuse("emit " + kf + " --dim N=4");
  CHECK(emit.exit_code == 2);
  CHECK(emit.err == "kfuse emit: unknown option '--dim'\n");
  CHECK(run_kfuse("plan " + kf + " --dim N=2147483647").exit_code == 0);
}

TEST_CASE("cli: byte counts that overflow 64 bits are an error, not a negative number") {
  const std::string kf = "tests/support/pipelines/two_dims.kf";
  ToolRun r = run_kfuse("plan " + kf + " --dim N=2147483647 --dim M=2147483647");
  CHECK(r.exit_code == 1);
  CHECK(r.err == "kfuse plan: error: pipeline 'two_dims': a byte count exceeds "
                 "9223372036854775807 at these dim values\n");
  ToolRun fits = run_kfuse("plan " + kf + " --dim N=2147483647 --dim M=4");
  CHECK(fits.exit_code == 0);
  CHECK(fits.out.find("34359738352 read") != std::string::npos);
}

TEST_CASE("cli: a failed write is reported and fails the command") {
  if (!std::filesystem::exists("/dev/full"))
    return; // not Linux
  // A small file: --prove interprets every stage (the examples' 8192-wide GEMMs take long).
  const std::string kf = "tests/support/pipelines/state_read_after_update.kf";
  for (const char *args : {"emit", "plan", "plan --json", "check --print", "plan --prove"}) {
    std::string command(args);
    std::string name = command.substr(0, command.find(' '));
    INFO(args);
    ToolRun r = run_kfuse(name + " " + kf + command.substr(name.size()), "/dev/full");
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("cannot write to standard output: No space left on device\n") !=
          std::string::npos);
  }
  ToolRun o = run_kfuse("emit " + kf + " -o /dev/full");
  CHECK(o.exit_code == 1);
  CHECK(o.err == "kfuse emit: error: cannot write '/dev/full': No space left on device\n");

  // Commands that print with stdio rather than one checked write, and the usage texts.
  const std::string values = "/tmp/kfuse-cli-values-" + std::to_string(::getpid());
  std::ofstream(values) << "1\n-2\n";
  for (const std::string &args :
       {std::string("--help"), std::string("-h"), std::string("check --help"),
        "compile " + kf + " --arch sm_90a", "eval-op 'neg(a)' <" + values}) {
    INFO(args);
    ToolRun r = run_kfuse(args, "/dev/full");
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(": error: cannot write to standard output: No space left on device\n") !=
          std::string::npos);
  }
  std::filesystem::remove(values);
}

TEST_CASE("cli: an option given twice is an error naming it, whichever the option") {
  struct Case {
    std::string args, reason;
  };
  const std::string kf = "examples/gemm_scale_bn.kf";
  for (const Case &c : {
           Case{"plan " + kf + " --mode train --mode eval",
                "option '--mode' is given twice ('train' and 'eval')"},
           Case{"plan " + kf + " --mode=eval --mode eval",
                "option '--mode' is given twice ('eval' and 'eval')"},
           Case{"plan " + kf + " --precision fp32 --precision tf32",
                "option '--precision' is given twice ('fp32' and 'tf32')"},
           Case{"emit " + kf + " --arch sm_90a --arch sm_80",
                "option '--arch' is given twice ('sm_90a' and 'sm_80')"},
           Case{"emit " + kf + " -o a.cu --output b.cu",
                "option '--output' is given twice ('a.cu' and 'b.cu')"},
           Case{"plan " + kf + " --json --json", "option '--json' is given twice"},
           Case{"run " + kf + " --steps 1 --steps 2",
                "option '--steps' is given twice ('1' and '2')"},
           Case{"tune --show --show", "option '--show' is given twice"},
           Case{"plan " + kf + " --dim N=4 --dim N=8", "--dim N is given twice (4 and 8)"},
       }) {
    INFO(c.args);
    ToolRun r = run_kfuse(c.args);
    CHECK(r.exit_code == 2);
    const std::string command = c.args.substr(0, c.args.find(' '));
    CHECK(r.err.rfind("kfuse " + command + ": " + c.reason + "\n", 0) == 0);
    CHECK(r.out.empty());
  }
  ToolRun check = run_kfuse("check " + kf + " --print --print");
  CHECK(check.exit_code == 2);
  CHECK(check.err.rfind("kfuse check: error: option '--print' is given twice\n", 0) == 0);
}

TEST_CASE("cli: an empty option value is an error, not the option's absence") {
  const std::string kf = "examples/gemm_scale_bn.kf";
  for (const char *args : {"emit EXAMPLE -o ''", "emit EXAMPLE --output=", "emit EXAMPLE --arch ''",
                           "plan EXAMPLE --mode=", "run EXAMPLE --inputs ''"}) {
    std::string line(args);
    line.replace(line.find("EXAMPLE"), 7, kf);
    INFO(line);
    ToolRun r = run_kfuse(line);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(": option '--") != std::string::npos);
    CHECK(r.err.find("' needs a value, got ''\n") != std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("cli: '--' ends the options, as the usage text says") {
  const std::string kf = "examples/gemm_scale_bn.kf";
  ToolRun help = run_kfuse("--help");
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("'--' ends the options") != std::string::npos);

  ToolRun plain = run_kfuse("check --print -- " + kf);
  CHECK(plain.exit_code == 0);
  CHECK(plain.out.find("pipeline gemm_scale_bn") == 0);
  // After '--', what looks like an option is a file name.
  ToolRun file = run_kfuse("check -- --print");
  CHECK(file.exit_code == 1);
  CHECK(file.err == "error: cannot read '--print': No such file or directory\n");
  ToolRun output = run_kfuse("emit -- -o");
  CHECK(output.exit_code == 1);
  CHECK(output.err.find("cannot read '-o'") != std::string::npos);
  ToolRun two = run_kfuse("check " + kf + " -- --print");
  CHECK(two.exit_code == 2);
  CHECK(two.err.rfind("kfuse check: error: expected one .kf file, got 2 arguments\n", 0) == 0);
  // Only the first '--' is special.
  ToolRun again = run_kfuse("check -- -- " + kf);
  CHECK(again.exit_code == 2);
  CHECK(again.err.rfind("kfuse check: error: expected one .kf file, got 2 arguments\n", 0) == 0);
}

TEST_CASE("cli: an input file larger than the limit is refused before it is read whole") {
  if (!std::filesystem::exists("/dev/zero"))
    return;
  ToolRun r = run_kfuse("check /dev/zero");
  CHECK(r.exit_code == 1);
  CHECK(r.err == "error: cannot read '/dev/zero': larger than 16 MiB, the limit for a .kf file\n");
}

TEST_CASE("cli: plan --prove checks a file in both modes at several sizes") {
  const std::string kf = "tests/support/pipelines/state_read_after_update.kf";
  ToolRun r = run_kfuse("plan --prove " + kf);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("train N=5") != std::string::npos);
  CHECK(r.out.find("eval  N=5") != std::string::npos);
  CHECK(r.out.find("PROVED: every pass and the plan agree with the file\n") != std::string::npos);
  ToolRun sized = run_kfuse("plan --prove " + kf + " --dim N=64");
  CHECK(sized.exit_code == 0);
  CHECK(sized.out.find("train N=64") != std::string::npos);
  ToolRun mixed = run_kfuse("plan --prove --mode eval " + kf);
  CHECK(mixed.exit_code == 2);
}

TEST_CASE(
    "cli: plan --prove skips the sizes a file cannot run at, and fails where it runs at none") {
  // N must equal B*T: the sizes bind N to B*T; sizes given that break it are not run.
  const std::string dir = "/tmp/kfuse-cli-prove";
  std::filesystem::create_directories(dir);
  const std::string kf = dir + "/regroup.kf";
  {
    std::ofstream f(kf);
    f << "pipeline regroup {\n  dim N, B, T\n  input x: f32[N, 4]\n  input y: f32[B, T, 4]\n"
         "  return add(reshape(x, shape=[B, T, 4]), y)\n}\n";
  }
  ToolRun r = run_kfuse("plan --prove " + kf);
  INFO(r.out, r.err);
  CHECK(r.exit_code == 0);
  for (const char *size : {"B=1          N=1          T=1          agrees",
                           "B=2          N=4          T=2          agrees",
                           "B=5          N=25         T=5          agrees"}) {
    CHECK(r.out.find(std::string("train ") + size) != std::string::npos);
    CHECK(r.out.find(std::string("eval  ") + size) != std::string::npos);
  }
  CHECK(r.out.find("not run") == std::string::npos);
  CHECK(r.out.find("PROVED") != std::string::npos);
  ToolRun none = run_kfuse("plan --prove " + kf + " --dim N=5 --dim B=2 --dim T=3");
  CHECK(none.exit_code == 1);
  CHECK(none.out.find("T=3          not run: %2 (reshape) views f32[N, 4] [5, 4] as f32[B, T, 4] "
                      "[2, 3, 4]: the bound dims give them different element counts\n") !=
        std::string::npos);
  CHECK(none.out.find("FAILED: the file runs at none of these sizes (--dim gives others)\n") !=
        std::string::npos);
  ToolRun given = run_kfuse("plan --prove " + kf + " --dim N=6 --dim B=2 --dim T=3");
  CHECK(given.exit_code == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("cli: plan --prove proves shared values, row chains, groupnorm, instancenorm and pools") {
  // The wide examples of groupnorm, instancenorm and the pools prove at a small N only.
  for (const char *kf :
       {"tests/support/pipelines/shared_values.kf", "tests/support/pipelines/row_chain.kf",
        "examples/vit_head_stable_softmax.kf", "examples/distill_log_softmax_by_hand.kf",
        "examples/resnet50_energy_logsumexp.kf", "examples/simclr_projection_standardize.kf",
        "examples/sd_unet_groupnorm_silu.kf --dim N=3",
        "examples/adain_style_instancenorm.kf --dim N=3",
        "examples/maxout_relu_max_pool1d.kf --dim N=3",
        "examples/bert_ffn_gelu_avg_pool1d.kf --dim N=3"}) {
    INFO(kf);
    ToolRun r = run_kfuse(std::string("plan --prove ") + kf);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("PROVED: every pass and the plan agree with the file\n") != std::string::npos);
  }
}

TEST_CASE("cli: bench refuses tf32 and 3xtf32 for a pipeline of bf16 operands, before the GPU") {
  for (const char *precision : {"tf32", "3xtf32"}) {
    INFO(precision);
    ToolRun r = run_kfuse(std::string("bench examples/gemm_scale_bn_bf16.kf --dim N=1024 ") +
                          "--precision " + precision);
    CHECK(r.exit_code == 2);
    CHECK(r.err == std::string("kfuse bench: --precision ") + precision +
                       ": pipeline 'gemm_scale_bn_bf16' multiplies bf16 operands, which run on "
                       "bf16 tensor cores with fp32 accumulation whatever the precision; tf32, "
                       "3xtf32 and bf16 apply to f32 operands only: bench it with --precision "
                       "fp32 (the default)\n");
    CHECK(r.out.empty());
  }
}

TEST_CASE("cli: tune's argument errors are usage errors, before the GPU") {
  struct Case {
    std::string args, reason;
  };
  const std::string kf = "examples/gemm_scale_bn.kf";
  for (const Case &c : {
           Case{"", "missing the .kf file argument"},
           Case{kf, "dim 'N' needs a value: --dim N=..."},
           Case{kf + " --dim N=64 --iters 0",
                "--iters expects an integer in [1, 1000000], got '0'"},
           Case{kf + " --dim N=64 --warmup x",
                "--warmup expects an integer in [0, 1000000], got 'x'"},
           Case{kf + " --dim N=64 --max-split-k 2", "unknown option '--max-split-k'"},
           Case{"--show " + kf, "--show takes no file or other option"},
           Case{"--show --mode eval", "--show takes no file or other option"},
       }) {
    INFO(c.args);
    ToolRun r = run_kfuse("tune " + c.args);
    CHECK(r.exit_code == 2);
    CHECK(r.err.rfind("kfuse tune: " + c.reason + "\n", 0) == 0);
    CHECK(r.out.empty());
  }
}

TEST_CASE("cli: plan ends with each GEMM's config at the precision asked, and why") {
  ToolRun r = run_kfuse("plan examples/gemm_scale_bn_512x1024.kf --precision tf32 --arch sm_90a "
                        "--no-tuned");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("\nGEMM configs (tf32, sm_90a, --no-tuned: the heuristics'):\n  k1_gemm: tf32 "
                   "64 x 128 tile, 2 blocks per SM: 1024 output features (< 4096)") !=
        std::string::npos);
  CHECK(r.out.find("\nroundings\n  t1 = f32[1024, 512] of weight rounded to tf32: once per bind, "
                   "k0_elementwise\n") != std::string::npos);
  ToolRun bf16 = run_kfuse("plan examples/gemm_scale_bn.kf --precision bf16 --arch sm_90a");
  CHECK(bf16.exit_code == 0);
  CHECK(bf16.out.find("\nroundings\n  t1 = bf16[N, 8192] of x: every run, k0_elementwise\n  t2 = "
                      "bf16[8192, 8192] of weight: once per bind, k1_elementwise\n") !=
        std::string::npos);
  CHECK(bf16.out.find("\nGEMM configs (bf16, sm_90a") != std::string::npos);
  ToolRun prove = run_kfuse("plan examples/gpt2_mlp_dropout.kf --prove --precision bf16");
  CHECK(prove.exit_code == 0);
  CHECK(prove.out.find("PROVED") != std::string::npos);
}

TEST_CASE("cli: run takes a 64-bit --dropout-seed and refuses anything else, before the GPU") {
  const std::string kf = "examples/gpt2_mlp_dropout.kf --dim N=4 --dropout-seed ";
  for (const char *bad : {"-1", "x", "18446744073709551616"}) {
    INFO(bad);
    ToolRun r = run_kfuse("run " + kf + bad);
    CHECK(r.exit_code == 2);
    CHECK(r.err == std::string("kfuse run: --dropout-seed must be an integer in [0, 2^64), got '") +
                       bad + "'\n");
  }
}

TEST_CASE("cli: plan --prove proves the dropout examples") {
  for (const char *kf : {"examples/gpt2_mlp_dropout.kf --dim N=3",
                         "examples/bert_output_dropout_layernorm.kf --dim N=3"}) {
    INFO(kf);
    ToolRun r = run_kfuse(std::string("plan --prove ") + kf);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("PROVED: every pass and the plan agree with the file\n") != std::string::npos);
  }
}
