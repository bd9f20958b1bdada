#include "core/common/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "core/common/check.h"
#include "tests/support/errors.h"

namespace colossal {
namespace {

// A component written the way every Options struct is.
struct DemoOptions {
  int64_t bucket_bytes = 25 << 20;
  double timeout_s = 60;
  bool overlap = true;
  std::string name = "ddp";
  std::vector<int64_t> dims = {1, 2};
  void read(const ConfigNode& c) {
    c.read("bucket_bytes", bucket_bytes);
    c.read("timeout_s", timeout_s);
    c.read("overlap", overlap);
    c.read("name", name);
    c.read("dims", dims);
  }
};

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Config, JsonAndYamlFillTheSameOptions) {
  auto json = ConfigNode::parse(
      R"({"ddp": {"bucket_bytes": 1024, "timeout_s": 2.5, "overlap": false, "name": "x", "dims": [4, 8]}})",
      "json", "json text");
  auto yaml = ConfigNode::parse("ddp:\n  bucket_bytes: 1024\n  timeout_s: 2.5\n  overlap: false\n"
                                "  name: x\n  dims: [4, 8]\n",
                                "yaml", "yaml text");
  for (const auto& cfg : {json, yaml}) {
    DemoOptions o;
    o.read(cfg.child("ddp"));
    EXPECT_EQ(o.bucket_bytes, 1024);
    EXPECT_DOUBLE_EQ(o.timeout_s, 2.5);
    EXPECT_FALSE(o.overlap);
    EXPECT_EQ(o.name, "x");
    EXPECT_EQ(o.dims, (std::vector<int64_t>{4, 8}));
    EXPECT_NO_THROW(cfg.check_all_keys_used());
  }
}

TEST(Config, AbsentKeysKeepDefaults) {
  auto cfg = ConfigNode::parse("{}", "json", "empty");
  DemoOptions o;
  o.read(cfg.child("ddp"));
  EXPECT_EQ(o.bucket_bytes, 25 << 20);
  EXPECT_EQ(o.name, "ddp");
}

TEST(Config, WrongTypeNamesFileKeyAndExpectedType) {
  auto path = write_temp("bad_type.yaml", "ddp:\n  bucket_bytes: lots\n");
  auto cfg = ConfigNode::load_file(path);
  DemoOptions o;
  auto msg = testing::error_message_of([&] { o.read(cfg.child("ddp")); });
  EXPECT_NE(msg.find("bad_type.yaml"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'ddp.bucket_bytes'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected an integer, found a string"), std::string::npos) << msg;
}

TEST(Config, QuotedYamlScalarStaysAString) {
  auto cfg = ConfigNode::parse("n: \"42\"\n", "yaml", "q");
  int64_t n = 0;
  auto msg = testing::error_message_of([&] { cfg.read("n", n); });
  EXPECT_NE(msg.find("expected an integer, found a string"), std::string::npos) << msg;
  std::string s;
  cfg.read("n", s);
  EXPECT_EQ(s, "42");
}

TEST(Config, FractionIsNotAnInteger) {
  auto cfg = ConfigNode::parse(R"({"n": 3.5, "small": 5000000000})", "json", "t");
  int64_t n = 0;
  EXPECT_NE(testing::error_message_of([&] { cfg.read("n", n); }).find("expected an integer, found a number"),
            std::string::npos);
  int small = 0;
  EXPECT_NE(testing::error_message_of([&] { cfg.read("small", small); }).find("fits in 32 bits"),
            std::string::npos);
}

TEST(Config, ListElementErrorsNameTheIndex) {
  auto cfg = ConfigNode::parse(R"({"dims": [1, "two"]})", "json", "t");
  std::vector<int64_t> dims;
  auto msg = testing::error_message_of([&] { cfg.read("dims", dims); });
  EXPECT_NE(msg.find("'dims[1]'"), std::string::npos) << msg;
}

TEST(Config, UnknownKeysAreListedTogether) {
  auto cfg = ConfigNode::parse(R"({"ddp": {"bucket_bytes": 1, "bucket_byte": 2}, "zero": 1})",
                               "json", "file 'train.json'");
  DemoOptions o;
  o.read(cfg.child("ddp"));
  auto msg = testing::error_message_of([&] { cfg.check_all_keys_used(); });
  EXPECT_NE(msg.find("'ddp.bucket_byte'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'zero'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train.json"), std::string::npos) << msg;
}

TEST(Config, ParseErrorsNameFileAndLine) {
  auto path = write_temp("broken.yaml", "a: 1\nb: [1, 2\n");
  auto msg = testing::error_message_of([&] { ConfigNode::load_file(path); });
  EXPECT_NE(msg.find("broken.yaml"), std::string::npos) << msg;
  EXPECT_NE(msg.find("invalid YAML at line"), std::string::npos) << msg;
  auto jpath = write_temp("broken.json", "{\"a\": }");
  auto jmsg = testing::error_message_of([&] { ConfigNode::load_file(jpath); });
  EXPECT_NE(jmsg.find("broken.json"), std::string::npos) << jmsg;
  EXPECT_NE(jmsg.find("invalid JSON"), std::string::npos) << jmsg;
}

TEST(Config, MissingFileAndUnknownExtension) {
  EXPECT_NE(testing::error_message_of([] { ConfigNode::load_file("/nonexistent/x.json"); })
                .find("cannot open config file '/nonexistent/x.json'"),
            std::string::npos);
  auto path = write_temp("conf.toml", "a = 1");
  EXPECT_NE(testing::error_message_of([&] { ConfigNode::load_file(path); }).find("expected a .json, .yaml"),
            std::string::npos);
}

TEST(Config, ChildMustBeAMapping) {
  auto cfg = ConfigNode::parse(R"({"ddp": 3})", "json", "t");
  EXPECT_NE(testing::error_message_of([&] { cfg.child("ddp"); }).find("expected a mapping, found an integer"),
            std::string::npos);
}

}  // namespace
}  // namespace colossal
