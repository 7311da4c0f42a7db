// The `kfuse` subcommands; each lives in its own cmd_NAME.cpp and returns the exit code.
#pragma once

#include "compiler/ir/graph.h"
#include "kfuse/kfuse.h"

#include <string>

namespace kfuse::tool {

int cmd_check(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_emit(int argc, char **argv);
int cmd_compile(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_eval_op(int argc, char **argv);
int cmd_grad(int argc, char **argv);

struct CommandLine;

// "train" or "eval"; throws UsageError otherwise.
ir::Mode parse_mode(const std::string &text);
// --mode (default train), --precision (default fp32), --arch (default: the GPU's),
// --max-split-k (default 0: split-K as the shape and SM count choose; 1: never), --no-tuned
// (the heuristics' GEMM configurations even where `kfuse tune` stored others),
// --batch-stats-ranks (default 0; R: batch statistics exchanged across R ranks, where allowed),
// --backward (Options::backward, where the command takes it), --frozen NAME,NAME (with
// --backward: Options::frozen).
Options pipeline_options(const CommandLine &cl);
// --frozen's names (none where it is absent); an empty name throws UsageError.
std::vector<std::string> frozen_names(const CommandLine &cl);
ir::Mode ir_mode(Mode m);

} // namespace kfuse::tool
