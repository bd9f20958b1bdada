// The decode matvec's achieved read bandwidth (kernels/cpu/matvec) against a plain streaming read
// of the same process's threads, per weight format, on the matrices of one decode token of a
// LLaMA shape (every layer's qkv, o, gate_up and down, then the head), cycled so nothing stays in
// the caches between tokens.
//
//   build/apps/bench_matvec [--shape M] [--formats fp32,bf16,int8,int4] [--threads 1,2] [--tokens 40]
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "apps/bench/bench_util.h"
#include "core/inference/packed_linear.h"
#include "kernels/cpu/matvec.h"
#include "llama/shapes.h"

using namespace colossal;
using colossal::bench::median;
using colossal::bench::seconds;
using colossal::bench::stream_read_gbps;
using colossal::bench::split_list;


int main(int argc, char** argv) {
  std::string shape = "M", formats = "fp32,bf16,int8,int4", threads = "1,2";
  int tokens = 40;
  CLI::App app{"Decode matvec bandwidth per weight format vs a streaming read"};
  app.add_option("--shape", shape)->capture_default_str();
  app.add_option("--formats", formats)->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--tokens", tokens, "decode tokens timed (each reads every matrix once)")->capture_default_str();
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
      mats.emplace_back(torch::randn({o, i}) * 0.02, f);
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
  return 0;
}
