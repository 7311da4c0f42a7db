#include "runtime/run_graph.h"

#include "runtime/driver.h"

namespace kfuse::rt {

RunGraph::~RunGraph() {
  reset();
  if (capture_stream_ != nullptr)
    Driver::get().cuStreamDestroy(capture_stream_);
}

void RunGraph::reset() {
  if (exec_ != nullptr)
    Driver::get().cuGraphExecDestroy(exec_);
  exec_ = nullptr;
}

void RunGraph::capture(const std::function<void(CUstream)> &enqueue) {
  Driver &d = Driver::get();
  reset();
  if (capture_stream_ == nullptr)
    d.check(d.cuStreamCreate(&capture_stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate(capture)");
  // Thread-local: other threads' CUDA calls go on while this one records.
  d.check(d.cuStreamBeginCapture(capture_stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
          "cuStreamBeginCapture(run graph)");
  CUgraph graph = nullptr;
  try {
    enqueue(capture_stream_);
  } catch (...) {
    d.cuStreamEndCapture(capture_stream_, &graph);
    if (graph != nullptr)
      d.cuGraphDestroy(graph);
    throw;
  }
  d.check(d.cuStreamEndCapture(capture_stream_, &graph), "cuStreamEndCapture(run graph)");
  CUresult r = d.cuGraphInstantiate(&exec_, graph, 0);
  d.cuGraphDestroy(graph);
  if (r != CUDA_SUCCESS) {
    exec_ = nullptr;
    d.check(r, "cuGraphInstantiate(run graph)");
  }
}

void RunGraph::launch(CUstream stream) const {
  Driver &d = Driver::get();
  d.check(d.cuGraphLaunch(exec_, stream), "cuGraphLaunch(run graph)");
}

bool capturing(CUstream stream) {
  Driver &d = Driver::get();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  d.check(d.cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

} // namespace kfuse::rt
