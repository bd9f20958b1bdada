// The analysis formulas (core/tools/model_analysis.h) against the models and the memory meter:
// parameter counts exactly, activation memory and model-state memory within 15%.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>
#include <map>
#include <set>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/dist/parallel_dims.h"
#include "core/dist/runtime.h"
#include "core/tools/layout_search.h"
#include "core/tools/memory_tracer.h"
#include "core/tools/model_analysis.h"
#include "llama/config.h"
#include "llama/model.h"
#include "llama/layout_trial.h"
#include "llama/parallelize.h"
#include "llama/shapes.h"
#include "tests/llama/tiny_llama.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::llama {
namespace {

struct Traced {
  int64_t layer_kept = 0;
  int64_t forward_kept = 0;
  std::string table;
};

Traced trace_forward(const LlamaConfig& c, int64_t batch, int64_t seq, bool checkpointing) {
  torch::manual_seed(0);
  LlamaForCausalLM model(c);
  model->train();
  model->set_gradient_checkpointing(checkpointing);
  auto ids = torch::randint(0, c.vocab_size, {batch, seq});
  tools::MemoryTracer tracer;
  tracer.begin_step();
  tracer.phase("forward");
  auto loss = model->loss(ids, ids);
  tracer.phase("backward");
  loss.backward();
  tracer.end_step(0);
  Traced t;
  for (const auto& row : tracer.modules())
    if (row.name == "layers.1") t.layer_kept = row.figures.kept;
  t.forward_kept = tracer.phases().at(0).second.kept;
  t.table = tracer.format();
  return t;
}

LlamaConfig shaped(int64_t h, int64_t i, int64_t heads, int64_t kv, int64_t layers = 3) {
  auto c = tiny_test_llama();
  c.hidden_size = h;
  c.intermediate_size = i;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv;
  c.num_hidden_layers = layers;
  c.max_position_embeddings = 256;
  return c;
}

void expect_within(double predicted, double measured, double tolerance, const std::string& what) {
  EXPECT_NEAR(predicted, measured, tolerance * measured)
      << what << ": predicted " << predicted << ", measured " << measured << " (" << 100 * (predicted / measured - 1) << "%)";
}

TEST(ModelAnalysis, ParameterCountsMatchTheModels) {
  auto gqa = shaped(64, 96, 8, 2);
  auto tied = shaped(48, 80, 4, 4);
  tied.tie_word_embeddings = true;
  auto moe = shaped(32, 48, 4, 2, 2);
  moe.num_local_experts = 4;
  moe.num_experts_per_tok = 2;
  for (const auto& c : {gqa, tied, moe}) {
    LlamaForCausalLM model(c);
    int64_t actual = 0;
    for (const auto& p : model->parameters()) actual += p.numel();
    EXPECT_EQ(tools::total_parameters(model_spec(c)), actual) << model_spec(c).family << " tied " << c.tie_word_embeddings;
  }
  // A MoE layer's active parameters per token: its top-k experts only.
  for (const auto& m : tools::parameters_by_module(model_spec(moe)))
    if (m.name == "layers.0.experts") EXPECT_EQ(m.active * 4, m.parameters * 2);
}

TEST(ModelAnalysis, FlopsAgreeWithTheBenchmarkArithmetic) {
  for (const char* name : {"S", "M"}) {
    auto shape = benchmark_shape(name);
    auto f = tools::flops_per_token(model_spec(shape.config), shape.sequence);
    EXPECT_NEAR(f.training, training_flops_per_token(shape.config, shape.sequence), 1e-6 * f.training) << name;
    EXPECT_DOUBLE_EQ(f.training_recompute, f.training * 4 / 3);
  }
}

// What the memory tracer measures a layer keeping for backward, against the formula, on shapes
// apart from the ones the constants were fitted on (fp32; with and without checkpointing).
TEST(ModelAnalysis, ActivationMemoryWithinFifteenPercentOfMeasured) {
  struct Case {
    int64_t h, i, heads, kv, batch, seq;
  };
  for (const Case& k : std::vector<Case>{{96, 160, 6, 2, 3, 48}, {64, 256, 4, 4, 2, 96}, {128, 192, 8, 4, 1, 128}}) {
    auto c = shaped(k.h, k.i, k.heads, k.kv);
    tools::Layout l;
    l.precision = "fp32";
    l.micro_batch = k.batch;
    l.sequence = k.seq;
    const auto predicted = tools::activation_bytes(model_spec(c), l);
    const std::string what = c10::str("h ", k.h, " i ", k.i, " heads ", k.heads, "/", k.kv, " batch ", k.batch, " seq ", k.seq);
    auto plain = trace_forward(c, k.batch, k.seq, false);
    expect_within(predicted.per_layer, plain.layer_kept, 0.15, what + ": one layer");
    expect_within(predicted.total, plain.forward_kept, 0.15, what + ": the whole forward\n" + plain.table);
    auto ckpt = trace_forward(c, k.batch, k.seq, true);
    expect_within(predicted.per_layer_checkpointed, ckpt.layer_kept, 0.15, what + ": one checkpointed layer");
    l.activation_checkpointing = true;
    expect_within(tools::activation_bytes(model_spec(c), l).total, ckpt.forward_kept, 0.15,
                  what + ": the checkpointed forward\n" + ckpt.table);
  }
}

// Model state per rank as each plugin reports holding it after a step, against the formula: two
// ranks, fp32 and bf16. (Gemini's working set of gathered chunks is reported apart and not part of
// the formula.)
TEST(ModelAnalysisMultiRank, ModelStateWithinFifteenPercentOfMeasured) {
  testing::run_ranks(2, [] {
    ::setenv("COLOSSAL_CPU_COMPUTE", "low", 1);  // bf16 storage even where this CPU would compute in fp32
    auto c = shaped(64, 160, 4, 2, 2);
    c.vocab_size = 256;
    for (const char* plugin : {"ddp", "zero1", "zero2", "gemini"}) {
      for (const char* precision : {"fp32", "bf16"}) {
        torch::manual_seed(0);
        LlamaForCausalLM model(c);
        auto opt = std::make_shared<torch::optim::AdamW>(model->parameters());
        booster::Booster booster(booster::make_plugin(plugin, precision));
        auto b = booster.boost(model.ptr(), opt);
        auto ids = torch::randint(0, c.vocab_size, {2, 16});
        b.optimizer->zero_grad();
        booster.backward(model->loss(ids, ids), *b.optimizer);
        b.optimizer->step();
        auto report = b.optimizer->model_wrapper().hooks().memory_report(*model, b.optimizer->inner());
        int64_t measured = report.total();
        for (const auto& [tier, n] : report.bytes["gathered chunks"]) measured -= n;
        tools::Layout l;
        l.plugin = plugin;
        l.dp = 2;
        l.precision = precision;
        const auto predicted = tools::model_state_bytes(model_spec(c), l);
        int64_t sum = 0;
        for (const auto& [category, tiers] : predicted)
          for (const auto& [tier, n] : tiers) sum += n;
        expect_within(static_cast<double>(sum), static_cast<double>(measured), 0.15,
                      c10::str(plugin, " ", precision, ":\n", report.format()));
      }
    }
  });
}

// --plugin auto's search space: every layout it lists builds on a world of that size and passes
// the model's rules; the obvious ones are there and the impossible ones are not.
TEST(LayoutSearch, EnumerationYieldsOnlyValidLayouts) {
  auto c = shaped(64, 128, 4, 2, 4);  // 4 heads: tp 8 cannot split them
  for (int world : {1, 2, 4, 8}) {
    tools::SearchSpace space;
    space.world = world;
    space.global_batch = 8;
    space.sequence = 32;
    auto layouts = tools::enumerate_layouts(model_spec(c), space, [&](const tools::Layout& l) {
      return layout_is_valid(c, l, world, space.sequence);
    });
    ASSERT_FALSE(layouts.empty()) << world;
    std::set<std::string> names;
    for (const auto& l : layouts) {
      names.insert(l.describe());
      EXPECT_EQ(l.dp * l.tp * l.pp * l.sp, world) << l.describe();
      EXPECT_EQ(l.replica_batch * l.dp, space.global_batch) << l.describe();
      EXPECT_EQ(l.replica_batch % l.micro_batch, 0) << l.describe();
      // Built on a fake world of that size: the layout owner accepts it, and so do the model's rules.
      dist::ParallelDims::Options o{.pp = l.pp, .dp = l.dp, .sp = l.sp, .tp = l.tp, .ep = l.ep, .sp_mode = l.sp_mode};
      EXPECT_NO_THROW(dist::ParallelDims(o, world)) << l.describe();
      EXPECT_NO_THROW(check_parallel(c, dist::ParallelDims(o, world), space.sequence)) << l.describe();
      const auto pc = tools::plugin_config_for(l, booster::PluginConfig{});
      EXPECT_EQ(pc.name, l.plugin);
      EXPECT_NO_THROW(pc.layout.validate()) << l.describe();
    }
    EXPECT_TRUE(names.count("ddp dp" + std::to_string(world) + " fp32")) << world;
    if (world >= 2) {
      EXPECT_TRUE(names.count("hybrid zero0 dp1 tp2 fp32") || world > 2) << world;
      EXPECT_TRUE(names.count(c10::str("zero2 dp", world, " fp32 ckpt"))) << world;
    }
    for (const auto& n : names) EXPECT_EQ(n.find("tp8"), std::string::npos) << "4 heads do not split 8 ways: " << n;
    if (world == 8) EXPECT_TRUE(names.count("hybrid zero0 dp1 tp4 pp2 fp32 mb2x4")) << "a valid split must be listed";
  }
}

// A small model's search space on 2 ranks, and round machine rates for it (the tests set memory).
struct TwoRankSearch {
  LlamaConfig c = shaped(64, 128, 4, 2, 2);
  tools::SearchSpace space{.world = 2, .global_batch = 4, .sequence = 32};
  std::vector<tools::Layout> layouts = tools::enumerate_layouts(model_spec(c), space, nullptr);
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
  auto& [c, space, layouts, rates] = t;
  // Enough for ZeRO-3 and pipeline halves, not for a whole replica's model state (16 bytes/param).
  const double params = static_cast<double>(tools::total_parameters(model_spec(c)));
  rates.device_bytes = static_cast<int64_t>(12 * params);
  rates.host_bytes = rates.device_bytes;
  auto ranked = tools::rank_layouts(model_spec(c), layouts, rates, space);
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
  auto none = tools::rank_layouts(model_spec(c), layouts, rates, space);
  auto msg = testing::error_message_of([&] { tools::select_layout(none, [](const tools::Layout&) { return 1.0; }, {}); });
  EXPECT_NE(msg.find("no layout fits the memory"), std::string::npos) << msg;
}

// The trials always include what a user would run without the search: plain DDP where it fits
// (however the cost model ranks it), else the best-predicted sharded data-parallel layout.
TEST(LayoutSearch, TheTrialsIncludeTheDataParallelBaseline) {
  TwoRankSearch t;
  auto& [c, space, layouts, rates] = t;
  rates.all_reduce_bps[2] = 1e6;  // a slow all-reduce ranks DDP below the split layouts
  rates.device_bytes = rates.host_bytes = int64_t{1} << 34;
  auto ranked = tools::rank_layouts(model_spec(c), layouts, rates, space);
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
  // Memory for sharded state only: DDP does not fit, a sharded pure data-parallel layout is tried.
  const double params = static_cast<double>(tools::total_parameters(model_spec(c)));
  rates.device_bytes = rates.host_bytes = static_cast<int64_t>(12 * params);
  auto tight = tools::rank_layouts(model_spec(c), layouts, rates, space);
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

// The selector on 2 and 4 ranks against an exhaustive measurement of the same (small) space: its
// pick, timed again beside every other layout (the better of two passes), is one of the two
// fastest or within 30% of the fastest (steps of tens of milliseconds on a shared 2-core machine
// vary by that much from run to run; the layouts here differ by up to 6x). CTest runs it alone.
TEST(LayoutSearchMultiRank, PickIsAmongTheMeasuredFastest) {
  for (int ranks : {2, 4}) {
    testing::run_ranks(ranks, [] {
      auto c = shaped(64, 128, 4, 4, 4);
      c.vocab_size = 256;
      const int world = dist::world_size();
      tools::SearchSpace space;
      space.world = world;
      space.global_batch = 16;
      space.sequence = 64;
      space.try_checkpointing = false;
      space.try_offload = false;
      space.plugins = {"ddp", "zero2", "hybrid"};
      tools::TrialOptions o;
      o.sequence = space.sequence;
      o.steps = 3;
      auto valid = [&](const tools::Layout& l) { return layout_is_valid(c, l, world, space.sequence); };
      auto time = [&](const tools::Layout& l) { return time_training_steps(c, l, booster::PluginConfig{}, o); };
      const auto spec = model_spec(c);
      auto ranked = tools::rank_layouts(spec, tools::enumerate_layouts(spec, space, valid), tools::measure_rates(&spec), space);
      auto report = tools::select_layout(ranked, time, {.trials = 3, .budget_s = 60});
      const std::string pick = report.candidates.at(report.chosen).layout.describe();
      // Every layout timed in two interleaved passes, each keeping its faster time (and the
      // trials' own times): one slow pass (another process on the cores) does not decide.
      std::map<std::string, double> sweep;
      for (const auto& cand : report.candidates)
        if (cand.measured_s) sweep[cand.layout.describe()] = *cand.measured_s;
      for (int pass = 0; pass < 2; ++pass)
        for (const auto& cand : ranked) {
          const double t = time(cand.layout);
          auto [it, added] = sweep.emplace(cand.layout.describe(), t);
          if (!added) it->second = std::min(it->second, t);
        }
      double best = 1e300;
      for (const auto& [name, t] : sweep) best = std::min(best, t);
      std::string table;
      for (const auto& [name, s] : sweep) table += c10::str("  ", name, " ", s, "\n");
      int faster = 0;
      for (const auto& [name, s] : sweep) faster += s < sweep.at(pick);
      EXPECT_TRUE(faster <= 1 || sweep.at(pick) <= 1.3 * best)
          << "picked " << pick << " on " << world << " ranks\n" << table << report.format();
    });
  }
}

}  // namespace
}  // namespace colossal::llama
