// Tensor and sequence parallelism on the M shape (dim 768, 12 layers, 12 heads, ffn 2048,
// vocab 32000), side by side in one run:
//   1. tp = 1, 2, 4 at sequence 512: step time, tokens/s, model-state memory and peak resident
//      memory per rank (tp = 1 is one process with the machine's threads: the plain LibTorch
//      way; the tp ranks share the same cores, one thread each).
//   2. The longest sequence that trains one step (fp32, AdamW) within a memory budget per rank
//      (peak resident memory, the whole process), without sequence parallelism (one process)
//      and with each mode at sp = 4: split_gather (over tp = 4), all_to_all and ring_attn (an
//      sp axis of 4, tp = 1, ZeRO-2 over the 4 ranks: --sp_zero_stage). Found by doubling the
//      sequence, then bisecting to --granularity.
//      Each probe runs with its data segment capped a little above the budget, so a probe that
//      does not fit fails its allocation instead of swapping the machine, and with glibc's mmap
//      threshold fixed at 1 MiB so freed activations leave the resident set (see probe()).
//
//   3. The tensor-parallel modes (1d, 2d, 2.5d, 3d) at 4 and 8 ranks, batch --modes_batch x
//      --modes_seq: per-rank bytes handed to each kind of collective in one step (the
//      communication profiler), beside grid_cost.h's formula for the model's linear layers; the
//      activations the forward keeps for backward and the step's peak per rank (MemoryTracer,
//      the heap's own count); tokens/s beside 1d.
//
//   build/apps/bench_parallel [--budget_gib 4] [--skip_throughput] [--skip_sequence] [--skip_modes]
// Each probe is its own `colossal run` job of this program.
#include <sys/resource.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "apps/bench/bench_util.h"
#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "llama/parallelize.h"
#include "core/common/check.h"
#include "core/common/log.h"
#include "core/common/progress.h"
#include "core/dist/collectives.h"
#include "core/dist/comm_profile.h"
#include "core/dist/runtime.h"
#include "core/parallel/tensor/grid/grid_cost.h"
#include "core/parallel/tensor/layers.h"
#include "core/tools/memory_tracer.h"
#include "core/optim/factory.h"
#include "llama/model.h"
#include "llama/shapes.h"

namespace dist = colossal::dist;
namespace booster = colossal::booster;
using colossal::bench::median;

namespace {

struct Args {
  std::string shape = "M";
  double budget_gib = 4.0;
  int sp = 4;
  int64_t throughput_seq = 512, granularity = 256, max_seq = 65536;
  int steps = 3;
  bool skip_throughput = false, skip_sequence = false, skip_modes = false;
  int64_t modes_batch = 4, modes_seq = 128;
  // One job (set by the driver).
  int sp_zero_stage = 2;  // all_to_all / ring_attn: ZeRO over their dp x sp ranks
  int tp = 1, zero_stage = 0;
  std::string sp_mode = "none";
  std::string tp_mode = "1d";
  int tp_depth = 1;
  int64_t batch = 1;
  bool profile = false;  // record collectives' bytes and the memory of one step
  int64_t seq = 0;
  double data_limit_gib = 0;
  std::string row_file;
};

struct Row {
  bool ok = false;
  std::string error;  // a job that failed for another reason than memory
  double step_s = 0, tokens_s = 0, state_gib = 0, peak_gib = 0;
  // With --profile: per rank (the largest), one step.
  double all_gather_mib = 0, reduce_scatter_mib = 0, all_reduce_mib = 0, other_mib = 0;
  double activations_mib = 0, step_peak_mib = 0;
};

Row run_job(const Args& a) {
  if (a.data_limit_gib > 0) {  // a probe past the budget fails its allocation, nothing worse
    rlimit lim{};
    lim.rlim_cur = lim.rlim_max = static_cast<rlim_t>(a.data_limit_gib * (1ull << 30));
    setrlimit(RLIMIT_DATA, &lim);
  }
  auto shape = colossal::llama::benchmark_shape(a.shape);
  auto cfg = shape.config;
  cfg.max_position_embeddings = std::max<int64_t>(cfg.max_position_embeddings, a.seq);
  booster::PluginConfig pc;
  pc.name = "hybrid";
  pc.device = "cpu";
  pc.layout = {.sp = a.sp_mode == "none" ? 1 : a.sp, .tp = a.tp, .sp_mode = a.sp_mode, .tp_mode = a.tp_mode,
               .tp_depth = a.tp_depth};
  pc.options["zero_stage"] = a.zero_stage;
  auto plugin = booster::make_plugin(pc);
  colossal::llama::check_parallel(cfg, plugin->dims(), a.seq);
  torch::manual_seed(0);
  colossal::llama::LlamaForCausalLM model(cfg, colossal::parallel::ParallelContext::from(plugin->dims()));
  auto optimizer = colossal::optim::make_optimizer(*model, {.name = "fused_adamw", .lr = 1e-4});
  booster::Booster booster(plugin);
  auto b = booster.boost(model.ptr(), optimizer);
  auto ids = torch::randint(cfg.vocab_size, {a.batch, a.seq}, torch::kInt64);
  std::vector<double> times;
  for (int s = 0; s < a.steps; ++s) {
    dist::barrier(dist::world_group());
    times.push_back(colossal::bench::seconds([&] {
      b.optimizer->zero_grad();
      booster.backward(model->loss(ids, ids), *b.optimizer);
      b.optimizer->step();
    }));
  }
  if (times.size() > 1) times.erase(times.begin());  // the first step warms up
  Row r;
  r.ok = true;
  r.step_s = median(times);
  const int replicas = plugin->dims().dp();
  r.tokens_s = replicas * a.batch * a.seq / r.step_s;
  if (a.profile) {  // one more step, its collectives and memory recorded
    dist::barrier(dist::world_group());
    colossal::tools::MemoryTracer tracer;
    dist::comm_profile::reset();
    dist::comm_profile::set_enabled(true);
    tracer.begin_step();
    b.optimizer->zero_grad();
    tracer.phase("forward");
    auto loss = model->loss(ids, ids);
    tracer.phase("backward");
    booster.backward(loss, *b.optimizer);
    tracer.phase("optimizer");
    b.optimizer->step();
    tracer.end_step(0);
    dist::comm_profile::set_enabled(false);
    // The optimizer step closed the profiler's step: its table is the last of the history.
    const auto steps = dist::comm_profile::steps();
    const auto table = steps.empty() ? dist::comm_profile::current() : steps.back().table;
    double by_op[4] = {0, 0, 0, 0};
    for (const auto& [key, totals] : table) {
      const auto& op = key.second;
      by_op[op == "all_gather" ? 0 : op == "reduce_scatter" ? 1 : op == "all_reduce" ? 2 : 3] += totals.bytes;
    }
    const auto& step = tracer.last_step();
    auto f = torch::tensor({by_op[0], by_op[1], by_op[2], by_op[3], double(step.activations), double(step.peak - step.start)},
                           torch::kFloat64) / double(1 << 20);
    dist::all_reduce(f, dist::world_group(), dist::ReduceOp::kMax);
    r.all_gather_mib = f[0].item<double>();
    r.reduce_scatter_mib = f[1].item<double>();
    r.all_reduce_mib = f[2].item<double>();
    r.other_mib = f[3].item<double>();
    r.activations_mib = f[4].item<double>();
    r.step_peak_mib = f[5].item<double>();
  }
  auto report = b.optimizer->model_wrapper().hooks().memory_report(*model, *optimizer);
  auto mem = torch::tensor({report.total() / double(1ull << 30), colossal::peak_resident_gib()}, torch::kFloat64);
  dist::all_reduce(mem, dist::world_group(), dist::ReduceOp::kMax);
  r.state_gib = mem[0].item<double>();
  r.peak_gib = mem[1].item<double>();
  return r;
}

struct Layout {
  std::string label, sp_mode;
  int ranks, threads, tp;
  int zero_stage = 0;
  std::string tp_mode = "1d";
  int tp_depth = 1;
  int64_t batch = 1;
  bool profile = false;
};

// Runs one job under `colossal run`; a failed job (an allocation past the cap) is ok = false.
Row probe(const Args& a, const std::string& self, const Layout& l, int64_t seq, int steps, double limit_gib) {
  std::string launcher = self.substr(0, self.rfind('/')) + "/colossal";
  std::string row_file = "/tmp/bench_parallel_row_" + std::to_string(::getpid());
  ::unlink(row_file.c_str());
  std::ostringstream cmd;
  // Fewer malloc arenas (less reserved address space under the data cap), and every block of
  // 1 MiB or more its own mapping, returned when freed: glibc's default raises that threshold
  // to 32 MiB as big blocks come and go, after which freed activations stay in the heap and the
  // resident peak measures fragmentation (all_to_all at 6144 tokens: 3.66 GiB that way, 2.80
  // with the fixed threshold, same speed). Every layout runs with the same settings.
  cmd << "MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=1048576 OMP_NUM_THREADS=" << l.threads << " '" << launcher << "' run --nproc_per_node " << l.ranks << " -- '"
      << self << "' --shape " << a.shape << " --tp " << l.tp << " --sp " << a.sp << " --sp_mode " << l.sp_mode
      << " --zero_stage " << l.zero_stage << " --tp_mode " << l.tp_mode << " --tp_depth " << l.tp_depth << " --batch "
      << l.batch << (l.profile ? " --profile" : "") << " --seq " << seq << " --steps " << steps << " --data_limit_gib " << limit_gib << " --row_file " << row_file
      << " > " << row_file << ".log 2>&1";
  std::fprintf(stderr, "[bench_parallel] %s, sequence %ld...", l.label.c_str(), seq);
  int rc = std::system(cmd.str().c_str());
  Row r;
  std::ifstream in(row_file);
  r.ok = rc == 0 && static_cast<bool>(in >> r.step_s >> r.tokens_s >> r.state_gib >> r.peak_gib >> r.all_gather_mib >>
                                      r.reduce_scatter_mib >> r.all_reduce_mib >> r.other_mib >> r.activations_mib >>
                                      r.step_peak_mib);
  if (!r.ok) {  // out of memory under the cap, or a real error (reported, and the search stops)
    std::ifstream log(row_file + ".log");
    std::string line, error;
    bool memory = false;
    while (std::getline(log, line)) {
      if (line.find("allocate") != std::string::npos || line.find("bad_alloc") != std::string::npos) memory = true;
      if (error.empty() && line.find("bench_parallel:") != std::string::npos) error = line;
    }
    if (!memory) r.error = error.empty() ? "job failed (exit status " + std::to_string(rc) + ")" : error;
  }
  if (r.ok) std::fprintf(stderr, " %.2f s, peak %.2f GiB/rank\n", r.step_s, r.peak_gib);
  else if (r.error.empty()) std::fprintf(stderr, " out of memory under the cap\n");
  else std::fprintf(stderr, " failed: %s\n", r.error.c_str());
  ::unlink(row_file.c_str());
  ::unlink((row_file + ".log").c_str());
  return r;
}

void throughput_table(const Args& a, const std::string& self) {
  const int cores = static_cast<int>(std::max(1l, ::sysconf(_SC_NPROCESSORS_ONLN)));
  std::printf("\n1. %s shape, sequence %ld, batch 1 per replica, median of %d steps after a warm-up\n",
              a.shape.c_str(), a.throughput_seq, a.steps);
  std::printf("%-5s %-14s %8s %10s %18s %18s\n", "tp", "ranks x thr", "step s", "tokens/s", "model state GiB/rk",
              "peak RSS GiB/rank");
  double base = 0;
  for (int tp : {1, 2, 4}) {
    Layout l{"tp " + std::to_string(tp), "none", tp, tp == 1 ? cores : 1, tp};
    auto r = probe(a, self, l, a.throughput_seq, a.steps + 1, 0);
    if (!r.ok) {
      std::printf("%-5d failed: %s\n", tp, r.error.empty() ? "out of memory" : r.error.c_str());
      continue;
    }
    if (tp == 1) base = r.tokens_s;
    std::printf("%-5d %-14s %8.3f %10.1f %18.2f %18.2f   (%.2fx tokens/s of tp 1)\n", tp,
                (std::to_string(l.ranks) + " x " + std::to_string(l.threads)).c_str(), r.step_s, r.tokens_s,
                r.state_gib, r.peak_gib, base > 0 ? r.tokens_s / base : 0.0);
  }
}

// The longest multiple of the granularity that fits: double, then bisect.
int64_t longest_fitting(const Args& a, const std::string& self, const Layout& l, Row& at_best) {
  auto fits = [&](int64_t seq, Row& r) {
    // The cap only keeps a failing probe from taking the machine down; the verdict is the peak
    // resident memory against the budget.
    r = probe(a, self, l, seq, 1, a.budget_gib * 1.25 + 0.5);
    if (!r.error.empty()) throw std::runtime_error(l.label + ": " + r.error);
    return r.ok && r.peak_gib <= a.budget_gib;
  };
  int64_t lo = 0, hi = 0;
  Row r;
  for (int64_t seq = a.granularity; seq <= a.max_seq; seq *= 2) {
    if (!fits(seq, r)) {
      hi = seq;
      break;
    }
    lo = seq;
    at_best = r;
  }
  if (hi == 0) return lo;  // fits up to max_seq
  while (hi - lo > a.granularity) {
    int64_t mid = (lo + hi) / 2 / a.granularity * a.granularity;
    if (fits(mid, r)) {
      lo = mid;
      at_best = r;
    } else {
      hi = mid;
    }
  }
  return lo;
}

void sequence_table(const Args& a, const std::string& self) {
  const int cores = static_cast<int>(std::max(1l, ::sysconf(_SC_NPROCESSORS_ONLN)));
  // The sp-axis modes replicate the model over their sp ranks, whose gradients are reduced
  // together: ZeRO over them (as ColossalAI pairs them) rather than DDP's whole-model gradient
  // buckets, which are allocated before backward's peak (0.54 GB per rank on M) where one
  // process allocates gradients only as its activations are freed.
  const std::string zero = a.sp_zero_stage ? ", ZeRO-" + std::to_string(a.sp_zero_stage) : ", DDP";
  std::vector<Layout> layouts = {
      {"no sequence parallelism (1 process)", "none", 1, cores, 1},
      {"split_gather, sp = tp = " + std::to_string(a.sp), "split_gather", a.sp, 1, a.sp},
      {"all_to_all, sp = " + std::to_string(a.sp) + zero, "all_to_all", a.sp, 1, 1, a.sp_zero_stage},
      {"ring_attn, sp = " + std::to_string(a.sp) + zero, "ring_attn", a.sp, 1, 1, a.sp_zero_stage},
  };
  std::vector<std::pair<int64_t, Row>> found;
  std::vector<std::string> errors;
  for (const auto& l : layouts) {
    Row best;
    int64_t seq = 0;
    try {
      seq = longest_fitting(a, self, l, best);
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
    found.push_back({seq, best});
  }
  std::printf("\n2. Longest sequence that trains one step within %.2f GiB per rank (peak resident memory), %s shape,"
              " fp32 AdamW, granularity %ld\n", a.budget_gib, a.shape.c_str(), a.granularity);
  std::printf("%-38s %10s %12s %18s %10s\n", "layout", "sequence", "x no SP", "peak RSS GiB/rank", "step s");
  for (size_t i = 0; i < layouts.size(); ++i) {
    const auto& [seq, r] = found[i];
    std::printf("%-38s %10ld %11.2fx %18.2f %10.2f\n", layouts[i].label.c_str(), seq,
                found[0].first > 0 ? static_cast<double>(seq) / found[0].first : 0.0, r.peak_gib, r.step_s);
  }
  for (const auto& e : errors) std::printf("not measured: %s\n", e.c_str());
}

// grid_cost.h's formula summed over the model's linear layers (the attention and MLP
// projections of every layer, and the head), fp32.
double linear_layers_mib(const colossal::llama::LlamaConfig& c, const Layout& l, int64_t tokens) {
  using colossal::parallel::LinearShape;
  const auto mode = dist::parse_tensor_parallel_mode(l.tp_mode);
  const auto grid = dist::tensor_grid_shape(mode, l.tp, l.tp_depth);
  const int64_t h = c.hidden_size, hd = c.resolved_head_dim(), f = c.intermediate_size;
  const int64_t q_out = c.num_attention_heads * hd, kv_out = c.num_key_value_heads * hd;
  colossal::parallel::CollectiveBytes sum;
  auto add = [&](int64_t in, int64_t out, bool column) {
    sum += colossal::parallel::linear_collective_bytes(mode, grid.q, grid.depth,
                                                       LinearShape{tokens, in, out, false, column}, 4);
  };
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    // 1d: q, k and v share one entry (one gradient all-reduce), as do gate and up.
    if (mode == dist::TensorParallelMode::k1d) {
      add(h, q_out + 2 * kv_out, true);
      add(q_out, h, false);
      add(h, 2 * f, true);
      add(f, h, false);
      continue;
    }
    add(h, q_out, true);
    add(h, kv_out, true);
    add(h, kv_out, true);
    add(q_out, h, false);
    add(h, f, true);
    add(h, f, true);
    add(f, h, false);
  }
  // The head: 1d all-reduces its input gradient; a grid pads the vocabulary to its weight blocks.
  add(h, colossal::parallel::padded_vocab(c.vocab_size, grid.weight_out_parts), true);
  return sum.total() / double(1 << 20);
}

void modes_table(const Args& a, const std::string& self) {
  auto cfg = colossal::llama::benchmark_shape(a.shape).config;
  const int64_t tokens = a.modes_batch * a.modes_seq;
  std::printf("\n3. Tensor-parallel modes, %s shape, batch %ld x sequence %ld per replica, fp32; per rank, one step "
              "(the largest rank's figure)\n", a.shape.c_str(), a.modes_batch, a.modes_seq);
  std::printf("%-22s %9s %9s %8s %8s %8s %9s %12s %10s %10s\n", "layout", "tokens/s", "x 1d", "AG MiB", "RS MiB",
              "AR MiB", "sum MiB", "formula MiB", "act. MiB", "peak MiB");
  std::vector<Layout> layouts = {
      {"1d, tp 4", "none", 4, 1, 4, 0, "1d", 1, a.modes_batch, true},
      {"2d 2x2, tp 4", "none", 4, 1, 4, 0, "2d", 1, a.modes_batch, true},
      {"2.5d 1x1x4, tp 4", "none", 4, 1, 4, 0, "2.5d", 4, a.modes_batch, true},
      {"1d, tp 4 x dp 2", "none", 8, 1, 4, 0, "1d", 1, a.modes_batch / 2, true},
      {"2d 2x2 x dp 2", "none", 8, 1, 4, 0, "2d", 1, a.modes_batch / 2, true},
      {"2.5d 2x2x2, tp 8", "none", 8, 1, 8, 0, "2.5d", 2, a.modes_batch, true},
      {"3d 2x2x2, tp 8", "none", 8, 1, 8, 0, "3d", 1, a.modes_batch, true},
  };
  double base = 0;
  for (const auto& l : layouts) {
    auto r = probe(a, self, l, a.modes_seq, a.steps + 1, 0);
    if (!r.ok) {
      std::printf("%-22s failed: %s\n", l.label.c_str(), r.error.empty() ? "out of memory" : r.error.c_str());
      continue;
    }
    if (l.tp_mode == "1d") base = r.tokens_s;
    const double sum = r.all_gather_mib + r.reduce_scatter_mib + r.all_reduce_mib + r.other_mib;
    std::printf("%-22s %9.1f %8.2fx %8.1f %8.1f %8.1f %9.1f %12.1f %10.1f %10.1f\n", l.label.c_str(), r.tokens_s,
                base > 0 ? r.tokens_s / base : 0.0, r.all_gather_mib, r.reduce_scatter_mib, r.all_reduce_mib, sum,
                linear_layers_mib(cfg, l, l.batch * a.modes_seq), r.activations_mib, r.step_peak_mib);
  }
  std::printf("(AG/RS/AR: all-gather, reduce-scatter, all-reduce bytes this rank handed over; formula: the linear "
              "layers' share by grid_cost.h; the rest is norms, the embedding and the loss. %ld tokens per step.)\n",
              tokens);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Tensor- and sequence-parallel memory and throughput on the M shape"};
  app.add_option("--shape", a.shape, "benchmark shape (S or M)")->capture_default_str();
  app.add_option("--budget_gib", a.budget_gib, "memory budget per rank for the sequence search")->capture_default_str();
  app.add_option("--sp", a.sp, "sequence-parallel size of the sequence search")->capture_default_str();
  app.add_option("--granularity", a.granularity, "sequence search step")->capture_default_str();
  app.add_option("--max_seq", a.max_seq, "sequence search limit")->capture_default_str();
  app.add_option("--throughput_seq", a.throughput_seq, "sequence of the tp table")->capture_default_str();
  app.add_option("--steps", a.steps, "measured steps of the tp table")->capture_default_str();
  app.add_flag("--skip_throughput", a.skip_throughput, "only the sequence search");
  app.add_flag("--skip_sequence", a.skip_sequence, "only the tp table");
  app.add_flag("--skip_modes", a.skip_modes, "no table of tensor-parallel modes");
  app.add_option("--modes_batch", a.modes_batch, "batch of the tp-mode table")->capture_default_str();
  app.add_option("--modes_seq", a.modes_seq, "sequence of the tp-mode table")->capture_default_str();
  app.add_option("--tp_mode", a.tp_mode, "(internal) a job's tensor-parallel mode");
  app.add_option("--tp_depth", a.tp_depth, "(internal) a job's 2.5d depth");
  app.add_option("--batch", a.batch, "(internal) a job's batch per replica");
  app.add_flag("--profile", a.profile, "(internal) record one step's collectives and memory");
  app.add_option("--sp_zero_stage", a.sp_zero_stage, "ZeRO stage of the all_to_all and ring_attn layouts (0: DDP)")
      ->capture_default_str();
  app.add_option("--tp", a.tp, "(internal) a job's tp");
  app.add_option("--zero_stage", a.zero_stage, "(internal) a job's ZeRO stage");
  app.add_option("--sp_mode", a.sp_mode, "(internal) a job's sequence-parallel mode");
  app.add_option("--seq", a.seq, "(internal) a job's sequence length");
  app.add_option("--data_limit_gib", a.data_limit_gib, "(internal) a job's data-segment cap");
  app.add_option("--row_file", a.row_file, "(internal) where a job's rank 0 writes its row");
  CLI11_PARSE(app, argc, argv);
  try {
    if (std::getenv("RANK") == nullptr) {
      const std::string self = colossal::bench::self_path();
      auto s = colossal::llama::benchmark_shape(a.shape);
      std::printf("%s shape: %.1fM parameters; %ld cores\n", a.shape.c_str(), s.config.num_parameters() / 1e6,
                  ::sysconf(_SC_NPROCESSORS_ONLN));
      if (!a.skip_throughput) throughput_table(a, self);
      if (!a.skip_sequence) sequence_table(a, self);
      if (!a.skip_modes) modes_table(a, self);
      return 0;
    }
    dist::init();
    auto r = run_job(a);
    if (dist::rank() == 0 && !a.row_file.empty())
      std::ofstream(a.row_file) << r.step_s << ' ' << r.tokens_s << ' ' << r.state_gib << ' ' << r.peak_gib << ' '
                                << r.all_gather_mib << ' ' << r.reduce_scatter_mib << ' ' << r.all_reduce_mib << ' '
                                << r.other_mib << ' ' << r.activations_mib << ' ' << r.step_peak_mib << '\n';
    dist::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_parallel: %s\n", colossal::error_text(e).c_str());
    return 1;
  }
}
