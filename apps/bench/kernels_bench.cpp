// GPU benchmarks (run by scripts/gpu_check.sh on the lent H200), ours beside the plain LibTorch /
// PyTorch way in the same run, one JSON line per measurement and a table at the end:
//   kernels  each kernels/cuda kernel: time, bytes it must move, achieved GB/s against the
//            device's measured copy bandwidth (same run) and the nominal --peak_gbps (H200:
//            4800), and the LibTorch composition (or PyTorch's own fused op) it replaces
//   decode   the GPU engine (llama/cuda_inference) on random weights of the shapes given:
//            tokens/s at batch 1 and 32 against the bandwidth bound (weights, and the KV cache,
//            read once per step at the measured copy rate)
//   train    train_llama's step (DDP plugin on one GPU, --precision, FusedAdamW) for the shapes
//            given: tokens/s and MFU against a measured 8192^3 product in the same dtype, beside
//            apps/bench/llama_torch_reference.py --device cuda eager and torch.compile
//
//   build/apps/bench_kernels [--sections kernels,decode,train] [--shapes M,1B] [--precision bf16]
#include <torch/cuda.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "apps/bench/bench_util.h"
#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/common/check.h"
#include "core/cuda/ops.h"
#include "core/dist/runtime.h"
#include "core/inference/engine.h"
#include "core/nn/fused_losses.h"
#include "core/nn/rms_norm.h"
#include "core/nn/rotary.h"
#include "core/nn/swiglu.h"
#include "core/optim/factory.h"
#include "core/optim/fused_adamw.h"
#include "llama/cuda_inference.h"
#include "llama/model.h"
#include "llama/shapes.h"

namespace {

using colossal::median;
namespace nn = colossal::nn;

struct Args {
  std::string sections = "kernels,decode,train";
  std::string shapes = "M,1B";
  std::string precision = "bf16";
  double peak_gbps = 4800;
  int repeats = 20;
  int steps = 5;
  std::string python;  // the project's python, for the PyTorch reference rows
  std::string reference = "apps/bench/llama_torch_reference.py";
};

const c10::Device kGpu(c10::kCUDA, 0);

// Median seconds of fn over `repeats` runs after two warm-ups, the device synchronised around each.
template <typename Fn>
double gpu_seconds(int repeats, Fn&& fn) {
  for (int i = 0; i < 2; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    torch::cuda::synchronize();
    t.push_back(colossal::bench::seconds([&] {
      fn();
      torch::cuda::synchronize();
    }));
  }
  return median(t);
}

struct Line {
  std::string section, name, ours, theirs;
  double ratio = 0;
  std::string figure;
};
std::vector<Line> table;

void report(const std::string& section, const std::string& name, const std::string& json, Line line) {
  std::printf("{\"section\":\"%s\",\"name\":\"%s\",%s}\n", section.c_str(), name.c_str(), json.c_str());
  std::fflush(stdout);
  line.section = section;
  line.name = name;
  table.push_back(line);
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// ---- kernels -----------------------------------------------------------------------------------
void kernel_row(const Args& a, double copy_gbps, const std::string& name, double bytes,
                const std::function<void()>& ours, const std::function<void()>& theirs, const std::string& what) {
  const double t = gpu_seconds(a.repeats, ours), r = gpu_seconds(a.repeats, theirs);
  const double gbps = bytes / t / 1e9;
  std::ostringstream j;
  j << "\"bytes\":" << bytes << ",\"ours_s\":" << t << ",\"ours_gbps\":" << gbps << ",\"of_copy\":" << gbps / copy_gbps
    << ",\"of_peak\":" << gbps / a.peak_gbps << ",\"reference\":\"" << what << "\",\"reference_s\":" << r
    << ",\"speedup\":" << r / t;
  report("kernels", name, j.str(),
         {"", "", fmt("%.0f GB/s", gbps), what, r / t,
          fmt("%.0f%% of copy", 100 * gbps / copy_gbps) + ", " + fmt("%.0f%% of peak", 100 * gbps / a.peak_gbps)});
}

// GB/s of a 1 GiB device-to-device copy, counting bytes read and written: the rate the kernels
// and the decode bound are held to.
double measure_copy_gbps(int repeats) {
  auto src = torch::empty({int64_t{1} << 28}, torch::TensorOptions().device(kGpu));
  auto dst = torch::empty_like(src);
  return 2.0 * static_cast<double>(src.nbytes()) / gpu_seconds(repeats, [&] { dst.copy_(src); }) / 1e9;
}

double copy_bandwidth(const Args& a) {
  const double gbps = measure_copy_gbps(a.repeats);
  report("kernels", "device copy (read + write)", "\"gbps\":" + std::to_string(gbps),
         {"", "", fmt("%.0f GB/s", gbps), "", 0, fmt("%.0f%% of peak", 100 * gbps / a.peak_gbps)});
  return gbps;
}

void run_kernels(const Args& a) {
  torch::NoGradGuard no_grad;
  const double copy = copy_bandwidth(a);
  const auto bf16 = torch::TensorOptions().device(kGpu).dtype(torch::kBFloat16);
  const auto f32 = torch::TensorOptions().device(kGpu).dtype(torch::kFloat);
  {  // AdamW over a 1B-parameter model's tensors (bf16 working weights, fp32 masters)
    std::vector<torch::Tensor> p, g, w, m, v, steps;
    const std::vector<int64_t> sizes = {2048 * 2048, 2048 * 5632, 2048};
    int64_t total = 0;
    for (int i = 0; i < 3 * 20; ++i) {
      const int64_t n = sizes[i % 3];
      total += n;
      p.push_back(torch::randn({n}, f32));
      g.push_back(torch::randn({n}, f32) * 1e-3);
      m.push_back(torch::zeros({n}, f32));
      v.push_back(torch::zeros({n}, f32));
      steps.push_back(torch::ones({}, f32));
    }
    colossal::optim::FusedAdamW ours(p, torch::optim::AdamWOptions(1e-4));
    for (size_t i = 0; i < p.size(); ++i) p[i].mutable_grad() = g[i];
    kernel_row(a, copy, "adamw fp32 (" + std::to_string(total / 1000000) + "M params, 60 tensors)",
               28.0 * static_cast<double>(total), [&] { ours.step(); },
               [&] {
                 at::_fused_adamw_(p, g, m, v, {}, steps, 1e-4, 0.9, 0.999, 0.01, 1e-8, false, false);
               },
               "torch _fused_adamw_");
  }
  for (int64_t dim : {2048, 8192}) {
    const int64_t rows = 16384;
    auto x = torch::randn({rows, dim}, bf16), wt = torch::ones({dim}, bf16);
    auto ref = [&] {
      auto h = x.to(torch::kFloat);
      h = h * torch::rsqrt(h.pow(2).mean(-1, true) + 1e-6);
      return wt * h.to(torch::kBFloat16);
    };
    kernel_row(a, copy, "rmsnorm forward bf16 " + std::to_string(rows) + "x" + std::to_string(dim),
               2.0 * static_cast<double>(x.nbytes()), [&] { colossal::cuda::rms_norm_forward(x, wt, 1e-6); }, ref,
               "LibTorch ops (HF LlamaRMSNorm)");
    auto gy = torch::randn({rows, dim}, bf16);
    auto rstd = std::get<1>(colossal::cuda::rms_norm_forward(x, wt, 1e-6));
    kernel_row(a, copy, "rmsnorm backward bf16 " + std::to_string(rows) + "x" + std::to_string(dim),
               3.0 * static_cast<double>(x.nbytes()), [&] { colossal::cuda::rms_norm_backward(gy, x, wt, rstd); },
               [&] {
                 torch::AutoGradMode on(true);
                 auto xi = x.detach().requires_grad_();
                 auto h = xi.to(torch::kFloat);
                 auto y = wt * (h * torch::rsqrt(h.pow(2).mean(-1, true) + 1e-6)).to(torch::kBFloat16);
                 y.backward(gy);
               },
               "LibTorch autograd (forward + backward)");
  }
  {
    const int64_t B = 8, T = 2048, H = 32, D = 128;
    auto x = torch::randn({B, T, H, D}, bf16);
    auto angles = torch::outer(torch::arange(T, f32), torch::rand({D / 2}, f32));
    auto emb = torch::cat({angles, angles}, -1);
    auto cos = emb.cos(), sin = emb.sin();
    auto pos = torch::arange(T, f32.dtype(torch::kLong));
    kernel_row(a, copy, "rope bf16 [8, 2048, 32, 128]", 2.0 * static_cast<double>(x.nbytes()),
               [&] { colossal::cuda::rope(x, cos, sin, pos, false); },
               [&] {
                 auto c = cos.index_select(0, pos).unsqueeze(1).to(torch::kBFloat16);
                 auto s = sin.index_select(0, pos).unsqueeze(1).to(torch::kBFloat16);
                 auto half = D / 2;
                 auto rot = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
                 (void)(x * c + rot * s);
               },
               "LibTorch ops (HF apply_rotary_pos_emb)");
  }
  {
    const int64_t rows = 16384, f = 5632;
    auto gu = torch::randn({rows, 2 * f}, bf16);
    auto gate = gu.narrow(1, 0, f), up = gu.narrow(1, f, f);
    auto gy = torch::randn({rows, f}, bf16);
    const double elem = static_cast<double>(rows * f) * 2;
    kernel_row(a, copy, "swiglu forward bf16 16384x5632", 3 * elem, [&] { colossal::cuda::swiglu_forward(gate, up); },
               [&] { (void)(torch::silu(gate) * up); }, "LibTorch silu * up");
    kernel_row(a, copy, "swiglu backward bf16 16384x5632", 5 * elem,
               [&] { colossal::cuda::swiglu_backward(gy, gate, up); },
               [&] {
                 torch::AutoGradMode on(true);
                 auto g = gate.detach().requires_grad_(), u = up.detach().requires_grad_();
                 (torch::silu(g) * u).backward(gy);
               },
               "LibTorch autograd (forward + backward)");
  }
  {
    const int64_t rows = 8192, vocab = 128256;
    auto logits = torch::randn({rows, vocab}, bf16);
    auto work = logits.clone();
    auto target = torch::randint(vocab, {rows}, f32.dtype(torch::kLong));
    auto scale = torch::full({1}, 1.0f / rows, f32);
    kernel_row(a, copy, "cross entropy + gradient bf16 8192x128256", 2.0 * static_cast<double>(logits.nbytes()),
               [&] { colossal::cuda::cross_entropy_rows(work, target, -100, scale); },
               [&] {
                 torch::AutoGradMode on(true);
                 auto l = logits.detach().requires_grad_();
                 torch::nn::functional::cross_entropy(l.to(torch::kFloat), target).backward();
               },
               "LibTorch cross_entropy (fp32 upcast) + backward");
  }
  for (int64_t batch : {1, 32}) {
    const int64_t context = 4096, heads = 32, kv = 8, d = 128, bs = 16;
    const int64_t per_seq = context / bs, blocks = batch * per_seq;
    auto k = torch::randn({blocks, bs, kv, d}, bf16), v = torch::randn({blocks, bs, kv, d}, bf16);
    auto tables = torch::arange(blocks, f32.dtype(torch::kInt)).view({batch, per_seq});
    auto seq = torch::arange(batch, f32.dtype(torch::kInt));
    auto ctx = torch::full({batch}, context, f32.dtype(torch::kInt));
    auto q = torch::randn({batch, heads, d}, bf16), out = torch::empty_like(q);
    auto kq = k.view({batch, context, kv, d}).transpose(1, 2), vq = v.view({batch, context, kv, d}).transpose(1, 2);
    kernel_row(a, copy, "paged attention decode bf16 batch " + std::to_string(batch) + ", context 4096, GQA 32/8",
               2.0 * static_cast<double>(k.nbytes()),
               [&] { colossal::cuda::paged_attention(q, out, k, v, tables, seq, ctx, 1.0 / std::sqrt(128.0)); },
               [&] {
                 (void)at::scaled_dot_product_attention(q.unsqueeze(2), kq, vq, {}, 0.0, false, std::nullopt, true);
               },
               "SDPA over a contiguous cache");
  }
}

// ---- decode ------------------------------------------------------------------------------------
class NoText : public colossal::inference::Detokenizer {
 public:
  std::string decode(const std::vector<int64_t>&) const override { return {}; }
};

void run_decode(const Args& a, const std::string& shape_name, at::ScalarType dtype) {
  auto shape = colossal::llama::benchmark_shape(shape_name);
  shape.config.max_position_embeddings = 2048;
  torch::manual_seed(0);
  colossal::llama::LlamaForCausalLM model(shape.config);
  auto gpu = std::make_shared<colossal::llama::LlamaCudaInference>(
      model, colossal::llama::LlamaCudaInference::Options{kGpu, dtype});
  const double copy = measure_copy_gbps(5);
  for (int64_t batch : {1, 32}) {
    colossal::inference::EngineOptions o;
    o.cache.block_size = 16;
    o.cache.memory_bytes = int64_t{8} << 30;
    o.max_num_seqs = batch;
    colossal::inference::Engine engine(gpu, std::make_shared<NoText>(), /*eos_id=*/-1, o);
    const int64_t prompt = 128, generate = 256;
    std::vector<colossal::inference::GenerationRequest> reqs;
    for (int64_t i = 0; i < batch; ++i) {
      colossal::inference::GenerationRequest r;
      for (int64_t t = 0; t < prompt; ++t) r.prompt.push_back((t * 37 + i * 11) % shape.config.vocab_size);
      r.params.temperature = 0;
      r.params.max_tokens = generate;
      r.params.ignore_eos = true;
      reqs.push_back(r);
    }
    engine.generate(std::vector<colossal::inference::GenerationRequest>(reqs.begin(), reqs.begin() + 1));  // warm-up
    torch::cuda::synchronize();
    auto results = engine.generate(reqs);
    double decode_s = 0;
    for (const auto& r : results) decode_s = std::max(decode_s, r.latency_s - r.time_to_first_token_s);
    const double tokens_s = static_cast<double>(batch * (generate - 1)) / decode_s;
    // The bound: every step reads the weights once and each sequence's cache so far (mean context).
    const double kv_bytes = static_cast<double>(batch) * (prompt + generate / 2.0) * 2 * shape.config.num_hidden_layers *
                            shape.config.num_key_value_heads * shape.config.resolved_head_dim() *
                            static_cast<double>(c10::elementSize(dtype));
    const double step_bytes = static_cast<double>(gpu->weight_bytes_per_token()) + kv_bytes;
    // The copy figure counts reads and writes: a read-only stream is bounded by the same rate.
    const double bound = static_cast<double>(batch) * copy * 1e9 / step_bytes;
    std::ostringstream j;
    j << "\"shape\":\"" << shape_name << "\",\"dtype\":\"" << c10::toString(dtype) << "\",\"batch\":" << batch
      << ",\"tokens_s\":" << tokens_s << ",\"bound_tokens_s\":" << bound << ",\"of_bound\":" << tokens_s / bound;
    report("decode", shape_name + " " + c10::toString(dtype) + " batch " + std::to_string(batch), j.str(),
           {"", "", fmt("%.0f tok/s", tokens_s), fmt("bound %.0f tok/s", bound), 0,
            fmt("%.0f%% of the bandwidth bound", 100 * tokens_s / bound)});
  }
}

// ---- train -------------------------------------------------------------------------------------
struct TrainRow {
  double tokens_s = 0, mfu = 0, peak_gib = 0;
};

double matmul_rate(torch::ScalarType dtype) {
  auto x = torch::randn({8192, 8192}, torch::TensorOptions().device(kGpu).dtype(dtype));
  auto out = torch::empty_like(x);
  return 2.0 * 8192.0 * 8192.0 * 8192.0 / gpu_seconds(5, [&] { torch::mm_out(out, x, x); }) / 1e9;
}

TrainRow train_ours(const Args& a, const std::string& shape_name) {
  auto shape = colossal::llama::benchmark_shape(shape_name);
  torch::manual_seed(0);
  colossal::llama::LlamaForCausalLM model(shape.config);
  colossal::booster::PluginConfig pc;
  pc.name = "ddp";
  pc.device = "cuda";
  pc.precision = a.precision;
  colossal::booster::Booster booster(colossal::booster::make_plugin(pc));
  auto optimizer = colossal::optim::make_optimizer(*model, {.name = "fused_adamw", .lr = 1e-4});
  auto b = booster.boost(model.ptr(), optimizer);
  const int64_t T = shape.sequence;
  auto ids = torch::randint(shape.config.vocab_size, {1, T}, torch::TensorOptions().device(kGpu).dtype(torch::kLong));
  torch::cuda::synchronize();
  const double step = gpu_seconds(a.steps, [&] {
    b.optimizer->zero_grad();
    booster.backward(model->loss(ids, ids), *b.optimizer);
    b.optimizer->step();
  });
  TrainRow r;
  r.tokens_s = static_cast<double>(T) / step;
  const double rate = matmul_rate(b.compute_dtype);
  r.mfu = r.tokens_s * colossal::llama::training_flops_per_token(shape.config, T) / 1e9 / rate;
  return r;
}

std::optional<TrainRow> train_reference(const Args& a, const std::string& shape_name, bool compile) {
  if (a.python.empty()) return std::nullopt;
  const std::string row = "/tmp/bench_kernels_reference_row.txt";
  std::remove(row.c_str());
  const std::string cmd = a.python + " " + a.reference + " --device cuda --shape " + shape_name + " --precision " +
                          a.precision + " --steps " + std::to_string(a.steps) + (compile ? " --compile" : "") +
                          " --row_file " + row + " >&2";
  if (std::system(cmd.c_str()) != 0) return std::nullopt;
  std::ifstream in(row);
  std::string shape, layout;
  double step_s, tokens_s, mm, model_gflops, mfu, peak;
  if (!(in >> shape >> layout >> step_s >> tokens_s >> mm >> model_gflops >> mfu >> peak)) return std::nullopt;
  return TrainRow{tokens_s, mfu, peak};
}

void run_train(const Args& a, const std::string& shape_name) {
  auto ours = train_ours(a, shape_name);
  auto eager = train_reference(a, shape_name, false);
  auto compiled = train_reference(a, shape_name, true);
  std::ostringstream j;
  j << "\"shape\":\"" << shape_name << "\",\"precision\":\"" << a.precision << "\",\"tokens_s\":" << ours.tokens_s
    << ",\"mfu\":" << ours.mfu;
  if (eager) j << ",\"torch_eager_tokens_s\":" << eager->tokens_s;
  if (compiled) j << ",\"torch_compile_tokens_s\":" << compiled->tokens_s;
  const double best = std::max(eager ? eager->tokens_s : 0.0, compiled ? compiled->tokens_s : 0.0);
  report("train", shape_name + " " + a.precision, j.str(),
         {"", "", fmt("%.0f tok/s", ours.tokens_s), fmt("torch best %.0f tok/s", best), best > 0 ? ours.tokens_s / best : 0,
          fmt("MFU %.0f%%", 100 * ours.mfu) + (eager ? fmt(", eager %.0f", eager->tokens_s) : "") +
              (compiled ? fmt(", compile %.0f", compiled->tokens_s) : "")});
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"GPU kernels, decoding and training against LibTorch / PyTorch (one run, side by side)"};
  app.add_option("--sections", a.sections, "comma-separated: kernels, decode, train")->capture_default_str();
  app.add_option("--shapes", a.shapes, "benchmark shapes for decode and train (S, M, 1B)")->capture_default_str();
  app.add_option("--precision", a.precision, "training precision: bf16 or fp32")->capture_default_str();
  app.add_option("--peak_gbps", a.peak_gbps, "the device's nominal memory bandwidth (H200: 4800)")->capture_default_str();
  app.add_option("--repeats", a.repeats, "timed runs per kernel (the median is kept)")->capture_default_str();
  app.add_option("--steps", a.steps, "timed training steps (the median is kept)")->capture_default_str();
  app.add_option("--python", a.python, "python with torch for the PyTorch training rows (none: ours only)");
  app.add_option("--reference", a.reference, "the PyTorch training script")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    COLOSSAL_CHECK(colossal::cuda::kernels_usable(), "bench_kernels needs a CUDA GPU and this build's CUDA kernels; "
                   "none is visible here");
    colossal::dist::init();
    for (const auto& section : colossal::bench::split_list(a.sections)) {
      if (section == "kernels") {
        run_kernels(a);
      } else if (section == "decode") {
        for (const auto& s : colossal::bench::split_list(a.shapes)) run_decode(a, s, torch::kBFloat16);
      } else if (section == "train") {
        for (const auto& s : colossal::bench::split_list(a.shapes)) run_train(a, s);
      } else {
        COLOSSAL_FAIL("--sections: unknown section '", section, "' (kernels, decode, train)");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", colossal::error_text(e).c_str());
    return 1;
  }
  std::printf("\n%-8s | %-58s | %-14s | %-40s | %-7s | %s\n", "section", "what", "ours", "against", "ratio", "");
  for (const auto& l : table)
    std::printf("%-8s | %-58s | %-14s | %-40s | %-7s | %s\n", l.section.c_str(), l.name.c_str(), l.ours.c_str(),
                l.theirs.c_str(), l.ratio > 0 ? fmt("%.2fx", l.ratio).c_str() : "", l.figure.c_str());
  return 0;
}
