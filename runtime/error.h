// Exceptions thrown by kfuse.
//
// kfuse::Error is the base of every exception kfuse throws, so an embedding program can catch
// one type. It is header-only on purpose: the compiler library throws it too and does not link
// the runtime (nor see the CUDA headers), so this header includes neither <cuda.h> nor <nvrtc.h>.
#pragma once

#include "kfuse/error.h"

#include <stdexcept>
#include <string>

namespace kfuse {

namespace rt {

// A failed CUDA driver call. what() reads
//   "CUDA driver call <call> failed: <CUDA_ERROR_NAME> (<description>)".
class CudaError : public Error {
public:
  CudaError(std::string call, int code, std::string error_name, std::string description);

  const std::string &call() const { return call_; }
  int code() const { return code_; } // the CUresult
  const std::string &error_name() const { return error_name_; }

private:
  std::string call_;
  int code_;
  std::string error_name_;
};

// NVRTC rejected a program (or its options). what() names the file and the architecture and
// holds the annotated log (generated-source lines quoted under each error); log() is NVRTC's
// log as it was.
class CompileError : public Error {
public:
  CompileError(const std::string &message, std::string file_name, std::string log);

  const std::string &file_name() const { return file_name_; }
  const std::string &log() const { return log_; }

private:
  std::string file_name_;
  std::string log_;
};

} // namespace rt
} // namespace kfuse
