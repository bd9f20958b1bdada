// LLaMA training throughput and model FLOPs utilisation (MFU), ours beside PyTorch's best, side
// by side in one run:
//   shapes      S  dim 288, 6 layers, 6 heads, ffn 768, vocab 32000, sequence 256
//               M  dim 768, 12 layers, 12 heads, ffn 2048, vocab 32000, sequence 512
//   layouts     1x2  one rank with 2 threads;  2x1  two ranks (Gloo) with 1 thread each
//   plugins     ours: ddp, zero1, zero2, gemini (ZeRO-3)
//   precisions  fp32, bf16 (ours: the plugin's bf16 mixed precision; PyTorch: autocast)
//   references  apps/bench/llama_torch_reference.py, the same architecture in plain PyTorch:
//               ddp (eager), ddp+compile, zero1 (DDP + ZeroRedundancyOptimizer), fsdp2
//               (fully_shard per layer); on one rank only ddp and ddp+compile (no wrapper)
// and the ratios the project holds itself to (issue 26: each >= 1.15):
//   ours ddp          / best of PyTorch ddp and ddp+compile
//   ours zero1, zero2 / PyTorch zero1
//   ours gemini       / PyTorch fsdp2
// MFU = tokens/s x model FLOPs per token / matrix-product rate, where
//   FLOPs per token = 3 x forward, forward = 2 x matmul parameters (lm_head included)
//                     + 4 x layers x dim x sequence (attention scores and values),
// and the rate is a 2048x2048 torch::mm in the run's compute dtype (fp32, or bf16 for bf16 rows) measured in
// the same job with the same threads
// (on every rank at once for 2x1, summed), so a busy machine lowers both sides together. Runs
// alternate (ours and every reference, --repeats times) and the fastest of each is kept.
//
// Fine-tuning modes (--modes full,lora,qlora; or --lora_rank R [--quantize_base F] for one):
// LoRA is ours with Booster::enable_lora (r R, alpha 2R, every projection of the blocks; the
// embedding, norms and head frozen) beside PEFT's get_peft_model on the reference model; QLoRA
// keeps our base in --quantize_base (nf4 by default) beside PEFT over bitsandbytes' Linear4bit
// (nf4). FLOPs per token are then 2/3 of the above (no weight gradients for the base). Goals:
// LoRA and QLoRA >= 1.3x PEFT's best tokens/s at no more peak memory per rank; QLoRA's peak
// <= 0.4x full fine-tuning's (ours, same layout).
//
//   build/apps/bench_llama [--shapes S,M] [--layouts 1x2,2x1] [--plugins ddp,zero1,zero2,gemini]
//                          [--precisions fp32,bf16] [--references ddp,ddp+compile,zero1,fsdp2]
//                          [--modes full,lora,qlora] [--lora_rank 16] [--quantize_base nf4]
//   build/apps/bench_lora  the same program with the fine-tuning defaults: --modes full,lora,qlora
//                          --shapes M --plugins ddp --precisions fp32 --references ddp,ddp+compile
// The driver runs each row as its own `colossal run` (or torchrun) job and prints one table.
#include <sys/stat.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "apps/bench/bench_util.h"
#include "core/booster/booster.h"
#include "core/common/check.h"
#include "core/common/log.h"
#include "core/common/progress.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/nn/deferred_init.h"
#include "core/optim/factory.h"
#include "core/peft/lora.h"
#include "llama/model.h"
#include "llama/shapes.h"

namespace dist = colossal::dist;
namespace booster = colossal::booster;
using colossal::bench::median;
using colossal::bench::split_list;
using colossal::llama::LlamaConfig;

namespace {

struct Args {
  std::string shapes = "S,M";
  std::string layouts = "1x2,2x1";
  std::string plugins = "ddp,zero1,zero2,gemini";
  std::string precisions = "fp32,bf16";
  std::string references = "ddp,ddp+compile,zero1,fsdp2";
  // Child-job settings (set by the driver), with the shape and threads below.
  std::string precision = "fp32";
  std::string plugin = "ddp";
  std::string python;  // for the PyTorch reference; empty: COLOSSAL_PYTHON, else python3
  bool reference = true;
  int steps = 4, batch = 1;
  int repeats = 2;  // runs of each (shape, layout, implementation), alternating; the best is kept
  bool grad_checkpoint = false;
  int64_t lora_rank = 0;      // > 0: LoRA fine-tuning against PEFT
  std::string quantize_base;  // QLoRA: nf4 | int8 | int4
  std::string modes;          // full,lora,qlora (empty: what --lora_rank/--quantize_base say)
  // Child-job settings (set by the driver).
  std::string shape = "S";
  int threads = 0;
  std::string row_file;
};

struct Row {
  std::string impl = "colossal";  // "ours:<plugin>" or "torch:<strategy>"
  std::string precision = "fp32";
  std::string mode = "full";      // full | lora | qlora
  std::string shape, layout;
  double step_s = 0, tokens_s = 0, matmul_gflops = 0, model_gflops = 0, mfu = 0, peak_gib = 0;
};

// GFLOP/s of an fp32 2048x2048 product on this process's threads (median of 3), measured on
// every rank at once and summed: the rate the job has right now. Taken before every step, so
// a machine that gets busier or quieter during the run moves both sides of the ratio.
// In the job's compute precision: bf16 rows are measured against the bf16 product rate.
double job_matmul_gflops(torch::ScalarType dtype) {
  dist::barrier(dist::world_group());
  auto rate = torch::tensor({colossal::bench::matmul_gflops(dtype)}, torch::kFloat64);
  dist::all_reduce(rate, dist::world_group());
  return rate.item<double>();
}

Row run_job(const Args& a) {
  if (a.threads > 0) at::set_num_threads(a.threads);
  auto shape = colossal::llama::benchmark_shape(a.shape);
  int n = dist::world_size();
  const int64_t T = shape.sequence;
  torch::manual_seed(0);
  // Lazily, as train_llama builds it: boost() makes what this rank keeps, and a QLoRA base is
  // quantized one weight at a time (its full-precision matrices never exist together).
  colossal::llama::LlamaForCausalLM model{nullptr};
  {
    colossal::nn::DeferredInitGuard deferred;
    model = colossal::llama::LlamaForCausalLM(shape.config);
  }
  booster::Booster booster(booster::make_plugin(a.plugin, a.precision));
  if (a.lora_rank > 0) {
    colossal::peft::LoraConfig lora;
    lora.rank = a.lora_rank;
    lora.alpha = 2.0 * static_cast<double>(a.lora_rank);
    booster.enable_lora(*model, lora, {"lm_head"});
    if (!a.quantize_base.empty()) colossal::peft::quantize_base(*model, a.quantize_base, {"lm_head"});
  }
  auto optimizer = colossal::optim::make_optimizer(*model, {.name = "fused_adamw", .lr = 1e-4});
  auto b = booster.boost(model.ptr(), optimizer);
  if (a.grad_checkpoint) model->set_gradient_checkpointing(true);
  auto ids = torch::randint(shape.config.vocab_size, {a.batch, T}, torch::kInt64);
  std::vector<double> times, fwd, bwd, opt, rates;
  for (int s = 0; s <= a.steps; ++s) {  // step 0 warms up
    double rate = job_matmul_gflops(b.compute_dtype);
    dist::barrier(dist::world_group());
    torch::Tensor loss;
    double tf = 0, tb = 0, to = 0;
    double t = colossal::bench::seconds([&] {
      b.optimizer->zero_grad();
      tf = colossal::bench::seconds([&] { loss = model->loss(ids, ids); });
      tb = colossal::bench::seconds([&] { booster.backward(loss, *b.optimizer); });
      to = colossal::bench::seconds([&] { b.optimizer->step(); });
    });
    if (s > 0) times.push_back(t), fwd.push_back(tf), bwd.push_back(tb), opt.push_back(to), rates.push_back(rate);
  }
  // COLOSSAL_BENCH_TRACE=FILE: a Chrome trace of one more step on rank 0 (chrome://tracing).
  if (const char* trace = std::getenv("COLOSSAL_BENCH_TRACE")) {  // every rank steps, rank 0 records
    std::optional<torch::autograd::profiler::RecordProfile> guard;
    if (dist::rank() == 0) guard.emplace(trace);
    b.optimizer->zero_grad();
    booster.backward(model->loss(ids, ids), *b.optimizer);
    b.optimizer->step();
  }
  if (dist::rank() == 0)
    std::fprintf(stderr, "[bench_llama] %s: forward %.3f s, backward (with gradient sync) %.3f s, optimizer %.3f s\n",
                 a.shape.c_str(), median(fwd), median(bwd), median(opt));
  Row r;
  r.shape = a.shape;
  r.layout = std::to_string(n) + "x" + std::to_string(at::get_num_threads());
  r.step_s = median(times);
  r.tokens_s = n * a.batch * T / r.step_s;
  r.matmul_gflops = median(rates);
  // LoRA: forward and the input gradients only (the base gets no weight gradient).
  const double flops = colossal::llama::training_flops_per_token(shape.config, T) * (a.lora_rank > 0 ? 2.0 / 3 : 1.0);
  r.model_gflops = r.tokens_s * flops / 1e9;
  r.mfu = r.model_gflops / r.matmul_gflops;
  auto peak = torch::tensor({colossal::peak_resident_gib()}, torch::kFloat64);
  dist::all_reduce(peak, dist::world_group(), dist::ReduceOp::kMax);
  r.peak_gib = peak.item<double>();
  return r;
}

std::string row_line(const Row& r) {
  std::ostringstream s;
  s << r.shape << ' ' << r.layout << ' ' << r.step_s << ' ' << r.tokens_s << ' ' << r.matmul_gflops << ' '
    << r.model_gflops << ' ' << r.mfu << ' ' << r.peak_gib << '\n';
  return s.str();
}

const Row* find_row(const std::vector<Row>& rows, const Row& like, const std::string& impl) {
  for (const auto& r : rows)
    if (r.impl == impl && r.shape == like.shape && r.layout == like.layout && r.precision == like.precision &&
        r.mode == like.mode)
      return &r;
  return nullptr;
}

void print_table(const std::vector<Row>& rows) {
  std::printf("\n%-5s %-7s %-5s %-5s %-19s %9s %10s %11s %11s %7s %9s\n", "shape", "layout", "prec", "mode", "impl",
              "step s", "tokens/s", "mm GFLOP/s", "model GF/s", "MFU", "peak GiB");
  for (const auto& r : rows)
    std::printf("%-5s %-7s %-5s %-5s %-19s %9.3f %10.1f %11.1f %11.1f %6.1f%% %9.2f\n", r.shape.c_str(),
                r.layout.c_str(), r.precision.c_str(), r.mode.c_str(), r.impl.c_str(), r.step_s, r.tokens_s,
                r.matmul_gflops, r.model_gflops, 100 * r.mfu, r.peak_gib);
  // The ratios: each of ours against the PyTorch way a user would pick instead (the faster of
  // the listed ones); peak memory per rank beside that one's.
  std::printf("\nratios (ours / PyTorch's best of the listed, tokens/s, then peak memory per rank; the goals: "
              "full training >= 1.15x, LoRA and QLoRA >= 1.3x at <= 1x memory):\n");
  const std::map<std::string, std::vector<std::string>> against = {
      {"ours:ddp", {"torch:ddp", "torch:ddp+compile"}},
      {"ours:zero1", {"torch:zero1"}},
      {"ours:zero2", {"torch:zero1"}},
      {"ours:gemini", {"torch:fsdp2"}}};
  for (const auto& ours : rows) {
    auto it = against.find(ours.impl);
    if (it == against.end()) continue;
    const Row* best = nullptr;
    for (const auto& impl : it->second)
      if (const Row* r = find_row(rows, ours, impl); r && (!best || r->tokens_s > best->tokens_s)) best = r;
    if (!best) continue;
    const double goal = ours.mode == "full" ? 1.15 : 1.3;
    const double ratio = ours.tokens_s / best->tokens_s, memory = ours.peak_gib / best->peak_gib;
    const bool met = ratio >= goal && (ours.mode == "full" || memory <= 1.0);
    std::printf("  %-5s %-7s %-5s %-5s %-12s / %-18s %5.2fx  memory %5.2fx %s\n", ours.shape.c_str(),
                ours.layout.c_str(), ours.precision.c_str(), ours.mode.c_str(), ours.impl.c_str(), best->impl.c_str(),
                ratio, memory, met ? "" : "(below goal)");
  }
  // QLoRA's point is memory: its peak beside full fine-tuning's, ours, same layout (goal <= 0.4).
  for (const auto& q : rows) {
    if (q.mode != "qlora" || q.impl.rfind("ours:", 0) != 0) continue;
    Row like = q;
    like.mode = "full";
    if (const Row* full = find_row(rows, like, q.impl))
      std::printf("  %-5s %-7s %-5s qlora %-12s peak memory / full fine-tuning's: %.2fx %s\n", q.shape.c_str(),
                  q.layout.c_str(), q.precision.c_str(), q.impl.c_str(), q.peak_gib / full->peak_gib,
                  q.peak_gib / full->peak_gib <= 0.4 ? "" : "(above the 0.4 goal)");
  }
}

// Runs one job (a shell command that writes a row to `row_file`); on failure prints its log.
bool run_row(const std::string& what, const std::string& cmd, const std::string& row_file, Row& r) {
  std::string log = row_file + ".log";
  std::fprintf(stderr, "[bench_llama] %s...\n", what.c_str());
  int rc = std::system((cmd + " > " + log + " 2>&1").c_str());
  std::ifstream in(row_file);
  bool ok = rc == 0 && static_cast<bool>(in >> r.shape >> r.layout >> r.step_s >> r.tokens_s >> r.matmul_gflops >>
                                         r.model_gflops >> r.mfu >> r.peak_gib);
  std::ifstream l(log);
  if (!ok) {
    std::stringstream ss;
    ss << l.rdbuf();
    std::fprintf(stderr, "[bench_llama] %s failed:\n%s\n", what.c_str(), ss.str().c_str());
  } else {
    std::string line;
    while (std::getline(l, line))
      if (line.find("[bench_llama]") != std::string::npos) std::fprintf(stderr, "  %s\n", line.c_str());
  }
  ::unlink(row_file.c_str());
  ::unlink(log.c_str());
  return ok;
}

// Driver: one job per (shape, layout, precision, implementation), alternating.
int drive(const Args& a, const std::string& self, int argc, char** argv) {
  std::string launcher = self.substr(0, self.rfind('/')) + "/colossal";
  std::string passthrough = colossal::bench::passthrough_args(
      argc, argv,
      {"--shapes", "--layouts", "--python", "--repeats", "--plugins", "--precisions", "--references", "--modes",
       "--lora_rank", "--quantize_base"},
      {"--no_reference"});
  std::printf("batch %d per rank, median of %d steps after a warm-up, best of %d alternating runs\n", a.batch, a.steps,
              a.repeats);
  for (auto name : {"S", "M"}) {
    auto s = colossal::llama::benchmark_shape(name);
    std::printf("  %s: %.1fM parameters, %.0f MFLOP per trained token at sequence %ld\n", name,
                s.config.num_parameters() / 1e6,
                colossal::llama::training_flops_per_token(s.config, s.sequence) / 1e6, s.sequence);
  }
  // The PyTorch reference, when this Python has torch.
  std::string python = a.python;
  if (python.empty()) python = std::getenv("COLOSSAL_PYTHON") ? std::getenv("COLOSSAL_PYTHON") : COLOSSAL_DEFAULT_PYTHON;
  std::string reference = std::string(COLOSSAL_SOURCE_DIR) + "/apps/bench/llama_torch_reference.py";
  if (!a.reference) {
    reference.clear();
  } else if (std::system(("'" + python + "' -c 'import torch' > /dev/null 2>&1").c_str()) != 0) {
    std::printf("(no PyTorch reference: '%s' cannot import torch; set COLOSSAL_PYTHON or --python)\n", python.c_str());
    reference.clear();
  }
  std::vector<Row> rows;
  const std::string row_file = "/tmp/bench_llama_row_" + std::to_string(::getpid());
  // The modes and each one's flags for our jobs and for the reference's (PEFT: nf4 only).
  std::string modes = a.modes;
  if (modes.empty()) modes = a.lora_rank <= 0 ? "full" : a.quantize_base.empty() ? "lora" : "qlora";
  const int64_t rank = a.lora_rank > 0 ? a.lora_rank : 16;
  const std::string format = a.quantize_base.empty() ? "nf4" : a.quantize_base;
  std::map<std::string, std::pair<std::string, std::string>> mode_flags;  // mode -> (ours, reference)
  for (const auto& mode : split_list(modes)) {
    COLOSSAL_CHECK(mode == "full" || mode == "lora" || mode == "qlora", "--modes: expected full, lora or qlora, got '",
                   mode, "'");
    const std::string lora = mode == "full" ? "" : " --lora_rank " + std::to_string(rank);
    mode_flags[mode] = {lora + (mode == "qlora" ? " --quantize_base " + format : ""),
                        lora + (mode == "qlora" ? " --quantize_base nf4" : "")};
  }
  if (modes != "full")
    std::printf("LoRA fine-tuning: rank %ld, alpha %ld, every projection of the blocks; QLoRA base in %s (PEFT: "
                "bitsandbytes nf4); PyTorch rows are PEFT's\n",
                static_cast<long>(rank), static_cast<long>(2 * rank), format.c_str());
  for (const auto& shape : split_list(a.shapes)) {
    for (const auto& layout : split_list(a.layouts)) {
      auto x = layout.find('x');
      COLOSSAL_CHECK(x != std::string::npos, "--layouts: expected RANKSxTHREADS like 2x1, got '", layout, "'");
      const std::string ranks = layout.substr(0, x), threads = layout.substr(x + 1);
      for (const auto& precision : split_list(a.precisions))
      for (const auto& mode : split_list(modes)) {
        const auto& [ours_flags, lora_flags] = mode_flags.at(mode);
        // Every job of this (shape, layout, precision, mode): label and command.
        std::vector<std::pair<std::string, std::string>> jobs;
        for (const auto& plugin : split_list(a.plugins))
          jobs.emplace_back("ours:" + plugin, "OMP_NUM_THREADS=" + threads + " '" + launcher + "' run --nproc_per_node " +
                                                  ranks + " -- '" + self + "' --shape " + shape + " --threads " +
                                                  threads + " --plugin " + plugin + " --precision " + precision +
                                                  " --row_file " + row_file + ours_flags + passthrough);
        for (const auto& strategy : reference.empty() ? std::vector<std::string>{} : split_list(a.references)) {
          const bool compile = strategy.size() > 8 && strategy.substr(strategy.size() - 8) == "+compile";
          const std::string base = compile ? strategy.substr(0, strategy.size() - 8) : strategy;
          if (ranks == "1" && base != "ddp") continue;  // one process: no wrapper to compare
          const std::string torchrun = ranks == "1" ? "" : "-m torch.distributed.run --nproc_per_node " + ranks + " ";
          jobs.emplace_back("torch:" + strategy,
                            "OMP_NUM_THREADS=" + threads + " timeout 1200 '" + python + "' " + torchrun + "'" +
                                reference + "' --shape " + shape + " --threads " + threads + " --steps " +
                                std::to_string(a.steps) + " --batch " + std::to_string(a.batch) + " --strategy " +
                                base + (compile ? " --compile" : "") + " --precision " + precision + " --row_file " +
                                row_file + lora_flags + (a.grad_checkpoint ? " --grad_checkpoint" : ""));
        }
        // Alternating runs, the fastest of each kept: a shared machine only ever slows a run down.
        std::map<std::string, Row> best;
        for (int rep = 0; rep < a.repeats; ++rep)
          for (const auto& [impl, cmd] : jobs) {
            Row r;
            if (!run_row(impl + " " + mode + " " + precision + ", " + shape + " on " + layout, cmd, row_file, r)) {
              if (impl.rfind("ours:", 0) == 0) return 1;  // ours must run; a reference may be unavailable
              continue;
            }
            r.impl = impl;
            r.precision = precision;
            r.mode = mode;
            if (!best.count(impl) || r.tokens_s > best[impl].tokens_s) best[impl] = r;
          }
        for (const auto& [impl, cmd] : jobs)
          if (best.count(impl)) rows.push_back(best[impl]);
      }
    }
  }
  print_table(rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  const std::string self = colossal::bench::self_path();
  const std::string invoked = argv[0];  // bench_lora is a link to this program: its name picks the defaults
  if (invoked.size() >= 10 && invoked.substr(invoked.size() - 10) == "bench_lora") {
    a.modes = "full,lora,qlora";
    a.shapes = "M";
    a.plugins = "ddp";
    a.precisions = "fp32";
    a.references = "ddp,ddp+compile";
  }
  CLI::App app{"LLaMA training tokens/s and MFU on the S and M shapes"};
  app.add_option("--shapes", a.shapes, "comma-separated: S,M")->capture_default_str();
  app.add_option("--layouts", a.layouts, "comma-separated RANKSxTHREADS")->capture_default_str();
  app.add_option("--plugins", a.plugins, "comma-separated Booster plugins (ours)")->capture_default_str();
  app.add_option("--precisions", a.precisions, "comma-separated: fp32, bf16")->capture_default_str();
  app.add_option("--references", a.references, "comma-separated PyTorch ways: ddp, ddp+compile, zero1, fsdp2")
      ->capture_default_str();
  app.add_option("--precision", a.precision, "(internal) the child job's precision: fp32 | bf16 | fp16");
  app.add_option("--plugin", a.plugin, "(internal) the child job's Booster plugin");
  app.add_option("--steps", a.steps, "measured steps (after one warm-up)")->capture_default_str();
  app.add_option("--batch", a.batch, "sequences per rank per step")->capture_default_str();
  app.add_option("--repeats", a.repeats, "alternating runs per row; the fastest is reported")->capture_default_str();
  app.add_flag("--grad_checkpoint", a.grad_checkpoint, "recompute each layer in backward");
  app.add_option("--lora_rank", a.lora_rank, "LoRA fine-tuning at this rank (ours: enable_lora; PyTorch: PEFT)");
  app.add_option("--quantize_base", a.quantize_base, "with --lora_rank: QLoRA base nf4 | int8 | int4 (PEFT: nf4 only)")
      ->check(CLI::IsMember({"", "nf4", "int8", "int4"}));
  app.add_option("--modes", a.modes, "comma-separated fine-tuning modes: full, lora, qlora (rank --lora_rank or 16; "
                 "QLoRA base --quantize_base or nf4)")->capture_default_str();
  app.add_option("--python", a.python, "Python with torch for the PyTorch reference");
  app.add_flag("!--no_reference", a.reference, "skip the PyTorch reference rows");
  app.add_option("--shape", a.shape, "(internal) the child job's shape");
  app.add_option("--threads", a.threads, "(internal) threads per rank");
  app.add_option("--row_file", a.row_file, "(internal) where a child job's rank 0 writes its row");
  CLI11_PARSE(app, argc, argv);
  try {
    if (std::getenv("RANK") == nullptr) {
      return drive(a, self, argc, argv);
    }
    dist::init();
    auto row = run_job(a);
    if (dist::rank() == 0 && !a.row_file.empty()) std::ofstream(a.row_file) << row_line(row);
    dist::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_llama: %s\n", colossal::error_text(e).c_str());
    return 1;
  }
}
