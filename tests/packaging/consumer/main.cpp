// Uses the installed libraries as an application would: the runtime (a world of one), a
// collective, the Booster with DDP over a LLaMA model, one training step.
#include <torch/torch.h>

#include <cstdio>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "llama/config.h"
#include "llama/model.h"

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
  std::printf("consumer: all_reduce %.0f, %lld parameters, loss %.4f -> %.4f\n", t.sum().item<double>(),
              static_cast<long long>(cfg.num_parameters()), first, last);
  dist::shutdown();
  return last < first ? 0 : 1;
}
