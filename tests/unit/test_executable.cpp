// The Executable the runtime runs: the interface and the run-time constraints as data, built
// from the plan without the runtime reading any IR; and precision's names, parsed in one place.
#include "compiler/build_executable.h"
#include "compiler/dsl/source.h"

#include <doctest/doctest.h>

using namespace kfuse;

namespace {

const char *kGroups = R"(pipeline groups {
  dim N
  dim C
  input x: f32[N, C]
  param w: f32[C]
  param b: f32[C]
  return groupnorm(x, w, b, groups=4, eps=1e-5)
}
)";

} // namespace

TEST_CASE("executable: the interface and a groupnorm's group size as data") {
  LowerOptions o;
  o.target.arch = "sm_90a";
  const exec::Executable e = build_executable(lower(dsl::SourceFile("groups.kf", kGroups), o));
  REQUIRE(e.interface.declared.size() == 3);
  CHECK(e.interface.declared[0].name == "x");
  CHECK(e.interface.declared[0].kind == exec::DeclaredTensor::Kind::Input);
  CHECK(e.interface.declared[0].type.str() == "f32[N, C]");
  CHECK(e.interface.declared[1].kind == exec::DeclaredTensor::Kind::Param);
  CHECK(e.interface.find("b") == 2);
  CHECK(e.interface.find("y") == -1);
  REQUIRE(e.interface.outputs.size() == 1);
  CHECK(e.interface.outputs[0].str() == "f32[N, C]");
  CHECK(e.target.arch == "sm_90a");
  const exec::Constraint *groups = nullptr;
  for (const exec::Constraint &c : e.constraints)
    if (c.kind == exec::Constraint::Kind::Divides)
      groups = &c;
  REQUIRE(groups != nullptr);
  CHECK_FALSE(exec::violation(*groups, {{"N", 2}, {"C", 8}}));
  const std::optional<std::string> broken = exec::violation(*groups, {{"N", 2}, {"C", 6}});
  REQUIRE(broken);
  CHECK(*broken == "groupnorm: groups=4 does not divide the 6 features (line 7)");
  for (const exec::Kernel &k : e.kernels)
    CHECK_FALSE(k.bare_gemm); // no GEMM here: nothing a hook could run instead
}

TEST_CASE("precision: every name parses back to its Precision, other text to none") {
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP32x3})
    CHECK(parse_precision(precision_name(p)) == p);
  CHECK(parse_precision("3xtf32") == Precision::FP32x3);
  CHECK_FALSE(parse_precision("fp16"));
  CHECK_FALSE(parse_precision("FP32"));
  CHECK_THROWS_WITH_AS(require_supported(static_cast<Precision>(9)),
                       "9 is not a kfuse::Precision value (FP32, TF32, BF16, FP32x3)", Error);
}
