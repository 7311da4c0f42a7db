// A pipeline's launches replayed as one CUDA graph.
//
// Each kernel launch costs the host about 3 us in the driver (H100 machine, docs/PERF.md), so a
// three-kernel run spends 9 us launching what one graph launch does in about 3. A graph holds
// the arguments it was captured with, tensor pointers and dims included: the pipeline resets it
// whenever a run's tensors, a bound tensor or the workspace change, and captures it again once
// runs are steady.
#pragma once

#include <cuda.h>

#include <functional>

namespace kfuse::rt {

class RunGraph {
public:
  RunGraph() = default;
  ~RunGraph();
  RunGraph(const RunGraph &) = delete;
  RunGraph &operator=(const RunGraph &) = delete;

  // Forgets the captured graph.
  void reset();
  bool captured() const { return exec_ != nullptr; }
  // Captures what `enqueue` launches on a stream of its own (nothing runs), keeping the graph.
  void capture(const std::function<void(CUstream)> &enqueue);
  // Launches the captured graph on `stream`.
  void launch(CUstream stream) const;

private:
  CUstream capture_stream_ = nullptr; // created at the first capture, in the pipeline's context
  CUgraphExec exec_ = nullptr;
};

// Whether work enqueued on `stream` is being recorded into a graph of the caller's (stream
// capture): a run there launches its kernels one by one, as the caller's graph records them.
bool capturing(CUstream stream);

} // namespace kfuse::rt
