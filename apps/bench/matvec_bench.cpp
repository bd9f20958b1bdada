// The decode matvec's achieved read bandwidth (kernels/cpu/matvec) against a plain streaming read
// of the same process's threads, per weight format, on the matrices of one decode token of a
// LLaMA shape (every layer's qkv, o, gate_up and down, then the head), cycled so nothing stays in
// the caches between tokens.
//
// A second table times the prefill of one layer's matrices for a whole prompt (--prefill tokens):
// the integer GEMM over quantized weights (kernels/cpu/prefill_gemm) beside the fp32 GEMM over the
// same weights unpacked, the path it replaced, in the same run.
//
//   build/apps/bench_matvec [--shape M] [--formats fp32,bf16,int8,int4,q4_k,q6_k] [--threads 1,2] [--tokens 40]
//                           [--prefill 128]
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>

#include "apps/bench/bench_util.h"
#include "core/inference/packed_linear.h"
#include "kernels/cpu/kquants.h"
#include "kernels/cpu/matvec.h"
#include "kernels/cpu/prefill_gemm.h"
#include "llama/shapes.h"

using namespace colossal;
using colossal::bench::median;
using colossal::bench::seconds;
using colossal::bench::stream_read_gbps;
using colossal::bench::split_list;

namespace {

// A random [out, in] matrix in f (K-quants through their quantizer, as an exported GGUF file holds them).
inference::PackedLinear random_matrix(int64_t out, int64_t in, kernels::cpu::WeightFormat f) {
  auto w = (torch::randn({out, in}) * 0.02).contiguous();
  if (!kernels::cpu::is_kquant(f)) return inference::PackedLinear(w, f);
  std::vector<uint8_t> blocks(static_cast<size_t>(kernels::cpu::data_bytes(f, out, in)));
  kernels::cpu::quantize_kquant(f, w.data_ptr<float>(), out * in, blocks.data());
  return inference::PackedLinear::from_ggml_blocks(f, out, in, blocks.data());
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape = "M", formats = "fp32,bf16,int8,int4", threads = "1,2";
  int tokens = 40, prefill = 128;
  CLI::App app{"Decode matvec bandwidth per weight format vs a streaming read"};
  app.add_option("--shape", shape)->capture_default_str();
  app.add_option("--formats", formats)->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--tokens", tokens, "decode tokens timed (each reads every matrix once)")->capture_default_str();
  app.add_option("--prefill", prefill, "prompt tokens of the prefill table (0: skip it)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const auto c = llama::benchmark_shape(shape).config;
  const int64_t hidden = c.hidden_size, ffn = c.intermediate_size, d = c.resolved_head_dim();
  const int64_t qkv = (c.num_attention_heads + 2 * c.num_key_value_heads) * d;
  std::vector<std::array<int64_t, 2>> shapes;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    shapes.insert(shapes.end(), {{qkv, hidden}, {hidden, c.num_attention_heads * d}, {2 * ffn, hidden}, {hidden, ffn}});
  shapes.push_back({c.vocab_size, hidden});
  std::printf("%-6s %7s %10s %12s %10s %9s\n", "format", "threads", "MB/token", "matvec GB/s", "read GB/s", "of read");
  for (const auto& name : split_list(formats)) {
    const auto f = kernels::cpu::weight_format(name);
    torch::manual_seed(0);
    std::vector<inference::PackedLinear> mats;
    int64_t bytes = 0;
    for (auto [o, i] : shapes) {
      mats.push_back(random_matrix(o, i, f));
      bytes += mats.back().bytes();
    }
    auto x = torch::randn({std::max(hidden, ffn)});
    auto y = torch::empty({c.vocab_size});
    for (const auto& th : split_list(threads)) {
      at::set_num_threads(std::stoi(th));
      auto token = [&] {
        for (const auto& m : mats) m.forward_into(x.data_ptr<float>(), 1, y.data_ptr<float>(), m.out_features());
      };
      token();
      std::vector<double> t;
      for (int k = 0; k < tokens; ++k) t.push_back(seconds(token));
      const double gbps = bytes / median(t) / 1e9, read = stream_read_gbps();
      std::printf("%-6s %7s %10.1f %12.1f %10.1f %8.1f%%\n", name.c_str(), th.c_str(), bytes / 1e6, gbps, read,
                  100 * gbps / read);
      std::fflush(stdout);
    }
  }
  // A few tokens at once (batched decode): the matvec kernel against the integer GEMM, to place
  // the point where PackedLinear switches from one to the other.
  std::printf("\nbatched decode through one layer's matrices: microseconds per call, matvec / integer GEMM\n");
  std::printf("%-6s %7s", "format", "threads");
  const std::vector<int64_t> batches = {2, 4, 8, 12, 16};
  for (int64_t n : batches) std::printf(" %15ld", n);
  std::printf("\n");
  for (const auto& name : split_list(formats)) {
    const auto f = kernels::cpu::weight_format(name);
    if (!kernels::cpu::prefill_gemm_supports(f)) continue;
    torch::manual_seed(0);
    std::vector<inference::PackedLinear> mats;
    for (int k = 0; k < 4; ++k) mats.push_back(random_matrix(shapes[k][0], shapes[k][1], f));
    auto x = torch::randn({16, std::max(hidden, ffn)});
    auto y = torch::empty({16, 2 * ffn + qkv});
    for (const auto& th : split_list(threads)) {
      at::set_num_threads(std::stoi(th));
      std::printf("%-6s %7s", name.c_str(), th.c_str());
      for (int64_t n : batches) {
        kernels::cpu::MatvecInput vin;
        auto by_matvec = [&] {  // the kernel itself (PackedLinear now picks the GEMM where it wins)
          for (const auto& m : mats) {
            kernels::cpu::prepare_input(vin, f, x.data_ptr<float>(), n, m.in_features());
            const auto v = m.view();
            at::parallel_for(0, m.out_features(), 16, [&](int64_t b, int64_t e) {
              kernels::cpu::matvec(v, vin, y.data_ptr<float>(), m.out_features(), b, e);
            });
          }
        };
        kernels::cpu::PrefillInput in;
        auto by_gemm = [&] {
          for (const auto& m : mats) {
            kernels::cpu::prepare_prefill_input(in, f, n, m.in_features());
            kernels::cpu::quantize_prefill_rows(in, x.data_ptr<float>(), 0, n);
            const auto v = m.view();
            const int64_t panels = (m.out_features() + 7) / 8;
            at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
              kernels::cpu::prefill_gemm(v, in, y.data_ptr<float>(), m.out_features(), b * 8,
                                         std::min(e * 8, m.out_features()));
            });
          }
        };
        double us[2];
        for (int path = 0; path < 2; ++path) {
          std::vector<double> t;
          for (int k = 0; k < 9; ++k) t.push_back(seconds(path == 0 ? std::function<void()>(by_matvec) : by_gemm));
          us[path] = 1e6 * median(t);
        }
        std::printf(" %7.0f / %5.0f", us[0], us[1]);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  if (prefill <= 0) return 0;
  // One layer's matrices (query/key/value, output, gate/up, down) for the whole prompt.
  std::printf("\nprefill of %d tokens through one layer's matrices: GFLOP/s\n", prefill);
  std::printf("%-6s %7s %12s %12s %7s\n", "format", "threads", "integer", "fp32 GEMM", "ratio");
  for (const auto& name : split_list(formats)) {
    const auto f = kernels::cpu::weight_format(name);
    if (!kernels::cpu::is_byte_format(f)) continue;
    torch::manual_seed(0);
    std::vector<inference::PackedLinear> mats;
    double flops = 0;
    for (int k = 0; k < 4; ++k) {
      mats.push_back(random_matrix(shapes[k][0], shapes[k][1], f));
      flops += 2.0 * prefill * shapes[k][0] * shapes[k][1];
    }
    auto x = torch::randn({prefill, std::max(hidden, ffn)});
    auto y = torch::empty({prefill, 2 * ffn + qkv});
    for (const auto& th : split_list(threads)) {
      at::set_num_threads(std::stoi(th));
      auto layer = [&] {
        for (const auto& m : mats) m.forward_into(x.data_ptr<float>(), prefill, y.data_ptr<float>(), m.out_features());
      };
      double rate[2] = {0, 0};
      for (int path = 0; path < 2; ++path) {  // integer, then the fp32 GEMM
        const bool was = kernels::cpu::prefill_gemm_enable(path == 0);
        layer();
        std::vector<double> t;
        for (int k = 0; k < 7; ++k) t.push_back(seconds(layer));
        rate[path] = flops / median(t) / 1e9;
        kernels::cpu::prefill_gemm_enable(was);
      }
      const bool ran = kernels::cpu::prefill_gemm_supports(f);
      char integer[32] = "n/a";  // (a CPU without AVX2 runs the fp32 GEMM both times)
      if (ran) std::snprintf(integer, sizeof integer, "%.1f", rate[0]);
      std::printf("%-6s %7s %12s %12.1f %6.2fx\n", name.c_str(), th.c_str(), integer, rate[1],
                  ran ? rate[0] / rate[1] : 0.0);
      std::fflush(stdout);
    }
  }
  return 0;
}
