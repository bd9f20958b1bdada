// --plugin auto's search (core/tools/layout_search.h) on the shape of a model defined in the
// tests (tests/support/toy_transformer.h): the layouts it enumerates, how it ranks memory that
// does not fit, the data-parallel baseline among the trials, the user's plugin options kept, and
// the rank correlation it reports. The search against measured LLaMA steps on real ranks is in
// tests/llama (LayoutSearchMultiRank).
#include <gtest/gtest.h>

#include <set>

#include "core/booster/registry.h"
#include "core/common/check.h"
#include "core/dist/parallel_dims.h"
#include "core/tools/layout_search.h"
#include "core/tools/layout_trial.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"
#include "tests/support/toy_transformer.h"

namespace colossal::testing {
namespace {

// The toy's own rule for a layout: its attention heads split over tp.
void heads_split(const ToyTransformerShape& s, const dist::ParallelDims& dims) {
  COLOSSAL_CHECK(s.heads % dims.tp() == 0, "heads ", s.heads, " do not divide by tp ", dims.tp());
  COLOSSAL_CHECK(s.layers % dims.pp() == 0, "layers ", s.layers, " do not divide by pp ", dims.pp());
}

// Every layout listed builds on a world of that size and passes the model's rules; the obvious
// ones are there and the impossible ones are not.
TEST(LayoutSearch, EnumerationYieldsOnlyValidLayouts) {
  const ToyTransformerShape shape{.vocab = 128, .hidden = 64, .intermediate = 128, .heads = 4, .layers = 4};
  auto rules = [&](const dist::ParallelDims& dims) { heads_split(shape, dims); };
  for (int world : {1, 2, 4, 8}) {
    tools::SearchSpace space;
    space.world = world;
    space.global_batch = 8;
    space.sequence = 32;
    auto layouts = tools::enumerate_layouts(shape.spec(), space, [&](const tools::Layout& l) {
      return tools::layout_satisfies(l, world, rules);
    });
    ASSERT_FALSE(layouts.empty()) << world;
    std::set<std::string> names;
    for (const auto& l : layouts) {
      names.insert(l.describe());
      EXPECT_EQ(l.dp * l.tp * l.pp * l.sp, world) << l.describe();
      EXPECT_EQ(l.replica_batch * l.dp, space.global_batch) << l.describe();
      EXPECT_EQ(l.replica_batch % l.micro_batch, 0) << l.describe();
      const dist::ParallelDims::Options o{.pp = l.pp, .dp = l.dp, .sp = l.sp, .tp = l.tp, .ep = l.ep, .sp_mode = l.sp_mode};
      EXPECT_NO_THROW(heads_split(shape, dist::ParallelDims(o, world))) << l.describe();
      const auto pc = tools::plugin_config_for(l, booster::PluginConfig{});
      EXPECT_EQ(pc.name, l.plugin);
      EXPECT_NO_THROW(pc.layout.validate()) << l.describe();
    }
    EXPECT_TRUE(names.count("ddp dp" + std::to_string(world) + " fp32")) << world;
    if (world >= 2) EXPECT_TRUE(names.count(c10::str("zero2 dp", world, " fp32 ckpt"))) << world;
    if (world == 2) EXPECT_TRUE(names.count("hybrid zero0 dp1 tp2 fp32"));
    for (const auto& n : names) EXPECT_EQ(n.find("tp8"), std::string::npos) << "4 heads do not split 8 ways: " << n;
    if (world == 8) EXPECT_TRUE(names.count("hybrid zero0 dp1 tp4 pp2 fp32 mb2x4")) << "a valid split must be listed";
  }
}

// A small model's search space on 2 ranks, and round machine rates for it (the tests set memory).
struct TwoRankSearch {
  tools::ModelSpec spec = ToyTransformerShape{.vocab = 128, .hidden = 64, .intermediate = 128, .heads = 4, .layers = 2}.spec();
  tools::SearchSpace space{.world = 2, .global_batch = 4, .sequence = 32};
  std::vector<tools::Layout> layouts = tools::enumerate_layouts(spec, space, nullptr);
  tools::MachineRates rates = [] {
    tools::MachineRates r;
    r.matmul_flops = 1e10;
    r.all_reduce_bps[2] = 1e9;
    r.copy_bps = 1e9;
    r.p2p_bps = 1e9;
    return r;
  }();
};

TEST(LayoutSearch, MemoryThatDoesNotFitIsRankedLastAndNamed) {
  TwoRankSearch t;
  auto& [spec, space, layouts, rates] = t;
  // Enough for ZeRO-3 and pipeline halves, not for a whole replica's model state (16 bytes/param).
  const double params = static_cast<double>(tools::total_parameters(spec));
  rates.device_bytes = static_cast<int64_t>(12 * params);
  rates.host_bytes = rates.device_bytes;
  auto ranked = tools::rank_layouts(spec, layouts, rates, space);
  bool seen_unfit = false;
  for (const auto& cand : ranked) {
    if (!cand.fits) {
      seen_unfit = true;
      EXPECT_NE(cand.why_not.find("GiB available"), std::string::npos) << cand.why_not;
    } else {
      EXPECT_FALSE(seen_unfit) << "a fitting layout ranked after one that does not fit: " << cand.layout.describe();
    }
  }
  EXPECT_TRUE(seen_unfit);
  bool ddp_fits = true;
  for (const auto& cand : ranked)
    if (cand.layout.describe() == "ddp dp2 fp32") ddp_fits = cand.fits;
  EXPECT_FALSE(ddp_fits);
  // Nothing fits: the selector says so instead of trying.
  rates.device_bytes = rates.host_bytes = 1;
  auto none = tools::rank_layouts(spec, layouts, rates, space);
  auto msg = testing::error_message_of([&] { tools::select_layout(none, [](const tools::Layout&) { return 1.0; }, {}); });
  EXPECT_NE(msg.find("no layout fits the memory"), std::string::npos) << msg;
}

// The trials always include what a user would run without the search: plain DDP where it fits
// (however the cost model ranks it), else the best-predicted sharded data-parallel layout.
TEST(LayoutSearch, TheTrialsIncludeTheDataParallelBaseline) {
  TwoRankSearch t;
  auto& [spec, space, layouts, rates] = t;
  rates.all_reduce_bps[2] = 1e6;  // a slow all-reduce ranks DDP below the split layouts
  rates.device_bytes = rates.host_bytes = int64_t{1} << 34;
  auto ranked = tools::rank_layouts(spec, layouts, rates, space);
  ASSERT_NE(ranked.front().layout.plugin, "ddp") << "the test needs DDP not to be predicted first";
  std::vector<std::string> tried;
  auto record = [&](const tools::Layout& l) {
    tried.push_back(l.describe());
    return 1.0 + static_cast<double>(tried.size());  // the first tried is measured fastest
  };
  auto report = tools::select_layout(ranked, record, {.trials = 2, .budget_s = 1e9});
  ASSERT_EQ(tried.size(), 2u);
  EXPECT_EQ(tried[0], ranked.front().layout.describe());
  EXPECT_EQ(tried[1], "ddp dp2 fp32") << "DDP without checkpointing is the baseline";
  EXPECT_EQ(report.candidates.at(report.chosen).layout.describe(), tried[0]) << "the fastest measured is chosen";
  // Memory for sharded state only: DDP does not fit, a sharded pure data-parallel layout is tried.
  const double params = static_cast<double>(tools::total_parameters(spec));
  rates.device_bytes = rates.host_bytes = static_cast<int64_t>(12 * params);
  auto tight = tools::rank_layouts(spec, layouts, rates, space);
  const auto base = tools::baseline_index(tight);
  ASSERT_TRUE(base.has_value());
  const auto& l = tight[*base].layout;
  EXPECT_TRUE(tight[*base].fits);
  EXPECT_NE(l.plugin, "ddp");
  EXPECT_EQ(l.tp * l.pp * l.sp, 1) << l.describe();
}

// The user's plugin options survive --plugin auto where the chosen plugin takes them; the
// layout's own settings win; the rest are reported, not silently lost.
TEST(LayoutSearch, TheChosenPluginKeepsTheUsersOptions) {
  booster::PluginConfig user;
  user.name = "auto";
  user.set("bucket_mib", "8", "flag --bucket_mib");
  user.set("placement", "auto", "flag --placement");
  tools::Layout ddp;
  ddp.plugin = "ddp";
  std::vector<std::string> dropped;
  auto c = tools::plugin_config_for(ddp, user, &dropped);
  EXPECT_EQ(c.options.at("bucket_mib"), "8");
  EXPECT_EQ(c.origin.at("bucket_mib"), "flag --bucket_mib");
  EXPECT_FALSE(c.options.contains("placement"));
  EXPECT_EQ(dropped, std::vector<std::string>{"placement"});
  testing::run_ranks(1, [c] { EXPECT_NO_THROW(booster::make_plugin(c)); });  // the plugin takes what was kept
  tools::Layout offload;
  offload.plugin = "gemini";
  offload.offload = "cpu";
  dropped.clear();
  c = tools::plugin_config_for(offload, user, &dropped);
  EXPECT_EQ(c.options.at("placement"), "static") << "the layout's offload needs static placement";
  EXPECT_EQ(dropped, std::vector<std::string>{"bucket_mib"});
}

TEST(LayoutSearch, SpearmanRankCorrelation) {
  EXPECT_DOUBLE_EQ(tools::spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(tools::spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
  EXPECT_NEAR(tools::spearman({1, 2, 3, 4, 5}, {2, 1, 4, 3, 5}), 0.8, 1e-12);
}

}  // namespace
}  // namespace colossal::testing
