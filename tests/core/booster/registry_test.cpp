// The plugin registry: every plugin built from a YAML file and from flags gives the same plugin;
// unknown keys, wrong types, conflicting presets and layouts a plugin cannot run are named.
#include "core/booster/registry.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "core/common/config.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::booster {
namespace {

// Non-default values for every plugin, as flag text and as YAML.
struct Case {
  std::string plugin;
  std::vector<std::pair<std::string, std::string>> settings;  // key, text
};

std::vector<Case> cases() {
  return {
      {"ddp", {{"bucket_mib", "1.5"}, {"find_unused_parameters", "true"}, {"initial_scale", "1024"}}},
      {"zero", {{"zero_stage", "1"}, {"bucket_mib", "8"}, {"cpu_offload", "true"}, {"communication_dtype", "bf16"}}},
      {"zero1", {{"bucket_mib", "2"}}},
      {"zero2", {{"bucket_mib", "3"}, {"hysteresis", "4"}}},
      {"gemini",
       {{"placement", "auto"},
        {"gathered_budget_mib", "64"},
        {"offload_optim_frac", "0.5"},
        {"offload_param_frac", "0.25"},
        {"offload_device", "nvme"},
        {"nvme_dir", "/tmp/colossal_registry_test"},
        {"prefetch", "3"},
        {"chunk_elements", "4096"}}},
      {"zero3", {{"shard_param_frac", "0.5"}}},
      {"hybrid", {{"zero_stage", "2"}, {"bucket_mib", "4"}, {"communication_dtype", "bf16"}, {"initial_scale", "512"}}},
  };
}

std::string write_yaml(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "registry_" + std::to_string(::getpid()) + "_" + name + ".yaml";
  std::ofstream(path) << text;
  return path;
}

std::string values(const Plugin& p) {
  std::string s;
  for (const auto& o : p.option_values()) s += o.name + "=" + o.default_value + " ";
  return s;
}

TEST(PluginRegistry, EveryPluginFromYamlEqualsTheSameFromFlags) {
  testing::run_ranks(1, [] {
    ASSERT_EQ(cases().size(), plugin_names().size()) << "a plugin without a case here";
    for (const auto& c : cases()) {
      std::string yaml = "plugin: " + c.plugin + "\nmixed_precision: bf16\ndevice: cpu\n";
      PluginConfig from_flags;
      from_flags.set("plugin", c.plugin, "flag --plugin");
      from_flags.set("mixed_precision", "bf16", "flag --mixed_precision");
      from_flags.set("device", "cpu", "flag --device");
      for (const auto& [k, v] : c.settings) {
        yaml += k + ": " + v + "\n";
        from_flags.set(k, v, "flag --" + k);
      }
      PluginConfig from_file;
      auto node = ConfigNode::load_file(write_yaml(c.plugin, yaml));
      from_file.read(node);
      node.check_all_keys_used();  // PluginConfig took every key
      auto a = make_plugin(from_file), b = make_plugin(from_flags);
      auto d = make_plugin(c.plugin);
      EXPECT_EQ(values(*a), values(*b)) << c.plugin;
      EXPECT_NE(values(*a), values(*d)) << c.plugin << ": the settings changed nothing";
      EXPECT_EQ(a->precision(), "bf16");
      EXPECT_EQ(b->precision(), "bf16");
      EXPECT_EQ(a->name(), b->name());
      // Each setting shows up in the running plugin's options.
      for (const auto& [k, v] : c.settings) {
        bool found = false;
        for (const auto& o : a->option_values())
          if (o.name == k) found = true;
        EXPECT_TRUE(found) << c.plugin << " has no option " << k;
      }
    }
  });
}

TEST(PluginRegistry, UnknownOptionsNameTheKeyThePluginAndWhereItCameFrom) {
  testing::run_ranks(1, [] {
    PluginConfig c;
    c.set("plugin", "ddp");
    c.set("offload_optim_frac", "0.5", "flag --offload_optim_frac");
    auto msg = testing::error_message_of([&] { make_plugin(c); });
    EXPECT_NE(msg.find("plugin 'ddp' has no option 'offload_optim_frac' (from flag --offload_optim_frac)"),
              std::string::npos) << msg;
    EXPECT_NE(msg.find("its options: bucket_mib"), std::string::npos) << msg;

    PluginConfig f;
    auto node = ConfigNode::load_file(write_yaml("typo", "plugin: gemini\nplacment: auto\n"));
    f.read(node);
    msg = testing::error_message_of([&] { make_plugin(f); });
    EXPECT_NE(msg.find("plugin 'gemini' has no option 'placment'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("key 'placment'"), std::string::npos) << msg;  // the file and key

    PluginConfig t;
    t.set("plugin", "gemini");
    t.set("prefetch", "lots", "flag --prefetch");
    msg = testing::error_message_of([&] { make_plugin(t); });
    EXPECT_NE(msg.find("key 'prefetch': expected an integer, got 'lots'"), std::string::npos) << msg;

    PluginConfig z;
    z.set("plugin", "zero1");
    z.set("zero_stage", "2", "flag --zero_stage");
    msg = testing::error_message_of([&] { make_plugin(z); });
    EXPECT_NE(msg.find("plugin 'zero1' is ZeRO stage 1 but zero_stage 2 was given (flag --zero_stage)"),
              std::string::npos) << msg;

    PluginConfig l;
    l.set("plugin", "gemini");
    l.set("tp", "2");
    msg = testing::error_message_of([&] { make_plugin(l); });
    EXPECT_NE(msg.find("tp 2"), std::string::npos) << msg;

    msg = testing::error_message_of([] { make_plugin("fsdp"); });
    EXPECT_NE(msg.find("unknown plugin 'fsdp' (known: ddp, zero, zero1, zero2, gemini, zero3, hybrid"),
              std::string::npos) << msg;
    PluginConfig d;
    d.set("device", "tpu");
    msg = testing::error_message_of([&] { make_plugin(d); });
    EXPECT_NE(msg.find("device 'tpu': expected auto, cpu, cuda or cuda:N"), std::string::npos) << msg;
  });
}

TEST(PluginRegistry, DataParallelPluginsRefuseLayoutsThatSplitTheModel) {
  testing::run_ranks(2, [] {
    for (const char* name : {"ddp", "zero2", "gemini"}) {
      PluginConfig c;
      c.set("plugin", name);
      c.set("tp", "2", "flag --tp");
      auto msg = testing::error_message_of([&] { make_plugin(c); });
      EXPECT_NE(msg.find("is data parallel only"), std::string::npos) << msg;
      EXPECT_NE(msg.find("use --plugin hybrid"), std::string::npos) << msg;
    }
    PluginConfig h;
    h.set("plugin", "hybrid");
    h.set("tp", "2");
    auto p = make_plugin(h);
    EXPECT_EQ(p->dims().tp(), 2);
    EXPECT_EQ(p->dims().dp(), 1);
    EXPECT_EQ(p->data_parallel_rank_and_size(), std::make_pair(0, 1));
  });
}

TEST(PluginRegistry, HelpListsEveryPluginAndOptionWithDefaults) {
  auto help = plugins_help();
  for (const auto& p : plugin_infos()) {
    EXPECT_NE(help.find("  " + p.name + ": "), std::string::npos) << p.name;
    for (const auto& o : p.options)
      EXPECT_NE(help.find(o.name + " (" + o.type + ", default " + o.default_value + ")"), std::string::npos)
          << p.name << "." << o.name;
  }
  EXPECT_NE(help.find("gathered_budget_mib (float, default 1024)"), std::string::npos) << help;
  EXPECT_NE(help.find("bucket_mib (float, default 25)"), std::string::npos) << help;
  // The job's general keys come from PluginConfig's declaration, with their accepted values.
  for (const auto& o : list_options(PluginConfig{}))
    EXPECT_NE(help.find("      " + o.name + " (" + o.type + ", default " + o.default_value + ")"), std::string::npos)
        << o.name;
  EXPECT_NE(help.find("sp_mode (string, default none)"), std::string::npos) << help;
  EXPECT_NE(help.find("[none, split_gather, all_to_all or ring_attn]"), std::string::npos) << help;
}

// Under hybrid, the data-parallel options are ZeRO's and DDP's own, under the same names (the
// bucket size defaulting to the wrapper's: DDP's 25 MiB, ZeRO's 48).
TEST(PluginRegistry, HybridTakesTheDataParallelOptionsOfDdpAndZero) {
  std::map<std::string, std::vector<std::string>> names;
  for (const auto& p : plugin_infos())
    for (const auto& o : p.options) names[p.name].push_back(o.name);
  auto has = [&](const std::string& plugin, const std::string& option) {
    const auto& n = names[plugin];
    return std::find(n.begin(), n.end(), option) != n.end();
  };
  for (const auto& option : names["zero2"])
    if (option != "cpu_offload") EXPECT_TRUE(has("hybrid", option)) << option;
  for (const auto& option : names["ddp"])
    if (option != "find_unused_parameters" && option != "broadcast_buffers") EXPECT_TRUE(has("hybrid", option)) << option;
  testing::run_ranks(1, [] {
    PluginConfig c;
    c.name = "hybrid";
    c.set("communication_dtype", "bf16");
    const auto message = testing::error_message_of([&] { make_plugin(c); });
    EXPECT_NE(message.find("communication_dtype 'bf16' is ZeRO's"), std::string::npos) << message;
  });
}

}  // namespace
}  // namespace colossal::booster
