// A private KFUSE_CACHE_DIR for the duration of a test: compiled kernels and tuned configurations
// land there, and are removed with it.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

struct TempCache {
  std::string dir;
  TempCache() {
    char tmpl[] = "/tmp/kfuse-test-cache-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    setenv("KFUSE_CACHE_DIR", dir.c_str(), 1);
  }
  ~TempCache() {
    unsetenv("KFUSE_CACHE_DIR");
    std::filesystem::remove_all(dir);
  }
};
