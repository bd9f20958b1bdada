// Check macro, logging and environment helpers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>

#include <sys/resource.h>

#include <cstring>

#include "core/common/allocator.h"
#include "core/common/check.h"
#include "tests/support/errors.h"
#include "core/common/env.h"
#include "core/common/log.h"
#include "core/common/process_info.h"

namespace colossal {
namespace {

// Sets an environment variable for the scope of a test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A freed 64 MiB block is reused by the next request, not faulted in again page by page.
TEST(Allocator, FreedLargeBlocksAreReusedWithoutPageFaults) {
  if (!keep_freed_memory()) GTEST_SKIP() << "malloc is left as the user set it";
  const size_t n = size_t{64} << 20;
  auto touch = [n] {
    auto* p = static_cast<char*>(std::malloc(n));
    std::memset(p, 1, n);
    asm volatile("" : : "g"(p) : "memory");  // the writes are observed: the compiler keeps them
    return p;
  };
  std::free(touch());  // the first time, the pages come from the kernel
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  char* p = touch();
  getrusage(RUSAGE_SELF, &after);
  std::free(p);
  EXPECT_LT(after.ru_minflt - before.ru_minflt, 1000) << "64 MiB is 16384 pages: they were faulted in again";
}

TEST(Check, MessageCarriesTheRank) {
  set_process_rank(5);
  auto msg = testing::error_message_of([] { COLOSSAL_CHECK(1 + 1 == 3, "expected ", 3, ", got ", 2); });
  set_process_rank(0);
  EXPECT_NE(msg.find("[rank 5] expected 3, got 2"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("Exception raised from"), std::string::npos) << "backtrace leaked: " << msg;
}

TEST(Check, PassingCheckDoesNotEvaluateTheMessage) {
  int evaluated = 0;
  auto expensive = [&] { return ++evaluated; };
  COLOSSAL_CHECK(true, "never ", expensive());
  EXPECT_EQ(evaluated, 0);
}

TEST(Log, LevelNamesAndErrors) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::kWarn);
  EXPECT_NE(testing::error_message_of([] { parse_log_level("loud"); }).find("got 'loud'"), std::string::npos);
}

TEST(Log, RankFilterAndLevelThreshold) {
  ScopedEnv level("COLOSSAL_LOG_LEVEL", "warn");
  ScopedEnv ranks("COLOSSAL_LOG_RANKS", nullptr);
  set_process_rank(0);
  EXPECT_FALSE(log_enabled(LogLevel::kInfo));
  EXPECT_TRUE(log_enabled(LogLevel::kWarn));
  set_process_rank(3);
  EXPECT_FALSE(log_enabled(LogLevel::kWarn)) << "rank 3 must be quiet by default";
  EXPECT_TRUE(log_enabled(LogLevel::kWarn, /*all_ranks=*/true));
  {
    ScopedEnv list("COLOSSAL_LOG_RANKS", "1,3");
    EXPECT_TRUE(log_enabled(LogLevel::kWarn));
  }
  {
    ScopedEnv all("COLOSSAL_LOG_RANKS", "all");
    EXPECT_TRUE(log_enabled(LogLevel::kError));
  }
  set_process_rank(0);
}

TEST(Env, IntegersFlagsAndErrors) {
  ScopedEnv a("COLOSSAL_TEST_INT", "42");
  ScopedEnv b("COLOSSAL_TEST_BAD", "4x");
  ScopedEnv c("COLOSSAL_TEST_FLAG", "True");
  ScopedEnv d("COLOSSAL_TEST_UNSET", nullptr);
  EXPECT_EQ(env_int("COLOSSAL_TEST_INT"), 42);
  EXPECT_FALSE(env_int("COLOSSAL_TEST_UNSET").has_value());
  EXPECT_EQ(env_flag("COLOSSAL_TEST_FLAG"), true);
  auto msg = testing::error_message_of([] { env_int("COLOSSAL_TEST_BAD"); });
  EXPECT_NE(msg.find("COLOSSAL_TEST_BAD: expected an integer, got '4x'"), std::string::npos)
      << msg;
  EXPECT_NE(testing::error_message_of([] { env_flag("COLOSSAL_TEST_INT"); }).find("expected a flag"),
            std::string::npos);
}

}  // namespace
}  // namespace colossal
