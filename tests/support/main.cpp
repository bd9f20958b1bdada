// Shared main for the test binaries. In a rank process started by the multi-rank harness the
// same binary runs exactly one test (its --gtest_filter), so output stays short.
//
// Scratch space: each test process (not its rank processes, which inherit the variable) gets a
// fresh directory for ::testing::TempDir() through TEST_TMPDIR, removed when every test passed
// and kept, with its path printed, when one failed or COLOSSAL_TEST_KEEP_TMPDIR is set. Tests
// write checkpoints, corpora and logs there under names of their own; without this they piled
// up in the machine's shared /tmp (thousands of entries after a few suite runs).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/common/fs.h"  // not std::filesystem: see fs.h
#include "tests/support/multirank.h"

namespace {

std::string make_scratch_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/colossal-tests-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) return "";  // fall back to gtest's default
  return pattern;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string scratch;
  if (!colossal::testing::is_rank_process()) {
    scratch = make_scratch_dir();
    if (!scratch.empty()) ::setenv("TEST_TMPDIR", scratch.c_str(), 1);
  }
  int rc = RUN_ALL_TESTS();
  if (!scratch.empty()) {
    if (rc == 0 && std::getenv("COLOSSAL_TEST_KEEP_TMPDIR") == nullptr) {
      try {
        colossal::fs::remove_all(scratch);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[test] %s\n", e.what());  // a leftover is no test failure
      }
    } else {
      std::fprintf(stderr, "[test] scratch files kept in %s\n", scratch.c_str());
    }
  }
  return rc;
}
