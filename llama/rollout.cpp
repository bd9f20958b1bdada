#include "llama/rollout.h"

#include <chrono>
#include <map>

#include "core/common/check.h"

namespace colossal::llama {

RolloutEngine::RolloutEngine(LlamaForCausalLM model, std::shared_ptr<const text::Tokenizer> tokenizer,
                             WholeWeights whole)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)), whole_(std::move(whole)),
      eos_id_(tokenizer_->eos_id()) {
  const auto& p = model_->parallel_context();
  COLOSSAL_CHECK(!p.pipeline.enabled() && p.sp_size() == 1, "[rollout] pipeline and sequence parallelism are not "
                 "supported yet (the engine samples whole sequences from whole weights)");
  COLOSSAL_CHECK(p.tp_size() == 1 || whole_, "[rollout] under tensor parallelism the engine needs the gathered "
                 "weights (a WholeWeights source)");
  COLOSSAL_CHECK(eos_id_ >= 0, "[rollout] the tokenizer has no EOS token: a completion could not end");
}

namespace {

// Copies `state` into `plain` by name: every parameter must be there, shapes equal (buffers where
// given: they follow from the config); nothing may be left over.
void copy_whole_weights(const checkpoint::NamedTensors& state, torch::nn::Module& plain) {
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  torch::NoGradGuard no_grad;
  size_t copied = 0;
  auto copy = [&](const std::string& name, torch::Tensor t, bool required) {
    auto it = by_name.find(name);
    COLOSSAL_CHECK(it != by_name.end() || !required, "[rollout] the gathered weights have no '", name, "'");
    if (it == by_name.end()) return;
    COLOSSAL_CHECK(it->second.sizes() == t.sizes(), "[rollout] gathered '", name, "' is ", it->second.sizes(),
                   ", the model's ", t.sizes());
    t.copy_(it->second);
    ++copied;
  };
  for (const auto& p : plain.named_parameters()) copy(p.key(), p.value(), true);
  for (const auto& b : plain.named_buffers()) copy(b.key(), b.value(), false);
  COLOSSAL_CHECK(copied == by_name.size(), "[rollout] the gathered weights hold ", by_name.size() - copied,
                 " tensor(s) a plain model does not have (LoRA adapters under a sharded layout are not supported "
                 "yet)");
}

}  // namespace

void RolloutEngine::refresh() {
  const auto start = std::chrono::steady_clock::now();
  LlamaInference::Options o;
  o.dtype = at::kFloat;
  o.weights = inference::WeightFormat::kF32;
  if (whole_) {
    if (!plain_) plain_ = LlamaForCausalLM(model_->config());
    copy_whole_weights(whole_(), *plain_);  // collective
  }
  LlamaForCausalLM& source = whole_ ? plain_ : model_;
  inference_ = std::make_shared<LlamaInference>(source, o);
  // LoRA: the base packed, the adapters beside it (unmerged), every completion through them.
  adapter_ = 0;
  for (const auto& p : source->named_parameters())
    if (p.key().find(".lora_A.") != std::string::npos) {
      adapter_ = inference_->add_adapter(source);
      break;
    }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<Completion> RolloutEngine::sample(const std::vector<std::vector<int64_t>>& prompts,
                                              const std::vector<uint64_t>& seeds, int64_t max_tokens,
                                              double temperature, bool ignore_eos) {
  COLOSSAL_CHECK(prompts.size() == seeds.size(), "[rollout] ", prompts.size(), " prompts but ", seeds.size(), " seeds");
  if (!inference_) refresh();
  const auto start = std::chrono::steady_clock::now();
  inference::EngineOptions eo;
  // Room for every sequence at once: one continuous batch, no preemption.
  eo.cache.block_size = 16;
  int64_t blocks = 0, prompt_tokens = 0;
  for (const auto& p : prompts) {
    blocks += (static_cast<int64_t>(p.size()) + max_tokens + eo.cache.block_size - 1) / eo.cache.block_size + 1;
    prompt_tokens += static_cast<int64_t>(p.size());
  }
  eo.cache.num_blocks = std::max<int64_t>(blocks, 1);
  eo.max_num_seqs = std::max<int64_t>(static_cast<int64_t>(prompts.size()), 1);
  eo.max_batched_tokens = std::max<int64_t>(prompt_tokens, 256);
  inference::Engine engine(inference_, std::make_shared<TokenizerDetokenizer>(tokenizer_), eos_id_, eo);
  std::vector<inference::GenerationRequest> requests(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests[i].prompt = prompts[i];
    requests[i].params.temperature = temperature;
    requests[i].params.max_tokens = max_tokens;
    requests[i].params.seed = seeds[i];
    requests[i].params.ignore_eos = ignore_eos;
    requests[i].adapter = adapter_;
  }
  auto results = engine.generate(std::move(requests));
  std::vector<Completion> out(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    COLOSSAL_CHECK(results[i].error.empty(), "[rollout] completion ", i, " failed: ", results[i].error);
    out[i].tokens = results[i].tokens;
    out[i].text = results[i].text;
    out[i].ended = results[i].reason == inference::FinishReason::kEos;
    if (out[i].ended) out[i].tokens.push_back(eos_id_);
    tokens_ += static_cast<int64_t>(results[i].tokens.size());
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace colossal::llama
