// Uses the installed libraries as an application would: the runtime (a world of one), a
// collective, the Booster with DDP over a LLaMA model, a few training steps; STDiT's forward and
// an H.264 file written and probed through the installed colossal::sora (FFmpeg linked).
#include <torch/torch.h>

#include <unistd.h>

#include <cstdio>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "llama/config.h"
#include "llama/model.h"
#include "sora/io/video.h"
#include "sora/models/stdit.h"

int main() {
  namespace dist = colossal::dist;
  dist::init();
  auto t = torch::ones({4});
  dist::all_reduce(t, dist::world_group());
  auto cfg = colossal::llama::LlamaConfig::from_json_text(
      R"({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": 64, "max_position_embeddings": 32})", "consumer");
  auto model = colossal::llama::LlamaForCausalLM(cfg);
  colossal::booster::PluginConfig plugin;
  plugin.name = "ddp";
  colossal::booster::Booster booster(colossal::booster::make_plugin(plugin));
  auto optimizer = std::make_shared<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(1e-2));
  auto boosted = booster.boost(model.ptr(), optimizer);
  auto ids = torch::randint(0, 64, {2, 16});
  double first = 0, last = 0;
  for (int step = 0; step < 5; ++step) {
    boosted.optimizer->zero_grad();
    auto loss = model->loss(ids, ids);
    booster.backward(loss, *boosted.optimizer);
    boosted.optimizer->step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  colossal::sora::Stdit dit(colossal::sora::StditOptions{.hidden = 16, .depth = 1, .heads = 2, .text_dim = 8,
                                                          .text_tokens = 4});
  const auto [text, mask] = dit->null_text(1);
  const auto velocity = dit->forward(torch::randn({1, 4, 2, 4, 4}), torch::tensor({0.5}), text, mask);
  const std::string video = "/tmp/colossal_consumer_" + std::to_string(::getpid()) + ".mp4";
  colossal::sora::write_video(video, torch::zeros({4, 16, 16, 3}, torch::kUInt8));
  const auto frames = colossal::sora::probe_video(video).frames;
  std::remove(video.c_str());
  std::printf("consumer: stdit velocity %s, an mp4 of %lld frames\n", c10::str(velocity.sizes()).c_str(),
              static_cast<long long>(frames));
  if (frames != 4) return 1;
  std::printf("consumer: all_reduce %.0f, %lld parameters, loss %.4f -> %.4f\n", t.sum().item<double>(),
              static_cast<long long>(cfg.num_parameters()), first, last);
  dist::shutdown();
  return last < first ? 0 : 1;
}
