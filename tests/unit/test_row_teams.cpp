// The row templates with lane teams (1, 2, 8 and 32 lanes per row) over rows staged in shared
// memory compile under NVRTC for sm_90a (no GPU needed); tests/gpu/test_gpu_row_teams.cpp runs
// them.
#include "runtime/nvrtc_compiler.h"
#include "tests/support/row_team_kernels.h"

#include <doctest/doctest.h>

#include <string>

using namespace kfuse;

TEST_CASE("row templates: a lane team over a staged row compiles, with no shared memory of its "
          "own and no read-only global loads") {
  const rt::CompileRequest req = testing::row_team_request("sm_90a");
  const rt::CompiledModule m = rt::compile(req, nullptr);
  for (const std::string &name : testing::row_team_kernel_names()) {
    CAPTURE(name);
    const rt::KernelResources *found = nullptr;
    for (const rt::KernelResources &k : m.kernels)
      if (k.name == name)
        found = &k;
    REQUIRE(found != nullptr);
    // No static shared memory (the staged rows are dynamic): a lane team reduces by shuffles.
    CHECK(found->shared_bytes == 0);
    CHECK(found->spill_stores == 0);
  }
  // kf::Staged rows are read with plain loads: ld.global.nc (__ldg) is wrong for shared memory,
  // and the kernels read global memory only through plain loads of x.
  const std::string ptx = rt::compile_ptx(req);
  CHECK(ptx.find("ld.global.nc") == std::string::npos);
}
