// train_sora: Open-Sora's recipe at a size this machine trains. Stage "vae" trains the video VAE
// on windows of real clips (held-out PSNR every epoch); stage "dit" freezes it, encodes every
// window once (the latent cache) and trains STDiT with a caption encoder by rectified flow
// (held-out flow loss every epoch); "all" (the default) runs both. Each stage writes
// SAVE_DIR/<stage>/ (checkpoints/, model/ with config.json, log.jsonl) and resumes.
//
//   build/apps/colossal run --nproc_per_node 2 -- build/apps/train_sora
//   build/apps/train_sora --stage dit --dit_epochs 300 --plugin zero2
#include "apps/sora/train_sora.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <nlohmann/json.hpp>

#include "apps/common/train_loop.h"
#include "apps/sora/train_args.h"
#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/checkpoint/atomic_file.h"
#include "core/checkpoint/model_io.h"
#include "core/common/check.h"
#include "core/common/fs.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/optim/factory.h"
#include "core/optim/lr_scheduler.h"
#include "sora/data/clip_csv.h"
#include "sora/data/latent_cache.h"
#include "sora/data/video_windows.h"
#include "sora/diffusion/rectified_flow.h"
#include "sora/io/quality.h"
#include "sora/io/video.h"
#include "sora/models/stdit.h"
#include "sora/models/text_encoder.h"
#include "sora/models/video_denoiser.h"
#include "sora/models/video_vae.h"

namespace dist = colossal::dist;
namespace booster = colossal::booster;
using colossal::sora_app::TrainArgs;
using namespace colossal::sora;

namespace {

struct Split {
  VideoWindows train, held_out;
};

WindowOptions window_options(const TrainArgs& a) {
  return {.frames = a.frames, .frame_stride = a.frame_stride, .height = a.height, .width = a.width,
          .step = a.window_step};
}

// Every n-th window of each clip held out (split_windows).
Split load_data(const std::vector<ClipEntry>& clips, const TrainArgs& a) {
  const auto all = load_windows(clips, window_options(a));
  const auto split = split_windows(all.clips, a.held_out_fraction);
  auto take = [&](const std::vector<int64_t>& rows) {
    VideoWindows w;
    w.videos = all.videos.index_select(0, torch::tensor(rows, torch::kInt64));
    for (int64_t r : rows) {
      w.captions.push_back(all.captions[r]);
      w.origins.push_back(all.origins[r]);
      w.clips.push_back(all.clips[r]);
    }
    return w;
  };
  return {take(split.train), take(split.held_out)};
}

// The training windows an epoch visits: each once, or clips balanced (balanced_schedule).
std::vector<int64_t> epoch_schedule(const TrainArgs& a, const std::vector<int64_t>& clip_of_window) {
  if (a.balance_clips) return balanced_schedule(clip_of_window);
  std::vector<int64_t> all(clip_of_window.size());
  std::iota(all.begin(), all.end(), 0);
  return all;
}

// Random draws keyed to (seed, step, window, purpose): a window draws the same numbers whichever
// rank trains it, so any number of ranks takes the steps one process takes.
at::Generator keyed_generator(uint64_t seed, int64_t step, int64_t window, uint64_t purpose) {
  uint64_t h = seed * 0x9E3779B97F4A7C15ULL;
  for (uint64_t v : {static_cast<uint64_t>(step), static_cast<uint64_t>(window), purpose}) {
    h ^= v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ULL;
  }
  return at::make_generator<at::CPUGeneratorImpl>(h);
}

// Per window of `rows`: `make(generator)`, stacked.
torch::Tensor keyed(uint64_t seed, int64_t step, const std::vector<int64_t>& rows, uint64_t purpose,
                    const std::function<torch::Tensor(at::Generator&)>& make) {
  std::vector<torch::Tensor> out;
  for (int64_t row : rows) {
    auto gen = keyed_generator(seed, step, row, purpose);
    out.push_back(make(gen));
  }
  return torch::stack(out);
}

VideoVaeOptions vae_options(const TrainArgs& a) {
  return {.latent_channels = a.latent_channels, .base_channels = a.vae_channels, .multipliers = {1, 2},
          .temporal_factor = a.temporal_factor, .kl_weight = a.kl_weight};
}

// What one stage needs from the shared loop: the trainable module, the windows an epoch visits,
// its loss on a batch of them, and an evaluation.
struct Stage {
  std::string name;
  std::shared_ptr<torch::nn::Module> model;
  int64_t epochs = 1;
  double lr = 1e-3;
  std::vector<int64_t> schedule;  // training windows, in the order of the sampler's positions
  int64_t held_out = 0;           // held-out windows the evaluation scores
  // `windows`: the batch's training windows; `keys`: their positions in the schedule, which key
  // the random draws (a window scheduled twice in one step draws twice).
  std::function<torch::Tensor(const std::vector<int64_t>& windows, const std::vector<int64_t>& keys, int64_t step)> loss;
  std::function<std::pair<std::string, double>()> evaluate;  // (metric, value) on the held-out windows
};

// The VAE has no sequence to split: its stage runs the same plugin with sp folded into dp.
booster::PluginConfig without_sequence_parallelism(booster::PluginConfig c) {
  c.layout.sp = 1;
  c.layout.sp_mode = "none";
  return c;
}

// One stage through the shared loop (apps/common/train_loop.h); false once colossal verify's
// steps are recorded (the job ends there).
bool run_stage(const TrainArgs& a, colossal::apps::TrainJob& job, Stage& s,
               const std::shared_ptr<booster::Plugin>& plugin, colossal::apps::RunSummary& summary) {
  const int n = plugin->dims().dp();
  const int64_t accumulation = a.loop.accumulation_steps;
  COLOSSAL_CHECK(a.batch_size % (n * accumulation) == 0, "--batch_size ", a.batch_size, " does not split over ", n,
                 " data-parallel rank(s) x ", accumulation, " micro-batch(es) (--accumulation_steps)");
  const std::string dir = a.save_dir + "/" + s.name;
  colossal::fs::make_dirs(dir);
  int64_t parameters = 0;
  for (const auto& p : s.model->parameters()) parameters += p.numel();
  if (dist::rank() == 0)
    std::printf("%s: %.2fM parameters; batch %ld windows over all ranks (%zu windows an epoch)\n", s.name.c_str(),
                parameters / 1e6, a.batch_size, s.schedule.size());
  colossal::apps::TrainTask task;
  task.name = s.name;
  task.plugin = plugin;
  task.model = s.model;
  task.optimizer =
      colossal::optim::make_optimizer(*s.model, {.name = "fused_adamw", .lr = s.lr, .weight_decay = a.weight_decay});
  task.schedule = [](int64_t total_steps) {
    return colossal::optim::LRScheduler::Options{.kind = "cosine", .warmup_steps = total_steps / 20,
                                                 .total_steps = total_steps, .min_lr_ratio = 0.1};
  };
  task.train_samples = static_cast<int64_t>(s.schedule.size());
  task.micro_batch = a.batch_size / (n * accumulation);
  task.epochs = s.epochs;
  task.epoch_period = 10;  // the held-out figure and a checkpoint every 10 epochs
  task.batch_flag = "--batch_size " + std::to_string(a.batch_size);
  task.length_flags = "--" + s.name + "_epochs or --max_steps";
  task.throughput_unit = "windows";
  task.loss = [&](colossal::apps::StepContext& ctx) {
    std::vector<int64_t> windows;
    for (int64_t p : ctx.positions) windows.push_back(s.schedule[p]);
    return s.loss(windows, ctx.positions, ctx.step);
  };
  task.evaluate = [&](const colossal::apps::EvalContext&) -> std::optional<colossal::apps::Metrics> {
    const auto [metric, value] = s.evaluate();
    return colossal::apps::Metrics{{metric, value}};
  };
  task.eval_samples = s.held_out;
  task.eval_flag = "--held_out_fraction " + c10::str(a.held_out_fraction) + " of " +
                   (a.data.empty() ? std::string("the built-in clips") : a.data);
  task.checkpoint_dir = dir + "/checkpoints";
  task.log_file = dir + "/log.jsonl";
  task.run = s.name;
  task.summary_prefix = s.name + "_";
  task.eval_summary_prefix = s.name + "_";
  auto run = job.run(task, summary);
  if (run.recorded) return false;
  run.booster->save_model(*run.boosted.optimizer, *s.model, dir + "/model");
  summary.outputs[s.name] = dir + "/model";
  return true;
}

void write_config(const std::string& path, const nlohmann::json& j) {
  if (dist::rank() == 0) colossal::checkpoint::write_text_atomically(path, j.dump(2) + "\n");
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The dataset: its CSV read at once, its clips decoded when a stage first needs them (a DiT
// stage that finds its latent cache never does).
class Clips {
 public:
  explicit Clips(const TrainArgs& a) : a_(a), csv_(a.data.empty() ? default_clip_csv() : a.data), clips_(read_clip_csv(csv_)) {}
  const std::string& csv() const { return csv_; }
  const std::vector<ClipEntry>& entries() const { return clips_; }
  const Split& windows() {
    if (!decoded_) {
      const auto t = std::chrono::steady_clock::now();
      decoded_ = load_data(clips_, a_);
      train_video_ = frames_to_video(decoded_->train.videos);
      held_video_ = frames_to_video(decoded_->held_out.videos);
      if (dist::rank() == 0)
        std::printf("data: %ld training and %ld held-out windows of %ld frames at %ldx%ld (stride %ld) from %s (%.1f s)\n",
                    decoded_->train.size(), decoded_->held_out.size(), a_.frames, a_.height, a_.width,
                    a_.frame_stride, a_.data.empty() ? "the built-in clips" : a_.data.c_str(), seconds_since(t));
    }
    return *decoded_;
  }
  /// The decoded windows as the VAE takes them (frames_to_video).
  const torch::Tensor& train_video() {
    windows();
    return train_video_;
  }
  const torch::Tensor& held_video() {
    windows();
    return held_video_;
  }

 private:
  const TrainArgs& a_;
  std::string csv_;
  std::vector<ClipEntry> clips_;
  std::optional<Split> decoded_;
  torch::Tensor train_video_, held_video_;
};

// The latent cache: every window encoded once by the frozen VAE (its mean), scaled to unit
// variance as Stable Diffusion's and Open-Sora's latents are, and kept on disk (mapped by later
// runs) under a key of the VAE's weights, the clips and the window options.
LatentCache latents_for(const TrainArgs& a, VideoVae& vae, Clips& data) {
  const int r = dist::rank();
  vae->eval();
  const auto start = std::chrono::steady_clock::now();
  const std::string path = a.latent_cache == "auto" ? a.save_dir + "/dit/latent_cache.safetensors" : a.latent_cache;
  std::optional<LatentCache> cache;
  nlohmann::json key;
  if (a.latent_cache != "none") {
    std::vector<std::string> paths;
    for (const auto& c : data.entries()) paths.push_back(c.path);
    key = latent_cache_key(weights_fingerprint(*vae),
                           {{"clips", clip_fingerprint(data.csv(), paths)},
                            {"windows", {a.frames, a.frame_stride, a.height, a.width, a.window_step}},
                            {"held_out_fraction", a.held_out_fraction}});
    std::string why;
    cache = open_latent_cache(path, key, &why);
    // Every rank takes the same path (a rank that misses makes all of them encode), so the
    // ranks train on the same numbers whichever files each one sees.
    auto all_hit = torch::tensor({cache ? 1 : 0}, torch::kInt32);
    dist::all_reduce(all_hit, dist::world_group(), dist::ReduceOp::kMin);
    if (all_hit.item<int>() == 0) {
      if (r == 0) std::printf("latent cache: %s; encoding\n", why.empty() ? "another rank has none" : why.c_str());
      cache.reset();
    }
  }
  const bool hit = cache.has_value();
  if (!hit) {
    torch::NoGradGuard no_grad;
    const Split& windows = data.windows();
    cache.emplace();
    cache->train = {vae->encode(data.train_video()).mean, windows.train.captions, windows.train.clips};
    cache->held_out = {vae->encode(data.held_video()).mean, windows.held_out.captions, windows.held_out.clips};
    cache->scale = 1 / cache->train.latents.std().item<double>();
    cache->train.latents.mul_(cache->scale);
    cache->held_out.latents.mul_(cache->scale);
    if (r == 0 && a.latent_cache != "none") {
      if (const auto slash = path.find_last_of('/'); slash != std::string::npos) colossal::fs::make_dirs(path.substr(0, slash));
      write_latent_cache(path, key, *cache);
    }
  }
  if (r == 0) {
    const std::string how = hit ? "mapped from " + path
                                : a.latent_cache == "none" ? std::string("encoded (not kept)") : "encoded and written to " + path;
    std::printf("latent cache: %ld + %ld windows as %s latents (scale %.4f), %s in %.1f s\n",
                cache->train.latents.size(0), cache->held_out.latents.size(0),
                c10::str(cache->train.latents.sizes().slice(1)).c_str(), cache->scale, how.c_str(), seconds_since(start));
  }
  return std::move(*cache);
}

void train(TrainArgs& a, colossal::apps::RunSummary& summary) {
  colossal::apps::TrainJob job(a.loop, a.plugin);  // the runtime; colossal verify's one-process reference
  job.lock_output(a.save_dir);                     // one job per output, before anything is written there
  const int r = dist::rank();
  const auto t0 = std::chrono::steady_clock::now();
  Clips data(a);
  torch::manual_seed(a.loop.seed);
  VideoVae vae(vae_options(a));
  const std::string vae_dir = a.save_dir + "/vae";
  if (a.stage != "dit") {
    Stage s{.name = "vae", .model = vae.ptr(), .epochs = a.vae_epochs, .lr = a.vae_lr,
            .schedule = epoch_schedule(a, data.windows().train.clips), .held_out = data.windows().held_out.size()};
    const auto latent = vae->latent_shape({1, 3, a.frames, a.height, a.width});
    s.loss = [&, latent](const std::vector<int64_t>& windows, const std::vector<int64_t>& keys, int64_t step) {
      const auto noise = keyed(a.loop.seed, step, keys, 1, [&](at::Generator& g) {
        return torch::randn(torch::IntArrayRef(latent).slice(1), g);
      });
      return vae->loss(data.train_video().index_select(0, torch::tensor(windows, torch::kInt64)), noise).total;
    };
    s.evaluate = [&] {
      torch::NoGradGuard no_grad;
      vae->eval();
      const auto recon = vae->loss(data.held_video()).recon;
      vae->train();
      return std::make_pair(std::string("psnr"), psnr(video_to_frames(recon), video_to_frames(data.held_video())));
    };
    if (!run_stage(a, job, s, booster::make_plugin(without_sequence_parallelism(a.plugin)), summary)) return;
    write_config(vae_dir + "/model/config.json",
                 {{"latent_channels", a.latent_channels}, {"vae_channels", a.vae_channels},
                  {"temporal_factor", a.temporal_factor}, {"kl_weight", a.kl_weight}});
  } else {
    colossal::checkpoint::load_model_state(*vae, vae_dir + "/model");
  }
  if (a.stage == "vae") return;

  const LatentCache cache = latents_for(a, vae, data);
  const torch::Tensor& train_latents = cache.train.latents;
  const torch::Tensor& held_latents = cache.held_out.latents;
  const double scale = cache.scale;

  // The DiT and the caption encoder train together as one module.
  const TextEncoderOptions text_options{.dim = a.hidden, .layers = 2, .heads = a.heads, .max_tokens = 64};
  const StditOptions dit_options{.in_channels = a.latent_channels, .hidden = a.hidden, .depth = a.depth,
                                 .heads = a.heads, .text_dim = a.hidden, .text_tokens = text_options.max_tokens,
                                 .activation_checkpointing = a.grad_checkpoint};
  auto plugin = booster::make_plugin(a.plugin);
  torch::manual_seed(a.loop.seed + 1);
  VideoDenoiser denoiser(dit_options, text_options, plugin->parallel_context());
  const int64_t tokens = train_latents.size(2) * (train_latents.size(3) / 2) * (train_latents.size(4) / 2);
  const FlowOptions flow{.shift = resolution_shift(tokens, 256)};
  // draws [B, 3]: a uniform for caption dropout, a normal and a uniform for the timestep.
  auto velocity_loss = [&](const torch::Tensor& x0, const std::vector<std::string>& captions, const torch::Tensor& noise,
                           const torch::Tensor& draws, bool drop) {
    auto caption = denoiser->text->forward(captions);
    if (drop) {  // caption dropout: these samples see the null caption
      const auto dropped = draws.select(1, 0).lt(a.caption_dropout);
      const auto [null_tokens, null_mask] = denoiser->dit->null_text(x0.size(0));
      caption.tokens = torch::where(dropped.view({-1, 1, 1}), null_tokens, caption.tokens);
      caption.mask = torch::where(dropped.view({-1, 1}), null_mask, caption.mask);
    }
    const auto pair = flow_training_pair(x0, noise, timesteps_from(draws.select(1, 1), draws.select(1, 2), flow));
    return (denoiser->dit->forward(pair.noisy, pair.t, caption.tokens, caption.mask) - pair.target).pow(2).mean();
  };
  Stage s{.name = "dit", .model = denoiser.ptr(), .epochs = a.dit_epochs, .lr = a.dit_lr,
          .schedule = epoch_schedule(a, cache.train.clips), .held_out = held_latents.size(0)};
  auto noise_and_draws = [&](const std::vector<int64_t>& rows, int64_t step) {
    const auto shape = train_latents.sizes().slice(1);
    auto noise = keyed(a.loop.seed, step, rows, 2, [&](at::Generator& g) { return torch::randn(shape, g); });
    auto draws = keyed(a.loop.seed, step, rows, 3, [&](at::Generator& g) {
      return torch::cat({torch::rand({1}, g), torch::randn({1}, g), torch::rand({1}, g)});
    });
    return std::make_pair(noise, draws);
  };
  s.loss = [&](const std::vector<int64_t>& windows, const std::vector<int64_t>& keys, int64_t step) {
    std::vector<std::string> captions;
    for (int64_t i : windows) captions.push_back(cache.train.captions[i]);
    const auto [noise, draws] = noise_and_draws(keys, step);
    return velocity_loss(train_latents.index_select(0, torch::tensor(windows, torch::kInt64)), captions, noise, draws,
                         true);
  };
  s.evaluate = [&] {  // the held-out flow loss at fixed noise and timesteps
    torch::NoGradGuard no_grad;
    denoiser->eval();
    std::vector<int64_t> rows(held_latents.size(0));
    std::iota(rows.begin(), rows.end(), 0);
    const auto [noise, draws] = noise_and_draws(rows, -1);
    const double l = velocity_loss(held_latents, cache.held_out.captions, noise, draws, false).item<double>();
    denoiser->train();
    return std::make_pair(std::string("flow_loss"), l);
  };
  if (!run_stage(a, job, s, plugin, summary)) return;
  write_config(a.save_dir + "/dit/model/config.json",
               {{"hidden", a.hidden}, {"depth", a.depth}, {"heads", a.heads}, {"latent_channels", a.latent_channels},
                {"latent_scale", scale}, {"flow_shift", flow.shift}, {"frames", a.frames}, {"height", a.height},
                {"width", a.width}, {"frame_stride", a.frame_stride}, {"window_step", a.window_step},
                {"text_tokens", text_options.max_tokens}, {"text_layers", text_options.layers}, {"fps", 8},
                {"vae_channels", a.vae_channels}, {"temporal_factor", a.temporal_factor}});
  if (r == 0)
    std::printf("result: %s in %.0f s; models in %s/vae/model and %s/dit/model\n", a.stage.c_str(), seconds_since(t0),
                a.save_dir.c_str(), a.save_dir.c_str());
  dist::barrier(dist::world_group());
}

}  // namespace

namespace colossal::sora_app {

colossal::apps::RunSummary train_sora(const std::vector<std::string>& args) {
  return colossal::apps::run_job<TrainArgs>("train_sora", args, &parse_train_args, &train);
}

}  // namespace colossal::sora_app
