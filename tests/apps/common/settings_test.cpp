// One declaration per setting (apps/common/settings.h): a setting added to a declaration is a
// flag with its help, default and range, a config-file key, a range error and a name in the
// unknown-key error, with no other line written.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "apps/common/app_entry.h"
#include "apps/common/settings.h"
#include "apps/common/train_loop.h"
#include "tests/support/errors.h"

namespace apps_settings_test {
namespace apps = colossal::apps;
using colossal::testing::error_message_of;

struct Settings {
  int64_t batch_size = 8;
  std::string mode = "pretrain";
  apps::TrainLoopOptions loop;
  colossal::booster::PluginConfig plugin;
  std::string config;
  template <class V>
  void visit(V& v) {
    v("batch_size", batch_size, "samples per rank", colossal::at_least(1));
    v("mode", mode, "what the data is", colossal::one_of({"pretrain", "sft"}));
    loop.visit(v);
  }
  void validate() const {}
};

// The same settings and one more: the only line added is its declaration.
struct SettingsWithOneMore : Settings {
  double warmth = 0.5;
  template <class V>
  void visit(V& v) {
    Settings::visit(v);
    v("warmth", warmth, "how warm the start is", colossal::between(0, 1));
  }
};

struct WithFlag : Settings {
  bool fast = false;
  template <class V>
  void visit(V& v) {
    Settings::visit(v);
    v("fast", fast, "go fast");
  }
};

template <class S>
struct Parsed {
  bool go_on = false;
  int exit_code = -1;
  std::string out;
  S settings;
};

template <class S>
Parsed<S> parse(const std::vector<std::string>& args) {
  Parsed<S> p;
  ::testing::internal::CaptureStdout();
  try {
    p.go_on = apps::with_argv("toy_trainer", args, [&](int argc, char** argv) {
      return apps::parse_settings(argc, argv, "A toy trainer", p.settings, p.exit_code);
    });
  } catch (...) {
    ::testing::internal::GetCapturedStdout();
    throw;
  }
  p.out = ::testing::internal::GetCapturedStdout();
  return p;
}

std::string write_config(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(AppSettings, ANewSettingIsAFlagAKeyARangeAndAKnownName) {
  // --help lists it with its default and range; the settings without it do not.
  const auto help = parse<SettingsWithOneMore>({"--help"});
  EXPECT_FALSE(help.go_on);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--warmth FLOAT=0.5"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("how warm the start is [in [0, 1]]"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--batch_size INT=8"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--grad_clip"), std::string::npos) << "the loop's settings: " << help.out;
  EXPECT_EQ(parse<Settings>({"--help"}).out.find("--warmth"), std::string::npos);

  // A flag, and a config-file key that the flag overrides.
  EXPECT_DOUBLE_EQ(parse<SettingsWithOneMore>({"--warmth", "0.25"}).settings.warmth, 0.25);
  const auto file = write_config("settings_warmth.yaml", "warmth: 0.75\nbatch_size: 4\nmax_steps: 9\n");
  auto from_file = parse<SettingsWithOneMore>({"--config", file});
  EXPECT_DOUBLE_EQ(from_file.settings.warmth, 0.75);
  EXPECT_EQ(from_file.settings.batch_size, 4);
  EXPECT_EQ(from_file.settings.loop.max_steps, 9);
  EXPECT_DOUBLE_EQ(parse<SettingsWithOneMore>({"--config", file, "--warmth", "0.1"}).settings.warmth, 0.1);

  // Its range, from flags and from files alike.
  EXPECT_NE(error_message_of([] { parse<SettingsWithOneMore>({"--warmth", "2"}); })
                .find("--warmth: expected in [0, 1], got 2"),
            std::string::npos);
  const auto hot = write_config("settings_hot.json", R"({"warmth": -1})");
  EXPECT_NE(error_message_of([&] { parse<SettingsWithOneMore>({"--config", hot}); })
                .find("--warmth: expected in [0, 1], got -1"),
            std::string::npos);

  // A misspelt key names the file, the key and the settings there are, the new one among them.
  const auto typo = write_config("settings_typo.yaml", "wormth: 0.3\n");
  const auto message = error_message_of([&] { parse<SettingsWithOneMore>({"--config", typo}); });
  EXPECT_NE(message.find("settings_typo.yaml"), std::string::npos) << message;
  EXPECT_NE(message.find("unknown key 'wormth'"), std::string::npos) << message;
  EXPECT_NE(message.find("warmth"), std::string::npos) << message;
  // Without the declaration the key is unknown.
  const auto warm = write_config("settings_warm.yaml", "warmth: 0.3\n");
  EXPECT_NE(error_message_of([&] { parse<Settings>({"--config", warm}); }).find("unknown key 'warmth'"),
            std::string::npos);
}

TEST(AppSettings, ChoicesRangesAndPluginKeys) {
  EXPECT_NE(error_message_of([] { parse<Settings>({"--mode", "rl"}); }).find("--mode: expected pretrain or sft, got 'rl'"),
            std::string::npos);
  EXPECT_NE(error_message_of([] { parse<Settings>({"--accumulation_steps", "0"}); })
                .find("--accumulation_steps: expected >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(error_message_of([] { parse<Settings>({"--batch_size", "many"}); }).find("--batch_size"), std::string::npos);
  // The plugin's keys pass through to the plugin configuration, flags over the file.
  const auto file = write_config("settings_plugin.yaml", "plugin: zero2\nbucket_mib: 8\nmixed_precision: bf16\n");
  auto p = parse<Settings>({"--config", file, "--plugin", "ddp"});
  EXPECT_EQ(p.settings.plugin.name, "ddp");
  EXPECT_EQ(p.settings.plugin.precision, "bf16");
  EXPECT_EQ(p.settings.plugin.options.at("bucket_mib").get<int>(), 8);
  // Booleans: --flag, --flag=false (what the Python functions write).
  EXPECT_TRUE(parse<WithFlag>({"--fast"}).settings.fast);
  EXPECT_FALSE(parse<WithFlag>({"--fast=false"}).settings.fast);
}

TEST(AppSettings, ListedWithTypesDefaultsAndRules) {
  const auto info = colossal::list_options(SettingsWithOneMore{});
  ASSERT_GE(info.size(), 3u);
  EXPECT_EQ(info.back().name, "warmth");
  EXPECT_EQ(info.back().type, "float");
  EXPECT_EQ(info.back().default_value, "0.5");
  EXPECT_EQ(info.back().rule, "in [0, 1]");
  EXPECT_EQ(colossal::strictly_between(0, 1).text(), "in (0, 1)");
  EXPECT_EQ(colossal::at_least(1e8).text(), ">= 100000000");
  EXPECT_EQ(colossal::one_of({"a", "b", "c"}).text(), "a, b or c");
}

}  // namespace apps_settings_test
