// bench_sora: the figures of the video pipeline, in one run.
//
// 1. STDiT training throughput and MFU, ours beside plain PyTorch (eager and torch.compile) on
//    the same model (apps/bench/stdit_torch_reference.py), alternating runs, the fastest of each:
//      default  train_sora's DiT: hidden 128, 4 block pairs, 4 heads; latents [4, 4, 8, 8]
//               (32x32 frames, 8 of them) = 64 tokens per window; batch 8
//      L        hidden 256, 6 pairs, 8 heads; latents [4, 8, 16, 16] = 512 tokens; batch 2
//    A step is the caption encoder, STDiT's forward on a rectified-flow pair, the loss, backward
//    and AdamW. MFU = model FLOP/s / the fp32 2048x2048 torch::mm rate measured before each
//    step in the same process (so a busy machine moves both). Model FLOPs per step = 3 x the
//    forward's matrix products and attention (2 per multiply-add): patch embedding, per block
//    28 D^2 per token (qkv, projections, cross-attention query and output, MLP), attention
//    4 L D per token (L the frames, the frame's tokens or the caption's), the caption's keys and
//    values once per sample and block, the final layer, and the caption encoder.
// 2. Text to video with train_sora's models (--model_dir, default out/sora): seconds per video
//    (median over seeds), and how close each built-in caption's clip is to the training
//    windows: PSNR and SSIM against the nearest window of its own clip and the nearest of the
//    other clips. A side-by-side PNG (generated frames over the nearest window) per caption.
//
//   build/apps/bench_sora [--shapes default,L] [--steps 5] [--repeats 2] [--model_dir out/sora]
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "apps/bench/bench_util.h"
#include "core/common/check.h"
#include "core/common/fs.h"
#include "core/optim/factory.h"
#include "sora/data/clip_csv.h"
#include "sora/data/video_windows.h"
#include "sora/diffusion/rectified_flow.h"
#include "sora/io/contact_sheet.h"
#include "sora/io/quality.h"
#include "sora/models/video_denoiser.h"
#include "sora/pipeline/text_to_video.h"

using colossal::bench::median;
using namespace colossal::sora;

namespace {

struct Shape {
  std::string name;
  int64_t hidden, depth, heads, channels, frames, height, width, batch;  // latent sizes
};

Shape shape_named(const std::string& name) {
  if (name == "default") return {"default", 128, 4, 4, 4, 4, 8, 8, 8};
  if (name == "L") return {"L", 256, 6, 8, 4, 8, 16, 16, 2};
  COLOSSAL_CHECK(false, "--shapes: expected default or L, got '", name, "'");
  return {};
}

constexpr int64_t kTextTokens = 64, kTextLayers = 2;

// Forward FLOPs of one training sample (see the header); training is three times this.
double forward_flops(const Shape& s) {
  const double D = s.hidden, T = s.frames, S = (s.height / 2) * (s.width / 2), N = T * S, P = 4.0 * s.channels;
  const double M = kTextTokens;
  double f = 2 * N * P * D * 2;                       // patch embedding and final layer
  f += s.depth * N * (28 * D * D) * 2;                // spatial and temporal blocks
  f += s.depth * N * 4 * D * (S + T);                 // self-attention: within frames, across frames
  f += 2 * s.depth * (N * 4 * M * D + 4 * M * D * D); // cross-attention and the caption's keys/values
  f += kTextLayers * M * (24 * D * D + 4 * M * D);    // the caption encoder
  return f;
}

struct Row {
  std::string impl, shape;
  double step_s = 0, matmul_gflops = 0;
  int64_t parameters = 0;
};

Row run_ours(const Shape& s, int steps) {
  torch::manual_seed(0);
  VideoDenoiser model(StditOptions{.in_channels = s.channels, .hidden = s.hidden, .depth = s.depth, .heads = s.heads,
                                   .text_dim = s.hidden, .text_tokens = kTextTokens},
                      TextEncoderOptions{.dim = s.hidden, .layers = kTextLayers, .heads = s.heads,
                                         .max_tokens = kTextTokens});
  auto optimizer = colossal::optim::make_optimizer(*model, {.name = "fused_adamw", .lr = 1e-4});  // train_sora's
  const auto x0 = torch::randn({s.batch, s.channels, s.frames, s.height, s.width});
  const std::vector<std::string> captions(s.batch, "people walk across a plaza past a lamp post");
  auto train_step = [&] {
    const auto caption = model->text->forward(captions);
    const auto pair = flow_training_pair(x0, torch::randn_like(x0), torch::rand({s.batch}));
    const auto loss = (model->dit->forward(pair.noisy, pair.t, caption.tokens, caption.mask) - pair.target).pow(2).mean();
    optimizer->zero_grad();
    loss.backward();
    optimizer->step();
  };
  std::vector<double> times, rates;
  for (int step = 0; step < steps + 2; ++step) {  // two warm-up steps, as the reference
    const double rate = colossal::bench::matmul_gflops();
    const double t = colossal::bench::seconds(train_step);
    if (step >= 2) times.push_back(t), rates.push_back(rate);
  }
  // COLOSSAL_BENCH_TRACE=FILE: a Chrome trace of one more step (chrome://tracing, or summed by
  // op name with a few lines of Python).
  if (const char* trace = std::getenv("COLOSSAL_BENCH_TRACE")) {
    torch::autograd::profiler::RecordProfile guard(trace);
    train_step();
  }
  Row r{.impl = "colossal", .shape = s.name, .step_s = median(times), .matmul_gflops = median(rates)};
  for (const auto& p : model->parameters()) r.parameters += p.numel();
  return r;
}

std::optional<Row> run_reference(const std::string& python, const Shape& s, int steps, int threads, bool compile) {
  const std::string script = std::string(COLOSSAL_SOURCE_DIR) + "/apps/bench/stdit_torch_reference.py";
  const std::string out = "/tmp/bench_sora_ref_" + std::to_string(::getpid());
  const std::string cmd = "OMP_NUM_THREADS=" + std::to_string(threads) + " timeout 900 '" + python + "' '" + script +
                          "' --shape " + s.name + " --threads " + std::to_string(threads) + " --steps " +
                          std::to_string(steps) + (compile ? " --compile" : "") + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  std::string line, all;
  std::optional<Row> row;
  while (std::getline(in, line)) {
    all += line + "\n";
    if (line.rfind("row ", 0) != 0) continue;
    std::istringstream ls(line.substr(4));
    Row r{.shape = s.name};
    ls >> r.impl >> r.step_s >> r.matmul_gflops >> r.parameters;
    row = r;
  }
  ::unlink(out.c_str());
  if (rc != 0 || !row) std::fprintf(stderr, "[bench_sora] the PyTorch reference failed (%s):\n%s\n", cmd.c_str(), all.c_str());
  return rc == 0 ? row : std::nullopt;
}

void training_table(const std::string& shapes, int steps, int repeats, const std::string& python) {
  const int threads = at::get_num_threads();
  const bool reference = !python.empty() &&
                         std::system(("'" + python + "' -c 'import torch' > /dev/null 2>&1").c_str()) == 0;
  if (!reference) std::printf("(no PyTorch reference: set COLOSSAL_PYTHON or --python to a Python with torch)\n");
  std::printf("STDiT training, 1 process x %d threads, fp32, median of %d steps after 2 warm-ups, best of %d "
              "alternating runs\n", threads, steps, repeats);
  std::printf("%-8s %-16s %9s %8s %10s %10s %10s %7s\n", "shape", "impl", "params", "step s", "tokens/s", "mm GFLOP/s",
              "model GF/s", "MFU");
  std::stringstream list(shapes);
  std::string name;
  while (std::getline(list, name, ',')) {
    const Shape s = shape_named(name);
    const double tokens = s.batch * s.frames * (s.height / 2) * (s.width / 2);
    const double flops = 3 * forward_flops(s) * s.batch;
    std::map<std::string, Row> best;
    auto keep = [&](const std::optional<Row>& r) {
      if (r && (!best.count(r->impl) || r->step_s < best[r->impl].step_s)) best[r->impl] = *r;
    };
    for (int rep = 0; rep < repeats; ++rep) {
      keep(run_ours(s, steps));
      if (reference) {
        keep(run_reference(python, s, steps, threads, false));
        keep(run_reference(python, s, steps, threads, true));
      }
    }
    for (const char* impl : {"colossal", "pytorch", "pytorch+compile"}) {
      if (!best.count(impl)) continue;
      const Row& r = best[impl];
      const double model_gflops = flops / r.step_s / 1e9;
      std::printf("%-8s %-16s %8.2fM %8.4f %10.0f %10.1f %10.1f %6.1f%%\n", s.name.c_str(), impl, r.parameters / 1e6,
                  r.step_s, tokens / r.step_s, r.matmul_gflops, model_gflops, 100 * model_gflops / r.matmul_gflops);
    }
    for (const char* impl : {"pytorch", "pytorch+compile"})
      if (best.count(impl))
        std::printf("%-8s colossal / %s tokens/s: %.2fx\n", s.name.c_str(), impl,
                    best[impl].step_s / best["colossal"].step_s);
  }
}

void generation_table(const std::string& model_dir, int repeats, const TextToVideoOptions& options,
                      const std::string& out_dir) {
  if (::access((model_dir + "/dit/model/config.json").c_str(), F_OK) != 0) {
    std::printf("(no text-to-video figures: no models in %s; run train_sora first or pass --model_dir)\n",
                model_dir.c_str());
    return;
  }
  TextToVideo pipeline(model_dir);
  const auto& c = pipeline.config();
  const auto clips = read_clip_csv(default_clip_csv());
  const WindowOptions windows{.frames = c["frames"], .frame_stride = c.value("frame_stride", 4),
                              .height = c["height"], .width = c["width"], .step = c.value("window_step", 2)};
  const auto all = load_windows(clips, windows);
  std::printf("\ntext to video with %s: %ld frames of %ldx%ld, %ld Euler steps, cfg %.1f; %ld windows of the clips\n",
              model_dir.c_str(), pipeline.frames(options), pipeline.height(options), pipeline.width(options),
              options.steps, options.cfg_scale, all.size());
  std::printf("%-44s %8s %20s %20s\n", "caption (seed 0)", "s/video", "own clip PSNR/SSIM", "other clips PSNR/SSIM");
  colossal::fs::make_dirs(out_dir);
  for (const auto& clip : clips) {
    std::vector<double> secs;
    torch::Tensor video;
    for (int rep = 0; rep < repeats; ++rep) {
      auto o = options;
      o.seed = rep;
      secs.push_back(colossal::bench::seconds([&] {
        auto v = pipeline.generate(clip.text, o);
        if (rep == 0) video = v;
      }));
    }
    // The nearest window by PSNR, among this clip's windows and among the others'.
    struct Near { double psnr = -1, ssim = 0; int64_t index = -1; } own, other;
    for (int64_t i = 0; i < all.size(); ++i) {
      const double p = psnr(video, all.videos[i]);
      auto& n = all.captions[i] == clip.text ? own : other;
      if (p > n.psnr) n = {p, 0, i};
    }
    for (auto* n : {&own, &other})
      if (n->index >= 0) n->ssim = ssim(video, all.videos[n->index]);
    std::printf("%-44s %8.2f %10.2f / %6.3f %11.2f / %6.3f\n", clip.text.c_str(), median(secs), own.psnr, own.ssim,
                other.psnr, other.ssim);
    std::string slug;  // the caption's first three words
    for (size_t i = 0, words = 0; i < clip.text.size() && words < 3; ++i) {
      if (clip.text[i] == ' ') ++words;
      if (words < 3) slug += std::isalnum(static_cast<unsigned char>(clip.text[i])) ? clip.text[i] : '_';
    }
    const std::string sheet = out_dir + "/" + slug + "_vs_nearest.png";
    write_contact_sheet(sheet, torch::cat({video, all.videos[own.index]}),
                        {.columns = static_cast<int>(video.size(0)),
                         .scale = std::max<int>(1, static_cast<int>(96 / video.size(2)))});
    std::printf("  %s: generated (top) over the nearest window, %s (bottom)\n", sheet.c_str(),
                all.origins[own.index].c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string shapes = "default,L", model_dir = "out/sora", out_dir = "out/sora/bench", python;
  int steps = 5, repeats = 2, gen_repeats = 3;
  TextToVideoOptions gen;
  bool training = true;
  CLI::App app{"bench_sora: STDiT training tokens/s and MFU beside PyTorch; text-to-video speed and quality"};
  app.add_option("--shapes", shapes, "comma-separated: default, L")->capture_default_str();
  app.add_option("--steps", steps, "measured training steps per run")->capture_default_str();
  app.add_option("--repeats", repeats, "alternating runs per row; the fastest is reported")->capture_default_str();
  app.add_option("--python", python, "Python with torch for the reference (default: COLOSSAL_PYTHON, the build's)");
  app.add_flag("!--no_training", training, "only the text-to-video figures");
  app.add_option("--model_dir", model_dir, "train_sora's --save_dir")->capture_default_str();
  app.add_option("--out_dir", out_dir, "where the side-by-side PNGs go")->capture_default_str();
  app.add_option("--gen_repeats", gen_repeats, "generations per caption (seeds 0..n-1) for the timing")
      ->capture_default_str();
  app.add_option("--gen_steps", gen.steps, "Euler steps")->capture_default_str();
  app.add_option("--cfg_scale", gen.cfg_scale, "classifier-free guidance")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (python.empty()) python = std::getenv("COLOSSAL_PYTHON") ? std::getenv("COLOSSAL_PYTHON") : COLOSSAL_DEFAULT_PYTHON;
    if (training) training_table(shapes, steps, repeats, python);
    generation_table(model_dir, gen_repeats, gen, out_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_sora: %s\n", e.what());
    return 1;
  }
  return 0;
}
