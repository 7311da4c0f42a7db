// GPU tests: they need a CUDA device and exit 77 (ctest: skipped) with a message otherwise.
#define DOCTEST_CONFIG_IMPLEMENT
#include "runtime/driver.h"

#include <cstdio>
#include <cstring>
#include <doctest/doctest.h>

int main(int argc, char **argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    listing =
        listing || std::strncmp(argv[i], "--list", 6) == 0 || std::strcmp(argv[i], "-ltc") == 0;
  kfuse::rt::Driver &driver = kfuse::rt::Driver::get();
  if (!listing && !driver.available()) {
    std::printf("SKIPPED: the GPU tests need a CUDA device: %s\n",
                driver.why_unavailable().c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
