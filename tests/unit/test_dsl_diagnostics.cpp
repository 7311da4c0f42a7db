#include "compiler/dsl/diagnostics.h"

#include <doctest/doctest.h>

#include <string>

using namespace kfuse;

namespace {

// The text of the DiagnosticError that `report` throws.
template <class F> std::string thrown(F report) {
  try {
    report();
  } catch (const dsl::DiagnosticError &e) {
    return e.what();
  }
  FAIL("no DiagnosticError");
  return {};
}

} // namespace

TEST_CASE("diagnostics: an error shows the line with a caret and tildes under the range") {
  dsl::SourceFile src("pipe.kf", "pipeline p {\n  h = softmx(x, dim=1)\n}\n");
  dsl::Diagnostics diags(src);
  CHECK(diags.format(dsl::Severity::Error, {{2, 7}, 6}, "unknown op 'softmx'") ==
        "pipe.kf:2:7: error: unknown op 'softmx'\n"
        "  h = softmx(x, dim=1)\n"
        "      ^~~~~~\n");
  try {
    diags.error({{2, 7}, 6}, "unknown op 'softmx'");
    FAIL("error() returned");
  } catch (const dsl::DiagnosticError &e) {
    CHECK(e.loc.line == 2);
    CHECK(e.loc.col == 7);
    CHECK(e.message == "unknown op 'softmx'");
  }
}

TEST_CASE("diagnostics: notes follow the error") {
  dsl::SourceFile src("pipe.kf", "input x: f32[4]\nparam x: f32[4]\n");
  dsl::Diagnostics diags(src);
  CHECK(thrown([&] {
          diags.error({{2, 7}, 1}, "redefinition of 'x'",
                      {{{{1, 7}, 1}, "previous definition is here"}});
        }) == "pipe.kf:2:7: error: redefinition of 'x'\n"
              "param x: f32[4]\n"
              "      ^\n"
              "pipe.kf:1:7: note: previous definition is here\n"
              "input x: f32[4]\n"
              "      ^\n");
}

TEST_CASE("diagnostics: length 0 underlines the identifier at the location") {
  dsl::SourceFile src("pipe.kf", "  h = batchnorm(x, rm, rv)\n");
  dsl::Diagnostics diags(src);
  CHECK(diags.format(dsl::Severity::Error, ir::SourceLoc{1, 7}, "m") ==
        "pipe.kf:1:7: error: m\n  h = batchnorm(x, rm, rv)\n      ^~~~~~~~~\n");
  CHECK(diags.format(dsl::Severity::Error, ir::SourceLoc{1, 16}, "m") ==
        "pipe.kf:1:16: error: m\n  h = batchnorm(x, rm, rv)\n               ^\n");
}

TEST_CASE("diagnostics: without a location or a source") {
  dsl::SourceFile src("pipe.kf", "x\n");
  CHECK(dsl::Diagnostics(src).format(dsl::Severity::Error, {}, "no outputs") ==
        "pipe.kf: error: no outputs\n");
  CHECK(dsl::Diagnostics().format(dsl::Severity::Note, {}, "see here") == "note: see here\n");
  CHECK(thrown([] { dsl::Diagnostics().error({}, "cannot read 'a.kf'"); }) ==
        "error: cannot read 'a.kf'\n");
}

TEST_CASE("diagnostics: tabs, control characters and UTF-8 keep the caret aligned") {
  dsl::SourceFile src("t.kf", "\th\t= f(\x01y)\n# \xc3\xa9\xc3\xa9 z\n");
  dsl::Diagnostics diags(src);
  // Tabs are copied into the caret line; a control byte shows as <U+XXXX>, 8 columns.
  CHECK(diags.format(dsl::Severity::Error, {{1, 9}, 1}, "m") ==
        "t.kf:1:9: error: m\n\th\t= f(<U+0001>y)\n\t \t" + std::string(12, ' ') + "^\n");
  CHECK(diags.format(dsl::Severity::Error, {{1, 8}, 1}, "m") ==
        "t.kf:1:8: error: m\n\th\t= f(<U+0001>y)\n\t \t    ^" + std::string(7, '~') + "\n");
  // A two-byte UTF-8 character takes one column.
  CHECK(diags.format(dsl::Severity::Error, {{2, 8}, 1}, "m") ==
        "t.kf:2:8: error: m\n# \xc3\xa9\xc3\xa9 z\n     ^\n");
}

TEST_CASE("diagnostics: a caret just past the end of the line, and a range cut at its end") {
  dsl::SourceFile src("t.kf", "return h\r\n");
  dsl::Diagnostics diags(src);
  CHECK(diags.format(dsl::Severity::Error, {{1, 9}, 0}, "expected '}'") ==
        "t.kf:1:9: error: expected '}'\nreturn h\n        ^\n");
  CHECK(diags.format(dsl::Severity::Error, {{1, 8}, 40}, "m") ==
        "t.kf:1:8: error: m\nreturn h\n       ^\n");
}

TEST_CASE("source: line lookup") {
  dsl::SourceFile src("t.kf", "a\r\nbb\n\nccc");
  CHECK(src.line_count() == 4);
  CHECK(src.line(1) == "a");
  CHECK(src.line(2) == "bb");
  CHECK(src.line(3) == "");
  CHECK(src.line(4) == "ccc");
  CHECK(src.line(0) == "");
  CHECK(src.line(5) == "");
}

TEST_CASE("source: a file that cannot be read is reported with its path") {
  CHECK(thrown([] { dsl::SourceFile::read("/nonexistent/dir/p.kf"); }) ==
        "error: cannot read '/nonexistent/dir/p.kf': No such file or directory\n");
  CHECK(thrown([] { dsl::SourceFile::read(KFUSE_SOURCE_DIR "/examples"); }) ==
        "error: cannot read '" KFUSE_SOURCE_DIR "/examples': Is a directory\n");
  dsl::SourceFile ex = dsl::SourceFile::read(KFUSE_SOURCE_DIR "/examples/gemm_scale_bn.kf");
  CHECK(ex.name() == KFUSE_SOURCE_DIR "/examples/gemm_scale_bn.kf");
  CHECK(ex.text().find("pipeline gemm_scale_bn") != std::string::npos);
}
