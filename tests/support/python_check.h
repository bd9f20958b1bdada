#pragma once
// Checks that run the project's python (transformers, safetensors) on files a test wrote.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace colossal::testing {

/// An empty directory under gtest's temp dir, named for `name` and this process.
inline std::string fresh_temp_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + name + "_" + std::to_string(::getpid());
  (void)!std::system(("rm -rf '" + d + "' && mkdir -p '" + d + "'").c_str());
  return d;
}

/// Writes `script` to `dir`/check.py and runs it with `python`, `dir` as its argument; the
/// command line when it fails (its output goes to the test's log), "" when it succeeds.
inline std::string run_python_check(const std::string& python, const std::string& script, const std::string& dir) {
  const std::string path = dir + "/check.py";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return "cannot write " + path;
  std::fputs(script.c_str(), f);
  std::fclose(f);
  const std::string cmd = python + " " + path + " " + dir + " 2>&1";
  return std::system(cmd.c_str()) == 0 ? "" : cmd;
}

}  // namespace colossal::testing
