// The `kfuse` command line: dispatches to one subcommand.
#include "compiler/dsl/diagnostics.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

namespace {

struct Command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
};

const Command kCommands[] = {
    {"check", kfuse::tool::cmd_check, "parse and verify a .kf file, print the inferred shapes"},
    {"plan", kfuse::tool::cmd_plan, "show the kernels the planner makes and why"},
    {"emit", kfuse::tool::cmd_emit, "print the generated CUDA source"},
    {"compile", kfuse::tool::cmd_compile,
     "compile with NVRTC through the disk cache, show resources"},
    {"run", kfuse::tool::cmd_run,
     "run on the GPU on random or .npy inputs, compare with the fp64 reference"},
    {"bench", kfuse::tool::cmd_bench, "time fused vs unfused vs cuBLAS's GEMM alone on the GPU"},
    {"tune", kfuse::tool::cmd_tune,
     "time each GEMM's candidate configs on the GPU, store the fastest"},
    {"grad", kfuse::tool::cmd_grad,
     "print the backward graph: gradients of inputs and params, what the forward saves"},
    {"eval-op", kfuse::tool::cmd_eval_op,
     "evaluate one expression with the fp64 reference (stdin)"},
};

void usage(std::FILE *out) {
  std::fprintf(out, "usage: kfuse <command> FILE.kf [options]\n\ncommands:\n");
  for (const Command &c : kCommands)
    std::fprintf(out, "  %-8s %s\n", c.name, c.summary);
  std::fprintf(out, "\nEach option is given at most once (--dim once per name). '--' ends the "
                    "options:\nevery later argument is a file or expression, even one that "
                    "starts with '-'.\n");
}

// `status`, unless what went to standard output was lost (a full disk, `> /dev/full`, a closed
// descriptor): then a message and a failure (1 where the command succeeded), so that no command
// reports success for output nobody got. Buffered output fails only when flushed, so this runs
// after every command, whatever it printed with.
int checked_stdout(const char *command, int status) {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout))
    return status;
  std::fprintf(stderr, "kfuse%s%s: error: cannot write to standard output: %s\n",
               *command ? " " : "", command, std::strerror(errno ? errno : EIO));
  return status != 0 ? status : 1;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return checked_stdout("", argc < 2 ? 2 : 0);
  }
  for (const Command &c : kCommands)
    if (!std::strcmp(argv[1], c.name)) {
      try {
        return checked_stdout(c.name, c.run(argc, argv));
      } catch (const kfuse::dsl::DiagnosticError &e) {
        std::fputs(e.what(), stderr); // already file:line:col: error: ... with a caret
        return 1;
      } catch (const kfuse::tool::UsageError &e) {
        std::fprintf(stderr, "kfuse %s: %s\n", c.name, e.what());
        return 2;
      } catch (const std::exception &e) {
        std::fprintf(stderr, "kfuse %s: error: %s\n", c.name, e.what());
        return 1;
      }
    }
  std::fprintf(stderr, "kfuse: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
