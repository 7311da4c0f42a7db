#include "runtime/error.h"

#include <fmt/format.h>

#include <utility>

namespace kfuse::rt {

CudaError::CudaError(std::string call, int code, std::string error_name, std::string description)
    : Error(fmt::format("CUDA driver call {} failed: {} ({})", call, error_name, description)),
      call_(std::move(call)), code_(code), error_name_(std::move(error_name)) {}

CompileError::CompileError(const std::string &message, std::string file_name, std::string log)
    : Error(message), file_name_(std::move(file_name)), log_(std::move(log)) {}

} // namespace kfuse::rt
