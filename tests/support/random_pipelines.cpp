#include "tests/support/random_pipelines.h"

#include <fmt/format.h>
#include <vector>

namespace kfuse::testing {

namespace {

struct Rng {
  uint64_t s;
  uint64_t next() {
    s += 0x9e3779b97f4a7c15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
  template <class T> const T &pick(const std::vector<T> &v) { return v[static_cast<size_t>(below(static_cast<int>(v.size())))]; }
};

class Generator {
public:
  explicit Generator(uint64_t seed) : rng_{seed * 7919 + 1} {}

  std::string run(uint64_t seed) {
    int k = 2 + rng_.below(5);
    features_ = k;
    decls_ += fmt::format("  input x: f32[N, {}]\n", k);
    std::string h = "x";
    int steps = 2 + rng_.below(6);
    for (int i = 0; i < steps; ++i)
      h = step(h);
    std::string ret = h;
    if (rng_.below(4) == 0 && matrices_.size() > 1)
      ret += ", " + rng_.pick(matrices_).first;
    return fmt::format("pipeline random_{} {{\n  dim N\n{}{}  return {}\n}}\n", seed, decls_, body_,
                       ret);
  }

private:
  std::string declare(const char *kind, const std::string &shape) {
    std::string name = fmt::format("{}{}", kind[0], counter_++);
    decls_ += fmt::format("  {} {}: f32{}\n", kind, name, shape);
    return name;
  }
  std::string vec(int f) { return declare("param", fmt::format("[{}]", f)); }
  std::string column_operand() {
    return rng_.below(3) == 0 ? declare("param", "[1]") : vec(features_);
  }
  std::string assign(const std::string &expr) {
    std::string name = fmt::format("v{}", counter_++);
    body_ += fmt::format("  {} = {}\n", name, expr);
    matrices_.push_back({name, features_});
    return name;
  }
  // An earlier matrix of the current width (a second reader), or a fresh input.
  std::string other_matrix(const std::string &h) {
    for (auto it = matrices_.rbegin(); it != matrices_.rend(); ++it)
      if (it->second == features_ && it->first != h && rng_.below(2) == 0)
        return it->first;
    return declare("input", fmt::format("[N, {}]", features_));
  }

  std::string step(const std::string &h) {
    static const std::vector<std::string> binary = {"add", "sub", "mul", "div"};
    static const std::vector<std::string> unary = {"relu", "gelu", "sigmoid", "tanh", "silu"};
    switch (rng_.below(9)) {
    case 0: { // linear, bias optional
      int out = 2 + rng_.below(5);
      std::string w = declare("param", fmt::format("[{}, {}]", out, features_));
      std::string b = rng_.below(2) ? ", " + vec(out) : "";
      features_ = out;
      return assign(fmt::format("linear({}, {}{})", h, w, b));
    }
    case 1: {
      int out = 2 + rng_.below(5);
      std::string w = declare("param", fmt::format("[{}, {}]", features_, out));
      features_ = out;
      return assign(fmt::format("matmul({}, {})", h, w));
    }
    case 2:
    case 3: { // batchnorm, affine or not
      std::string affine = rng_.below(3) ? vec(features_) + ", " + vec(features_) + ", " : "";
      std::string rm = declare("state", fmt::format("[{}]", features_));
      std::string rv = declare("state", fmt::format("[{}]", features_));
      return assign(fmt::format("batchnorm({}, {}{}, {}, eps={}, momentum={})", h, affine, rm, rv,
                                rng_.pick(std::vector<std::string>{"1e-5", "0.001"}),
                                rng_.pick(std::vector<std::string>{"0.1", "0.3"})));
    }
    case 4: { // a per-column operand, on either side (never dividing by the matrix)
      std::string op = rng_.pick(binary);
      std::string c = column_operand();
      bool matrix_first = op == "div" || rng_.below(2);
      return assign(matrix_first ? fmt::format("{}({}, {})", op, h, c)
                                 : fmt::format("{}({}, {})", op, c, h));
    }
    case 5: {
      std::string op = rng_.pick(std::vector<std::string>{"add", "sub", "mul"});
      return assign(fmt::format("{}({}, {})", op, h, other_matrix(h)));
    }
    case 6:
    case 7:
      return assign(fmt::format("{}({})", rng_.pick(unary), h));
    default: {
      std::string op = rng_.pick(std::vector<std::string>{"softmax", "log_softmax"});
      return assign(fmt::format("{}({}, dim={})", op, h, rng_.pick(std::vector<int>{1, -1, 1, 0})));
    }
    }
  }

  Rng rng_;
  int features_ = 0;
  int counter_ = 0;
  std::string decls_, body_;
  std::vector<std::pair<std::string, int>> matrices_; // assigned values and their widths
};

} // namespace

std::string random_pipeline(uint64_t seed) { return Generator(seed).run(seed); }

} // namespace kfuse::testing
