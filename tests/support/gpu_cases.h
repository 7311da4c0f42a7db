// What the GPU tests run and how they judge it: the founding chains as .kf text at any size
// and element types (odd shapes give every tile a tail), the examples' text, and the check
// against the fp64 reference interpreter.
#pragma once

#include "kfuse/kfuse.h"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>

namespace kfuse::testing {

// linear -> * scale[out] -> batchnorm. `dtype`: x, weight, bias and scale (and so the output);
// `norm_dtype`: batchnorm's parameters and running statistics (f32 beside bf16/f16 activations
// is PyTorch's mixed precision).
std::string scale_bn(int in, int out, const std::string &dtype = "f32",
                     const std::string &norm_dtype = "f32");
// linear -> batchnorm -> * scale[1] -> softmax, with the same types.
std::string bn_scale_softmax(int in, int out, const std::string &dtype = "f32",
                             const std::string &norm_dtype = "f32");

// scale_bn with the GEMM's B not transposed: matmul(x, weight), weight [in, out].
std::string matmul_scale_bn(int in, int out);

// A file of the repository by its path from the root, in testing::source_dir().
std::string repo_file(const std::string &path);
// examples/<name>.
std::string example(const std::string &name);

// Runs `text` on the GPU with N = n (random inputs from `seed`, `steps` runs back to back,
// outputs poisoned with NaN first) and checks every output and state against the reference
// within the pipeline's bound: rt::error_bound of the precision and the pipeline's types.
void expect_match(const std::string &text, const std::string &file, Mode mode, int64_t n,
                  uint64_t seed, int steps = 1, Precision precision = Precision::FP32);
// The same with every dim bound by name (B and T of [B, T, F] activations).
void expect_match(const std::string &text, const std::string &file, Mode mode,
                  const std::map<std::string, int64_t> &dims, uint64_t seed, int steps = 1,
                  Precision precision = Precision::FP32);

// `text` compiled with its backward (Options::backward) and checked forward then backward, as
// `kfuse run --backward` does: every output, state and gradient within the pipeline's bound, and
// a gradient checked for each the pipeline returns. Returns how many gradients were checked.
// `frozen`: Options::frozen.
size_t expect_gradients_match(const std::string &text, const std::string &file, Mode mode,
                              int64_t n, uint64_t seed, int steps = 1,
                              Precision precision = Precision::FP32,
                              const std::vector<std::string> &frozen = {});

// Examples in both modes, with one row and with 33 (a partial tile).
void expect_examples(std::initializer_list<const char *> files, uint64_t seed);

} // namespace kfuse::testing
