// kfuse::Error: the base of every exception kfuse throws (diagnostics in .kf files, API
// misuse, CUDA and NVRTC failures), so an embedding program can catch one type.
// Header-only: the compiler and the runtime both throw it.
#pragma once

#include <stdexcept>

namespace kfuse {

class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

} // namespace kfuse
