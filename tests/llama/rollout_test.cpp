// The rollout engine samples what the training model's own forward samples with the same seed
// (token by token through the same sampler), and after the weights change and refresh(), what the
// changed model samples.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <fstream>

#include "core/inference/sampler.h"
#include "llama/rollout.h"
#include "llama/tokenizer.h"
#include "tests/llama/tiny_llama.h"

namespace colossal::llama {
namespace {

std::vector<int64_t> sample_from_model(LlamaForCausalLM& model, const std::vector<int64_t>& prompt, uint64_t seed,
                                       int64_t max_tokens, int64_t eos) {
  torch::NoGradGuard no_grad;
  inference::SamplingParams params;
  params.temperature = 1.0;
  params.max_tokens = max_tokens;
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ids = prompt, out;
  for (int64_t i = 0; i < max_tokens; ++i) {
    auto logits = model->forward(torch::tensor(ids, torch::kInt64).unsqueeze(0))[0][-1].contiguous();
    const int64_t token = inference::sample(logits, params, prompt, out, rng).token;
    out.push_back(token);
    if (token == eos) break;
    ids.push_back(token);
  }
  return out;
}

TEST(Rollout, EngineSamplesWhatTheTrainingModelSamplesBeforeAndAfterAnUpdate) {
  const std::string dir = ::testing::TempDir() + "rollout_" + std::to_string(::getpid());
  (void)!std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
  {
    std::ofstream corpus(dir + "/corpus.txt");
    for (int i = 0; i < 50; ++i) corpus << "what is " << i << " plus " << i * 7 << "? it is " << i * 8 << "\n";
  }
  TrainTokenizerOptions to;
  to.vocab_size = 300;
  train_tokenizer({dir + "/corpus.txt"}, dir + "/tok", to);
  std::shared_ptr<const text::Tokenizer> tok = load_tokenizer(dir + "/tok.model");
  auto c = tiny_test_llama();
  c.vocab_size = 320;
  torch::manual_seed(3);
  LlamaForCausalLM model(c);
  model->eval();
  RolloutEngine engine(model, tok);
  std::vector<std::vector<int64_t>> prompts;
  std::vector<uint64_t> seeds;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(tok->encode("what is " + std::to_string(i) + " plus 3?", true));
    seeds.push_back(100 + static_cast<uint64_t>(i));
  }
  auto check = [&](const char* when) {
    engine.refresh();
    auto got = engine.sample(prompts, seeds, 12, 1.0);
    std::vector<std::vector<int64_t>> want;
    for (size_t i = 0; i < prompts.size(); ++i) {
      want.push_back(sample_from_model(model, prompts[i], seeds[i], 12, tok->eos_id()));
      EXPECT_EQ(got[i].tokens, want.back()) << when << ": completion " << i;
      EXPECT_EQ(got[i].ended, !want.back().empty() && want.back().back() == tok->eos_id()) << when;
    }
    return want;
  };
  const auto before = check("before the update");
  {
    torch::NoGradGuard no_grad;  // a large change: the samples must move with it
    for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.5);
  }
  const auto after = check("after the update");
  EXPECT_NE(before, after) << "the refreshed engine samples from the new weights";
  EXPECT_GT(engine.tokens(), 0);
}

}  // namespace
}  // namespace colossal::llama
