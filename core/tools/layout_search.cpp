#include "core/tools/layout_search.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>
#include <unistd.h>

#include "core/common/check.h"
#include "core/common/stats.h"
#include "core/common/progress.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/parallel/pipeline/stage_split.h"

namespace colossal::tools {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A rate measured per group size, for a group of n: the nearest measured size at or above n, else
// the largest measured; nothing when none was measured.
std::optional<double> at_group_size(const std::map<int, double>& measured, int n) {
  if (measured.empty()) return std::nullopt;
  auto it = measured.lower_bound(n);
  if (it == measured.end()) it = std::prev(measured.end());
  return it->second;
}

int64_t available_host_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
}

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", bytes / (1LL << 30));
  return buf;
}

// The share of a step's compute the costliest pipeline stage does: the decoder layers (each an
// equal share of `per_token` after the head) split by cost over the stages, the head (`head`, its
// per-token cost) on the last.
double largest_stage_share(const ModelSpec& spec, const Layout& l, double per_token, double head) {
  if (l.pp <= 1 || spec.layers < l.pp || per_token <= 0) return 1.0 / std::max(l.pp, 1);
  head = std::min(head, per_token);
  parallel::pipeline::StageCosts costs;
  costs.layers.assign(static_cast<size_t>(spec.layers), (per_token - head) / static_cast<double>(spec.layers));
  costs.last = head;
  const auto ranges = parallel::pipeline::split_layers_by_cost(costs, l.pp);
  double largest = 0;
  for (size_t s = 0; s < ranges.size(); ++s) {
    double cost = static_cast<double>(ranges[s].second - ranges[s].first) * costs.layers.front();
    if (s + 1 == ranges.size()) cost += head;
    largest = std::max(largest, cost);
  }
  return largest / per_token;
}

}  // namespace

std::string MachineRates::describe() const {
  std::string out = c10::str("matmul ", matmul_flops / 1e9, " GFLOP/s per rank; all-reduce");
  for (const auto& [n, bps] : all_reduce_bps) {
    auto lat = all_reduce_latency_s.find(n);
    out += c10::str(" ", n, " ranks ", bps / 1e9, " GB/s (", lat == all_reduce_latency_s.end() ? 0.0 : lat->second * 1e6, " us);");
  }
  for (const auto& [n, bps] : reduce_scatter_bps) {
    auto ag = all_gather_bps.find(n);
    out += c10::str(" reduce-scatter/all-gather ", n, " ranks ", bps / 1e9, "/",
                    ag == all_gather_bps.end() ? 0.0 : ag->second / 1e9, " GB/s;");
  }
  out += c10::str(" p2p ", p2p_bps / 1e9, " GB/s; copy ", copy_bps / 1e9, " GB/s; memory per rank ", gib(device_bytes),
                  " GiB");
  return out;
}

double MachineRates::matmul_rate(int64_t rows, int tp) const {
  // Interpolated in log(rows) between the measured points of this tp (the nearest tp measured).
  std::vector<std::pair<double, double>> pts;
  int best_tp = 0;
  for (const auto& [key, rate] : matmul_curve)
    if (best_tp == 0 || std::abs(key.second - tp) < std::abs(best_tp - tp)) best_tp = key.second;
  for (const auto& [key, rate] : matmul_curve)
    if (key.second == best_tp) pts.emplace_back(std::log(static_cast<double>(key.first)), rate);
  if (pts.empty()) return matmul_flops;
  const double x = std::log(static_cast<double>(std::max<int64_t>(rows, 1)));
  if (x <= pts.front().first) return pts.front().second;
  if (x >= pts.back().first) return pts.back().second;
  for (size_t k = 1; k < pts.size(); ++k)
    if (x <= pts[k].first) {
      const double f = (x - pts[k - 1].first) / (pts[k].first - pts[k - 1].first);
      return pts[k - 1].second + f * (pts[k].second - pts[k - 1].second);
    }
  return pts.back().second;
}

MachineRates measure_rates(const ModelSpec* spec) {
  MachineRates r;
  const int world = dist::world_size(), me = dist::rank();
  if (spec && spec->hidden > 0 && spec->intermediate > 0) {
    std::vector<std::pair<int64_t, int>> keys;
    for (int tp = 1; tp <= std::min(world, 8); tp *= 2)
      for (int64_t rows : {16, 64, 256, 1024, 4096}) keys.emplace_back(rows, tp);
    auto rates = torch::zeros({static_cast<int64_t>(keys.size())}, torch::kFloat64);
    for (size_t k = 0; k < keys.size(); ++k) {
      const auto [rows, tp] = keys[k];
      const int64_t cols = std::max<int64_t>(spec->intermediate / tp, 1);
      auto a = torch::randn({rows, spec->hidden}), b = torch::randn({spec->hidden, cols});
      std::vector<double> times;
      const int reps = rows >= 1024 ? 3 : 10;
      for (int i = 0; i <= reps; ++i) {
        auto t = Clock::now();
        auto c = torch::mm(a, b);
        if (i > 0) times.push_back(seconds_since(t));
      }
      rates[static_cast<int64_t>(k)] = 2.0 * rows * spec->hidden * cols / std::max(median(times), 1e-9);
    }
    dist::all_reduce(rates, dist::world_group(), dist::ReduceOp::kMin);  // the slowest rank sets the pace
    for (size_t k = 0; k < keys.size(); ++k) r.matmul_curve[keys[k]] = rates[static_cast<int64_t>(k)].item<double>();
  }
  // Matrix products: the slowest rank's rate (a job runs at its pace).
  auto mm = torch::tensor({measure_matmul_gflops() * 1e9}, torch::kFloat64);
  dist::all_reduce(mm, dist::world_group(), dist::ReduceOp::kMin);
  r.matmul_flops = mm.item<double>();
  // All-reduce of a 4 MiB buffer on groups of 2, 4, ... ranks (median of 5, after one warm-up).
  const int64_t elems = 1 << 20;
  std::vector<int> sizes;
  for (int g = 2; g <= world; g *= 2) sizes.push_back(g);
  if (world > 1 && (world & (world - 1)) != 0) sizes.push_back(world);
  const int64_t n_sizes = static_cast<int64_t>(sizes.size());
  // All-reduce bandwidths, latencies, reduce-scatter and all-gather bandwidths, then p2p.
  auto rates = torch::zeros({4 * n_sizes + 1}, torch::kFloat64);
  const int64_t p2p_slot = 4 * n_sizes;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<int> members(sizes[k]);
    std::iota(members.begin(), members.end(), 0);
    auto group = dist::new_group(members, "rates" + std::to_string(sizes[k]));
    if (!group.is_member()) continue;
    auto buf = torch::ones({elems});
    std::vector<double> times;
    for (int i = 0; i < 6; ++i) {
      auto t = Clock::now();
      dist::all_reduce(buf, group);
      if (i > 0) times.push_back(seconds_since(t));
    }
    if (me == 0) rates[k] = static_cast<double>(elems * 4) / median(times);
    auto one = torch::ones({1});
    times.clear();
    for (int i = 0; i < 11; ++i) {
      auto t = Clock::now();
      dist::all_reduce(one, group);
      if (i > 0) times.push_back(seconds_since(t));
    }
    if (me == 0) rates[n_sizes + static_cast<int64_t>(k)] = median(times);
    // ZeRO's pair on the same 4 MiB: reduce-scatter it, all-gather it back.
    const int64_t part = elems / sizes[k];
    auto full = torch::ones({part * sizes[k]}), shard = torch::zeros({part});
    std::vector<double> rs, ag;
    for (int i = 0; i < 6; ++i) {
      auto t = Clock::now();
      dist::reduce_scatter(shard, full, group);
      if (i > 0) rs.push_back(seconds_since(t));
      t = Clock::now();
      dist::all_gather(full, shard, group);
      if (i > 0) ag.push_back(seconds_since(t));
    }
    if (me == 0) {
      rates[2 * n_sizes + static_cast<int64_t>(k)] = static_cast<double>(full.nbytes()) / median(rs);
      rates[3 * n_sizes + static_cast<int64_t>(k)] = static_cast<double>(full.nbytes()) / median(ag);
    }
  }
  // Point to point between ranks 0 and 1: half a round trip.
  if (world > 1) {
    auto pair = dist::new_group({0, 1}, "rates_p2p");
    if (pair.is_member()) {
      auto buf = torch::ones({elems});
      std::vector<double> times;
      for (int i = 0; i < 4; ++i) {
        auto t = Clock::now();
        if (me == 0) {
          dist::send(buf, 1, pair);
          dist::recv(buf, 1, pair);
        } else {
          dist::recv(buf, 0, pair);
          dist::send(buf, 0, pair);
        }
        if (i > 0) times.push_back(seconds_since(t) / 2);
      }
      if (me == 0) rates[p2p_slot] = static_cast<double>(elems * 4) / median(times);
    }
  }
  dist::all_reduce(rates, dist::world_group(), dist::ReduceOp::kMax);
  for (size_t k = 0; k < sizes.size(); ++k) {
    r.all_reduce_bps[sizes[k]] = rates[k].item<double>();
    r.all_reduce_latency_s[sizes[k]] = rates[n_sizes + static_cast<int64_t>(k)].item<double>();
    r.reduce_scatter_bps[sizes[k]] = rates[2 * n_sizes + static_cast<int64_t>(k)].item<double>();
    r.all_gather_bps[sizes[k]] = rates[3 * n_sizes + static_cast<int64_t>(k)].item<double>();
  }
  r.p2p_bps = world > 1 ? rates[p2p_slot].item<double>() : 0;
  // Copies: 64 MiB (on a CUDA build the offload path would be host<->device; measured here
  // as the host copy every CPU plugin's offload performs).
  {
    // Into a buffer already touched: the optimizer and the element-wise layers work in place or
    // in cached memory, not in fresh pages.
    auto src = torch::ones({16 << 20});
    auto dst = torch::zeros({16 << 20});
    std::vector<double> times;
    for (int i = 0; i < 4; ++i) {
      auto t = Clock::now();
      dst.copy_(src);
      if (i > 0) times.push_back(seconds_since(t));
    }
    auto c = torch::tensor({static_cast<double>(src.nbytes()) / median(times)}, torch::kFloat64);
    dist::all_reduce(c, dist::world_group(), dist::ReduceOp::kMin);
    r.copy_bps = c.item<double>();
  }
  // Memory: this host's available memory shared by the ranks on it (one node assumed here; the
  // launcher's LOCAL_WORLD_SIZE says how many share it).
  const int local = std::max(1, dist::environment().local_world_size);
  auto mem = torch::tensor({static_cast<double>(available_host_bytes() / local)}, torch::kFloat64);
  dist::all_reduce(mem, dist::world_group(), dist::ReduceOp::kMin);
  r.device_bytes = static_cast<int64_t>(mem.item<double>());
  r.host_bytes = r.device_bytes;
  return r;
}

std::vector<Layout> enumerate_layouts(const ModelSpec& spec, const SearchSpace& space,
                                      const std::function<bool(const Layout&)>& is_valid) {
  std::vector<Layout> out;
  const int world = space.world;
  auto base = [&] {
    Layout l;
    l.precision = space.precision;
    l.sequence = space.sequence;
    return l;
  };
  auto with_batch = [&](Layout l) -> std::optional<Layout> {
    if (space.global_batch % l.dp != 0) return std::nullopt;
    l.replica_batch = space.global_batch / l.dp;
    l.micro_batch = l.replica_batch;
    if (l.pp > 1) {
      // Microbatches: twice the stages where the batch allows (a smaller bubble), else the stages.
      std::optional<int64_t> m;
      for (int64_t want : {2 * static_cast<int64_t>(l.pp), static_cast<int64_t>(l.pp)})
        if (!m && l.replica_batch % want == 0) m = want;
      if (!m) return std::nullopt;
      l.micro_batch = l.replica_batch / *m;
    }
    return l;
  };
  auto push = [&](Layout l) {
    for (bool ckpt : space.try_checkpointing ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
      l.activation_checkpointing = ckpt;
      auto b = with_batch(l);
      if (b && (!is_valid || is_valid(*b))) out.push_back(*b);
    }
  };
  auto wants = [&](const char* plugin) {
    return std::find(space.plugins.begin(), space.plugins.end(), plugin) != space.plugins.end();
  };
  // The plain plugins: data parallel over the whole world.
  for (const char* plugin : {"ddp", "zero1", "zero2", "gemini"}) {
    if (!wants(plugin) || (world == 1 && std::string(plugin) != "ddp" && std::string(plugin) != "gemini")) continue;
    Layout l = base();
    l.plugin = plugin;
    l.dp = world;
    push(l);
    if (std::string(plugin) == "gemini" && space.try_offload) {
      l.offload = "cpu";
      push(l);
    }
  }
  if (!wants("hybrid")) return out;
  // The hybrid plugin: every pp x dp x sp x tp (x ep) with at least one model-splitting axis.
  for (int tp : divisors(world)) {
    if (tp > space.max_tp) continue;
    for (int pp : divisors(world / tp)) {
      if (pp > space.max_pp) continue;
      for (int sp : divisors(world / tp / pp)) {
        const int dp = world / tp / pp / sp;
        for (int ep : spec.experts > 0 ? divisors(dp) : std::vector<int>{1}) {
          if (tp == 1 && pp == 1 && sp == 1 && ep == 1) continue;  // the plain plugins above
          if (ep > 1 && spec.experts % ep != 0) continue;
          for (int zero : {0, 1, 2}) {
            if (zero > 0 && dp * sp == 1) continue;
            if (zero == 2 && pp > 1) continue;  // ZeRO-2 shards gradients a pipeline accumulates
            Layout l = base();
            l.plugin = "hybrid";
            l.tp = tp;
            l.pp = pp;
            l.sp = sp;
            l.dp = dp;
            l.ep = ep;
            l.zero_stage = zero;
            l.sp_mode = sp > 1 ? "all_to_all" : "none";
            push(l);
          }
        }
      }
    }
  }
  return out;
}

// The cost model: compute at the measured matmul rate, the pipeline bubble, and each axis's
// communication at the measured bandwidth of a group of its size (no overlap assumed).
std::vector<Candidate> rank_layouts(const ModelSpec& spec, const std::vector<Layout>& layouts,
                                    const MachineRates& rates, const SearchSpace& space) {
  std::vector<Candidate> out;
  auto bw = [&](int n) { return n <= 1 ? 0.0 : at_group_size(rates.all_reduce_bps, n).value_or(0.0); };
  // ZeRO's collectives at their own measured rate, else each at half an all-reduce's time.
  auto zero_bw = [&](const std::map<int, double>& measured, int n) { return at_group_size(measured, n).value_or(2 * bw(n)); };
  for (const auto& l : layouts) {
    Candidate c;
    c.layout = l;
    const double c_bytes = l.precision == "fp32" ? 4 : 2;
    const double tokens = static_cast<double>(l.replica_batch) * l.sequence;  // per replica per step
    const auto flops = flops_per_token(spec, l.sequence);
    // Checkpointing recomputes the decoder layers, not the head: for a small model with a large
    // vocabulary the head is most of the FLOPs.
    const double head = 3.0 * 2.0 * static_cast<double>(spec.family == "vit" ? spec.classes : spec.vocab) * spec.hidden;
    const double layers_flops = std::max(flops.training - head, 0.0);
    // Tensor parallelism as measured on the model's own slice at this tp size, when the app
    // calibrated it (its narrower products, unsplit element-wise work and all-reduces in one
    // factor over an ideal split); else the matmul rate of the tp slice's shapes plus the
    // all-reduce volume below.
    auto measured = [](const std::map<int, double>& m, int n) {
      auto it = m.find(n);
      return n > 1 && it != m.end() ? std::optional<double>(it->second) : std::nullopt;
    };
    const auto tp_measured = measured(space.tp_scale, l.tp), sp_measured = measured(space.sp_scale, l.sp);
    const bool tp_calibrated = tp_measured.has_value(), sp_calibrated = sp_measured.has_value();
    // Checkpointing's cost as measured under this layout's split (the larger of two), else one rank's.
    double ckpt = space.checkpoint_factor;
    const auto tp_ckpt = measured(space.tp_checkpoint_factor, l.tp), sp_ckpt = measured(space.sp_checkpoint_factor, l.sp);
    if (tp_ckpt || sp_ckpt) ckpt = std::max(tp_ckpt.value_or(0.0), sp_ckpt.value_or(0.0));
    const double layers_per_token = layers_flops * (l.activation_checkpointing ? ckpt : 1.0) * space.compute_scale *
                                    tp_measured.value_or(1.0) * sp_measured.value_or(1.0);
    const double head_per_token = std::min(head, flops.training) * space.compute_scale;
    const double per_token = layers_per_token + head_per_token;
    // At the rate of this layout's matrix shapes: a microbatch's rows on this rank, a tp slice.
    const int64_t rows = l.micro_batch * l.sequence / l.sp;
    auto rate_at = [&](int tp) { return std::max(rates.matmul_rate(rows, tp), 1.0); };  // (matmul_flops without a curve)
    // Under a pipeline every stage runs at the pace of the costliest one: the layers split as the
    // plugin splits them (parallel/pipeline/stage_split.h, by cost, the head on the last stage).
    const double stage_share = l.pp > 1 ? largest_stage_share(spec, l, per_token, head_per_token) : 1.0;
    const double split = static_cast<double>(l.tp) * l.sp;
    const double compute = stage_share * tokens / split *
                           (layers_per_token / rate_at(tp_calibrated ? 1 : l.tp) + head_per_token / rate_at(l.tp));
    c.terms["compute"] = compute;
    if (l.pp > 1) {
      const double m = static_cast<double>(l.replica_batch) / std::max<int64_t>(l.micro_batch, 1);
      c.terms["bubble"] = compute * (l.pp - 1) / m;
      c.terms["pp"] = rates.p2p_bps > 0 ? 2 * tokens * spec.hidden * c_bytes / rates.p2p_bps : 0;
    }
    const double params = parameters_per_rank(spec, l);
    const int grad_group = l.plugin == "hybrid" ? l.dp * l.sp : l.dp;
    // DDP (and the hybrid plugin without ZeRO) all-reduces the gradients; ZeRO-1/2 reduce-scatters
    // them and all-gathers the updated parameters; Gemini gathers each chunk for forward and again
    // for backward.
    const bool sharded = !(l.plugin == "ddp" || (l.plugin == "hybrid" && l.zero_stage == 0));
    if (grad_group > 1) {
      const double bytes = params * c_bytes;
      if (!sharded) {
        c.terms["dp"] = bytes / bw(grad_group);
      } else {
        const double gathers = l.plugin == "gemini" ? 2 : 1;
        c.terms["dp"] = bytes / zero_bw(rates.reduce_scatter_bps, grad_group) +
                        gathers * bytes / zero_bw(rates.all_gather_bps, grad_group);
      }
    }
    const double layers = std::ceil(static_cast<double>(spec.layers) / l.pp);
    const double activation = tokens * spec.hidden * c_bytes / l.sp;
    const double recompute = l.activation_checkpointing ? 1.5 : 1.0;
    if (l.tp > 1 && !tp_calibrated) c.terms["tp"] = 4 * layers * activation * recompute / bw(l.tp);
    if (l.sp > 1 && !sp_calibrated) c.terms["sp"] = 4 * layers * activation * recompute / l.sp / bw(l.sp);
    if (l.offload != "none") c.terms["offload"] = 2 * 16 * params / l.dp / std::max(rates.copy_bps, 1.0);
    // Latency: each collective call costs a small all-reduce's time whatever its size (DDP and
    // ZeRO: one per 25 MB bucket; tp and sp: four per layer per microbatch; pp: two messages per
    // microbatch).
    auto latency = [&](int n) { return n <= 1 ? 0.0 : at_group_size(rates.all_reduce_latency_s, n).value_or(0.0); };
    const double microbatches = static_cast<double>(l.replica_batch) / std::max<int64_t>(l.micro_batch, 1);
    double calls_s = 0;
    if (grad_group > 1) calls_s += std::ceil(params * c_bytes / (25 << 20)) * (l.plugin == "ddp" ? 1 : 2) * latency(grad_group);
    if (l.tp > 1 && !tp_calibrated) calls_s += 4 * layers * microbatches * recompute * latency(l.tp);
    if (l.sp > 1 && !sp_calibrated) calls_s += 4 * layers * microbatches * recompute * latency(l.sp);
    if (l.pp > 1) calls_s += 2 * microbatches * latency(2);
    c.terms["latency"] = calls_s;
    // Memory-bound work at the measured copy rate: the optimizer reads and writes every owned
    // parameter's weights, gradients and moments; the element-wise layers touch each kept
    // activation a few times forward and backward.
    const double owned = sharded ? params / grad_group : params;
    const double acts = static_cast<double>(activation_bytes(spec, l).per_layer) * layers * microbatches;
    // The sharded plugins also move every parameter's bytes three times a step through flat
    // buffers: gradients into their bucket, the bucket into the collective's send layout, the
    // gathered parameters back into the model (Gemini: into and out of its chunks).
    const double flat_copies = sharded && grad_group > 1 ? 3 * params * c_bytes : 0;
    c.terms["memory"] = (32 * owned + 6 * acts + flat_copies) / std::max(rates.copy_bps, 1.0);
    c.predicted_s = 0;
    for (const auto& [k, v] : c.terms) c.predicted_s += v;
    const auto state = model_state_bytes(spec, l);
    c.predicted_bytes = sum_tier(state, "device") + activation_bytes(spec, l).total;
    c.predicted_host_bytes = sum_tier(state, "host");
    // On a CPU build device and host are one memory.
    const bool one_memory = rates.device_bytes == rates.host_bytes;
    const int64_t needed = c.predicted_bytes + (one_memory ? c.predicted_host_bytes : 0);
    if (needed > rates.device_bytes) {
      c.fits = false;
      c.why_not = c10::str("needs ", gib(static_cast<double>(needed)), " GiB per rank, ", gib(static_cast<double>(rates.device_bytes)),
                           " GiB available");
    } else if (!one_memory && c.predicted_host_bytes > rates.host_bytes) {
      c.fits = false;
      c.why_not = c10::str("needs ", gib(static_cast<double>(c.predicted_host_bytes)), " GiB of host memory per rank");
    }
    out.push_back(std::move(c));
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    if (a.fits != b.fits) return a.fits;
    return a.predicted_s < b.predicted_s;
  });
  return out;
}

std::optional<size_t> baseline_index(const std::vector<Candidate>& ranked) {
  // Plain DDP first (without checkpointing, then with): what a user runs without the search. The
  // cost model ranks the data-parallel family within a few percent of each other while their
  // measured times differ by more (ZeRO's and Gemini's copies), so "the best-predicted pure
  // data-parallel layout" could be a ZeRO stage that is slower than DDP.
  for (bool ckpt : {false, true})
    for (size_t i = 0; i < ranked.size(); ++i) {
      const auto& l = ranked[i].layout;
      if (ranked[i].fits && l.plugin == "ddp" && l.activation_checkpointing == ckpt) return i;
    }
  for (size_t i = 0; i < ranked.size(); ++i) {  // memory rules DDP out: the best-predicted sharded one
    const auto& l = ranked[i].layout;
    if (ranked[i].fits && l.tp == 1 && l.pp == 1 && l.sp == 1 && l.ep == 1) return i;
  }
  return std::nullopt;
}

SelectionReport select_layout(std::vector<Candidate> ranked, const std::function<double(const Layout&)>& trial,
                              const SelectOptions& options) {
  SelectionReport report;
  const auto start = Clock::now();
  // The trials: the best predicted that fit, one of them always the baseline (baseline_index), so
  // the pick is never slower than what a user would run without the search by more than the
  // noise of the measurement.
  std::vector<size_t> order;
  for (size_t i = 0; i < ranked.size() && static_cast<int>(order.size()) < options.trials; ++i)
    if (ranked[i].fits) order.push_back(i);
  if (const auto base = baseline_index(ranked);
      base && !order.empty() && std::find(order.begin(), order.end(), *base) == order.end())
    order.back() = *base;
  int tried = 0;
  for (size_t i : order) {
    if (tried > 0 && seconds_since(start) > options.budget_s) break;
    ++tried;
    try {
      ranked[i].measured_s = trial(ranked[i].layout);
    } catch (const std::exception& e) {
      ranked[i].trial_error = error_text(e).substr(0, 300);
    }
  }
  report.candidates = std::move(ranked);
  for (size_t i = 0; i < report.candidates.size(); ++i) {
    const auto& c = report.candidates[i];
    if (c.measured_s && (report.chosen < 0 || *c.measured_s < *report.candidates[report.chosen].measured_s))
      report.chosen = static_cast<int>(i);
  }
  report.search_s = seconds_since(start);
  if (report.chosen < 0) {
    std::string why = "no candidate ran";
    for (const auto& c : report.candidates)
      if (!c.trial_error.empty()) {
        why += ": " + c.layout.describe() + ": " + c.trial_error;
        break;
      }
    if (tried == 0) why = "no layout fits the memory (" + (report.candidates.empty() ? std::string("none valid") : report.candidates[0].why_not) + ")";
    COLOSSAL_FAIL("[auto] ", why);
  }
  const auto& best = report.candidates[report.chosen];
  std::string runner_up;  // the first other measured one, in predicted order
  for (const auto& c : report.candidates)
    if (c.measured_s && &c != &best && runner_up.empty())
      runner_up = c10::str("; next ", c.layout.describe(), " at ", *c.measured_s, " s");
  report.reason = c10::str("fastest measured of ", tried, " trial(s): ", *best.measured_s, " s per step (predicted ",
                           best.predicted_s, " s, rank ", report.chosen + 1, " of ", report.candidates.size(), ")", runner_up);
  return report;
}

std::string SelectionReport::format(int max_rows) const {
  std::ostringstream out;
  out << "layout search (" << candidates.size() << " candidates, " << search_s << " s of trials); rates: " << rates.describe()
      << "\n";
  char line[320];
  std::snprintf(line, sizeof line, "  %4s  %-42s %11s %11s %9s  %s\n", "rank", "layout", "predicted s", "measured s",
                "mem GiB", "note");
  out << line;
  int rows = 0;
  for (size_t i = 0; i < candidates.size() && rows < max_rows; ++i, ++rows) {
    const auto& c = candidates[i];
    std::string measured = c.measured_s ? c10::str(*c.measured_s) : "-";
    if (measured.size() > 10) measured = measured.substr(0, 10);
    std::string note = static_cast<int>(i) == chosen ? "<- chosen" : !c.fits ? c.why_not : c.trial_error;
    std::snprintf(line, sizeof line, "  %4zu  %-42s %11.4f %11s %9s  %s\n", i + 1, c.layout.describe().c_str(), c.predicted_s,
                  measured.c_str(), gib(static_cast<double>(c.predicted_bytes)).c_str(), note.c_str());
    out << line;
  }
  if (static_cast<int>(candidates.size()) > max_rows) out << "  ... (" << candidates.size() - max_rows << " more in the JSON report)\n";
  out << "chosen: " << (chosen >= 0 ? candidates[chosen].layout.describe() : "none") << " — " << reason << "\n";
  return out.str();
}

nlohmann::json SelectionReport::to_json() const {
  nlohmann::json cands = nlohmann::json::array();
  for (const auto& c : candidates) {
    const auto& l = c.layout;
    nlohmann::json j = {{"layout", l.describe()},
                        {"plugin", l.plugin}, {"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}, {"sp", l.sp}, {"ep", l.ep},
                        {"zero_stage", l.zero_stage}, {"offload", l.offload}, {"activation_checkpointing", l.activation_checkpointing},
                        {"micro_batch", l.micro_batch}, {"replica_batch", l.replica_batch},
                        {"predicted_s", c.predicted_s}, {"predicted_terms", c.terms},
                        {"predicted_device_bytes", c.predicted_bytes}, {"predicted_host_bytes", c.predicted_host_bytes},
                        {"fits", c.fits}};
    if (!c.why_not.empty()) j["why_not"] = c.why_not;
    if (c.measured_s) j["measured_s"] = *c.measured_s;
    if (!c.trial_error.empty()) j["trial_error"] = c.trial_error;
    cands.push_back(j);
  }
  nlohmann::json r = {{"matmul_flops", rates.matmul_flops}, {"p2p_bps", rates.p2p_bps}, {"copy_bps", rates.copy_bps},
                      {"device_bytes", rates.device_bytes}, {"host_bytes", rates.host_bytes}};
  for (const auto& [n, bps] : rates.all_reduce_bps) r["all_reduce_bps"][std::to_string(n)] = bps;
  return {{"chosen", chosen >= 0 ? nlohmann::json(candidates[chosen].layout.describe()) : nlohmann::json()},
          {"reason", reason}, {"search_s", search_s}, {"rates", r}, {"candidates", cands}};
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  COLOSSAL_CHECK(a.size() == b.size() && a.size() >= 2, "[auto] spearman: need two equally long series, got ", a.size(),
                 " and ", b.size());
  auto ranks = [](const std::vector<double>& v) {
    std::vector<size_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return v[x] < v[y]; });
    std::vector<double> r(v.size());
    for (size_t i = 0; i < idx.size();) {  // ties share their mean rank
      size_t j = i;
      while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
      for (size_t k = i; k <= j; ++k) r[idx[k]] = (i + j) / 2.0;
      i = j + 1;
    }
    return r;
  };
  auto ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size()), mean = (n - 1) / 2;
  double num = 0, da = 0, db = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (ra[i] - mean) * (rb[i] - mean);
    da += (ra[i] - mean) * (ra[i] - mean);
    db += (rb[i] - mean) * (rb[i] - mean);
  }
  return num / std::sqrt(da * db);
}

}  // namespace colossal::tools
