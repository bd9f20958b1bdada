// Shared main for the test binaries. In a rank process started by the multi-rank harness the
// same binary runs exactly one test (its --gtest_filter), so output stays short.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
