#include "core/tools/layout_trial.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/booster/registry.h"
#include "core/common/stats.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"

namespace colossal::tools {

namespace {

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

dist::ParallelDims::Options parallel_options(const Layout& l) {
  return {.pp = l.pp, .dp = l.dp, .sp = l.sp, .tp = l.tp, .ep = l.ep, .sp_mode = l.sp_mode};
}

bool layout_satisfies(const Layout& l, int world, const std::function<void(const dist::ParallelDims&)>& rules) {
  try {
    rules(dist::ParallelDims(parallel_options(l), world));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

booster::PluginConfig plugin_config_for(const Layout& l, const booster::PluginConfig& base,
                                        std::vector<std::string>* dropped) {
  booster::PluginConfig c;
  c.device = base.device;
  c.precision = l.precision;
  c.name = l.plugin;
  if (l.plugin == "hybrid") {
    c.layout = parallel_options(l);
    c.options["zero_stage"] = l.zero_stage;
    if (l.pp > 1) c.options["num_microbatches"] = l.replica_batch / std::max<int64_t>(l.micro_batch, 1);
  }
  if (l.plugin == "gemini" && l.offload != "none") {
    c.options["placement"] = "static";
    c.options["offload_optim_frac"] = 1.0;
    c.options["offload_device"] = l.offload;
  }
  std::vector<std::string> accepted;
  for (const auto& info : booster::plugin_infos())
    if (info.name == l.plugin)
      for (const auto& o : info.options) accepted.push_back(o.name);
  for (auto it = base.options.begin(); it != base.options.end(); ++it) {
    if (c.options.contains(it.key())) continue;  // the layout decides it
    if (std::find(accepted.begin(), accepted.end(), it.key()) == accepted.end()) {
      if (dropped) dropped->push_back(it.key());
      continue;
    }
    c.options[it.key()] = it.value();
    if (auto o = base.origin.find(it.key()); o != base.origin.end()) c.origin[it.key()] = o->second;
  }
  return c;
}

double time_optimizer_steps(booster::Booster& booster, booster::Boosted& b, const Layout& l, const TrialModel& model,
                            const torch::Tensor& inputs, const torch::Tensor& targets, const TrialOptions& o) {
  std::vector<double> times;
  for (int s = 0; s < o.warmup_steps + o.steps; ++s) {
    dist::barrier(dist::world_group());
    const auto t0 = std::chrono::steady_clock::now();
    b.optimizer->zero_grad();
    if (model.microbatches > 0) {
      const int64_t rows = l.replica_batch / model.microbatches;
      booster.execute_pipeline(*b.optimizer, model.stage, inputs.split(rows), targets.split(rows));
    } else {
      for (int64_t start = 0; start < l.replica_batch; start += l.micro_batch) {
        const int64_t n = std::min(l.micro_batch, l.replica_batch - start);
        auto run = [&] { booster.backward(model.loss(inputs.narrow(0, start, n), targets.narrow(0, start, n)), *b.optimizer); };
        if (start + l.micro_batch < l.replica_batch) booster.no_sync(*b.optimizer, run);
        else run();
      }
    }
    b.optimizer->step();
    auto t = torch::tensor({seconds(t0)}, torch::kFloat64);
    dist::all_reduce(t, dist::world_group(), dist::ReduceOp::kMax);
    if (s >= o.warmup_steps) times.push_back(t.item<double>());
  }
  return median(times);
}

std::pair<double, double> time_with_and_without_checkpointing(const std::function<void(bool)>& set_checkpointing,
                                                              const std::function<void()>& step) {
  // Interleaved, and the fastest of each kept: the two are compared with each other, so a burst
  // of load from another process should hit both or neither, and the fastest run is the least
  // disturbed one. (Timed one after the other with medians, a noisy machine once made
  // checkpointing look 11% cheaper than not checkpointing.)
  std::vector<double> plain, checkpointed;
  for (int i = 0; i <= 5; ++i)
    for (bool ckpt : {false, true}) {
      set_checkpointing(ckpt);
      const auto t0 = std::chrono::steady_clock::now();
      step();
      if (i > 0) (ckpt ? checkpointed : plain).push_back(seconds(t0));  // the first pays for allocations
    }
  set_checkpointing(false);
  return {*std::min_element(plain.begin(), plain.end()), *std::min_element(checkpointed.begin(), checkpointed.end())};
}

std::pair<double, double> calibrate_from_slice(const ModelSpec& slice, int64_t rows, int64_t sequence, double plain_s,
                                               double checkpointed_s, const MachineRates& rates, SearchSpace& space) {
  auto t = torch::tensor({plain_s, checkpointed_s}, torch::kFloat64);
  dist::all_reduce(t, dist::world_group(), dist::ReduceOp::kMax);
  const double plain = t[0].item<double>(), ckpt = t[1].item<double>();
  // The FLOP count of the same slice at the rate of its shapes.
  const int64_t tokens = rows * sequence;
  const double predicted =
      flops_per_token(slice, sequence).training * static_cast<double>(tokens) / std::max(rates.matmul_rate(tokens, 1), 1.0);
  space.compute_scale = predicted > 0 ? plain / predicted : 1.0;
  // Recomputing the forward cannot make a step cheaper: a measured factor below 1 is noise.
  space.checkpoint_factor = plain > 0 ? std::max(1.0, ckpt / plain) : 4.0 / 3.0;
  return {plain, ckpt};
}

void calibrate_model_parallel(const std::function<bool(const Layout&)>& is_valid, const SliceTimer& time_slice,
                              double plain_s, SearchSpace& space) {
  const int world = dist::world_size();
  for (const std::string axis : {"tp", "sp"}) {
    const int most = axis == "tp" ? space.max_tp : world;
    for (int n = 2; n <= std::min(world, most); ++n) {
      if (world % n != 0) continue;
      Layout l;
      l.plugin = "hybrid";
      (axis == "tp" ? l.tp : l.sp) = n;
      l.sp_mode = axis == "sp" ? "all_to_all" : "none";
      l.dp = world / n;
      l.precision = space.precision;
      l.sequence = space.sequence;
      l.replica_batch = l.micro_batch;
      if (is_valid && !is_valid(l)) continue;
      booster::PluginConfig cpu;
      cpu.device = "cpu";  // where the one-rank slice ran
      auto plugin = booster::make_plugin(plugin_config_for(l, cpu));
      const auto [plain, ckpt] = time_slice(plugin->parallel_context(), n);
      auto t = torch::tensor({plain, ckpt}, torch::kFloat64);
      dist::all_reduce(t, dist::world_group(), dist::ReduceOp::kMax);
      const double split_plain = t[0].item<double>(), split_ckpt = t[1].item<double>();
      if (plain_s <= 0 || split_plain <= 0) continue;
      // n times the samples over n ranks: an ideal split takes the one-rank time.
      (axis == "tp" ? space.tp_scale : space.sp_scale)[n] = split_plain / plain_s;
      (axis == "tp" ? space.tp_checkpoint_factor : space.sp_checkpoint_factor)[n] = std::max(1.0, split_ckpt / split_plain);
    }
  }
}

}  // namespace colossal::tools
