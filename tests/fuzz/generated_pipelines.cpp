// Runs generated pipelines (tests/support/random_pipelines.h) through what CI proves of them
// (tests/support/generated_check.h) for a given time, each in a child process so a crash or a
// hang is counted, not fatal; prints the counts and writes each failing pipeline to FINDINGS.
//
//   kfuse_generated_pipelines SECONDS FINDINGS [--no-column-views] [--huge-literals]
//                             [--first-seed S]
//   kfuse_generated_pipelines --replay SEED FILE
//
// --replay checks one pipeline (a finding, or a cut-down one) as the run checked seed SEED and
// prints its verdict.
// Exit status 1 when anything failed. One pipeline in 16 is a long chain (100 to 2,000 ops).
#include "tests/support/generated_check.h"
#include "tests/support/random_pipelines.h"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

using kfuse::testing::Verdict;

constexpr unsigned kHangSeconds = 120;

std::string pipeline_text(uint64_t seed, const kfuse::testing::PipelineShape &base) {
  kfuse::testing::SeededChoices choices(seed);
  kfuse::testing::PipelineShape shape = base;
  if (seed % 16 == 0) {
    shape.min_ops = 100;
    shape.max_ops = 2000;
  }
  return kfuse::testing::random_pipeline(choices, shape, fmt::format("generated_{}", seed));
}

int64_t rows_of(uint64_t seed) { return std::vector<int64_t>{1, 2, 3, 7, 16, 64}[seed % 6]; }

// The verdict of one pipeline, checked in a child: "ok", "internal error", "disagreement",
// "special values", "rejected", "crash" (a signal) or "hang"; `detail` gets the child's message.
std::string run_one(const std::string &text, uint64_t seed, std::string &detail) {
  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("pipe");
    std::exit(2);
  }
  pid_t child = fork();
  if (child < 0) {
    std::perror("fork");
    std::exit(2);
  }
  if (child == 0) {
    close(fds[0]);
    alarm(kHangSeconds);
    kfuse::testing::CheckResult r = kfuse::testing::check_generated(text, rows_of(seed), seed);
    std::string out = std::to_string(static_cast<int>(r.verdict)) + r.detail;
    ssize_t written = write(fds[1], out.data(), out.size());
    _exit(written == static_cast<ssize_t>(out.size()) ? 0 : 3);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFSIGNALED(status)) {
    detail = fmt::format("signal {}", WTERMSIG(status));
    return WTERMSIG(status) == SIGALRM ? "hang" : "crash";
  }
  if (out.empty() || WEXITSTATUS(status) != 0) {
    detail = fmt::format("exit status {}", WEXITSTATUS(status));
    return "crash"; // a sanitizer report exits with a status, not a signal
  }
  detail = out.substr(1);
  switch (static_cast<Verdict>(out[0] - '0')) {
  case Verdict::Ok:
    return "ok";
  case Verdict::InternalError:
    return "internal error";
  case Verdict::Disagreement:
    return "disagreement";
  case Verdict::SpecialValues:
    return "special values";
  case Verdict::Rejected:
    return "rejected";
  }
  return "crash";
}

int replay(const char *seed_text, const char *file) {
  std::ifstream in(file);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", file);
    return 2;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const uint64_t seed = std::strtoull(seed_text, nullptr, 10);
  std::string detail;
  const std::string verdict = run_one(text, seed, detail);
  std::printf("%s: %s\n", verdict.c_str(), detail.c_str());
  return verdict == "ok" ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 4 && std::string(argv[1]) == "--replay")
    return replay(argv[2], argv[3]);
  if (argc < 3) {
    std::fprintf(
        stderr,
        "usage: %s SECONDS FINDINGS [--no-column-views] [--huge-literals] [--first-seed S]\n"
        "       %s --replay SEED FILE\n",
        argv[0], argv[0]);
    return 2;
  }
  const double seconds = std::atof(argv[1]);
  const std::filesystem::path findings = argv[2];
  kfuse::testing::PipelineShape shape;
  uint64_t seed = 1;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-column-views")
      shape.column_views = false;
    else if (a == "--huge-literals")
      shape.huge_literals = true;
    else if (a == "--first-seed" && i + 1 < argc)
      seed = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], a.c_str());
      return 2;
    }
  }
  std::filesystem::create_directories(findings);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::map<std::string, int> counts;
  int pipelines = 0;
  for (; elapsed() < seconds; ++seed, ++pipelines) {
    const std::string text = pipeline_text(seed, shape);
    std::string detail;
    const std::string verdict = run_one(text, seed, detail);
    ++counts[verdict];
    if (verdict == "ok")
      continue;
    std::string file = fmt::format("{}/seed-{}.kf", findings.string(), seed);
    std::ofstream(file) << "// " << verdict << ": " << detail << "\n" << text;
    std::printf("seed %llu: %s: %s\n", static_cast<unsigned long long>(seed), verdict.c_str(),
                detail.substr(0, 300).c_str());
  }
  std::printf("%d pipelines in %.0f s (seeds to %llu, column views %s, huge literals %s): "
              "%d ok, %d internal errors, %d disagreements, %d disagreements on special values "
              "only, %d rejected, %d crashes, %d hangs\n",
              pipelines, elapsed(), static_cast<unsigned long long>(seed - 1),
              shape.column_views ? "on" : "off", shape.huge_literals ? "on" : "off", counts["ok"],
              counts["internal error"], counts["disagreement"], counts["special values"],
              counts["rejected"], counts["crash"], counts["hang"]);
  return counts["ok"] == pipelines ? 0 : 1;
}
