#include "apps/llama/train_args.h"

#include "apps/common/settings.h"
#include "core/common/check.h"

namespace colossal::llama_app {

void TrainArgs::validate() const {
  COLOSSAL_CHECK(pretrained.empty() || model_config.empty(),
                 "--pretrained and --model_config both given: the model's shape comes from one of them");
  if (mode == "dpo") preference.validate();
  if (mode == "grpo") {
    grpo.validate();
    COLOSSAL_CHECK(grpo.beta == 0 || lora.enabled(), "--grpo_beta ", grpo.beta, " needs --lora_rank: the reference "
                   "is the model with its adapters off (a full-parameter reference copy is not built yet)");
    COLOSSAL_CHECK(lora.quantize_base.empty(), "--mode grpo with --quantize_base is not supported yet (the rollout "
                   "engine reads full-precision base weights); use LoRA without quantization");
    const auto& l = plugin.layout;
    COLOSSAL_CHECK(l.pp == 1 && l.sp == 1 && l.ep == 1, "--mode grpo under pipeline, sequence or expert "
                   "parallelism (pp ", l.pp, ", sp ", l.sp, ", ep ", l.ep, ") is not supported yet (a completion's "
                   "log-likelihood and its sampling need whole sequences on one stage); use data or tensor "
                   "parallelism, ZeRO or Gemini");
    COLOSSAL_CHECK(!lora.enabled() || (plugin.name != "gemini" && l.tp == 1), "--mode grpo with LoRA under ",
                   plugin.name == "gemini" ? "--plugin gemini" : "--tp " + std::to_string(l.tp), " is not supported "
                   "yet (the rollout engine's gathered copy has no adapters); use ddp, zero1 or zero2");
  }
  COLOSSAL_CHECK(!packing || mode == "sft", "--packing applies to --mode sft (conversations); --mode ", mode,
                 " fills its samples otherwise");
  COLOSSAL_CHECK(neftune_noise_alpha == 0 || mode == "sft", "--neftune_noise_alpha applies to --mode sft, not ", mode);
  if (packing) {
    // Packed documents need the document mask inside attention and their positions on every stage.
    COLOSSAL_CHECK(plugin.layout.pp == 1, "--packing under pipeline parallelism (pp ", plugin.layout.pp,
                   ") is not supported yet; use data, tensor or sequence parallelism, or drop --packing");
    COLOSSAL_CHECK(plugin.layout.sp_mode != "ring_attn", "--packing under --sp_mode ring_attn is not supported (the "
                   "ring passes whole blocks, not documents); use --sp_mode all_to_all or split_gather");
  }
}

bool parse_train_args(int argc, char** argv, TrainArgs& a, int& exit_code) {
  return apps::parse_settings(
      argc, argv, "Train a LLaMA-style model (default: a small one on Jane Austen's novels, then generate from it)", a,
      exit_code);
}

}  // namespace colossal::llama_app
