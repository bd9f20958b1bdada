#pragma once
// train_llama --mode grpo: reinforcement learning from a verifiable reward through the shared loop.
// Each step, every replica takes its prompts, samples num_generations completions of each with the
// generation engine from the weights being trained (llama::RolloutEngine, in this process, refreshed
// after every optimizer step), scores them with the reward function, and trains on GRPO's clipped
// objective (core/posttrain/grpo_loss.h) with the model's own token log-probabilities. Groups whose
// completions all scored the same are dropped (dynamic sampling); the dapo loss divides by the
// kept completion tokens of every replica. The metrics are TRL's GRPOTrainer's (reward, reward_std,
// frac_reward_zero_std, completions/mean_length, clip_ratio/*, kl) plus the rollout's share of the
// step and the engine's tokens/s; an evaluation is the mean reward of greedy completions of the
// held-out prompts.
//
// Rewards: the built-in exact match against each prompt's "answer" (llama/chat_tasks.h), or a
// RewardFunction given to train_llama (C++, or a Python callable through colossal.llama.train). A
// reward function that throws fails the step with its message and the prompt's file and line,
// before the optimizer step (nothing is saved half-done).
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/common/train_loop.h"
#include "apps/llama/train_args.h"
#include "llama/model.h"
#include "llama/prompt_data.h"
#include "llama/rollout.h"

namespace colossal::llama_app {

/// The reward of one completion: the prompt (its last user message), the completion's text and the
/// row's "answer" ("" when it has none).
using RewardFunction =
    std::function<double(const std::string& prompt, const std::string& completion, const std::string& answer)>;

class GrpoTask {
 public:
  /// Opens the training prompts (and --eval_dataset's). With no --dataset: built-in tasks
  /// (additions, words reversed from `corpus_text`) under OUTPUT/data. `reward` empty: exact match.
  GrpoTask(const TrainArgs& args, std::shared_ptr<const text::Tokenizer> tokenizer, const std::string& corpus_text,
           RewardFunction reward);
  const llama::PromptDataset& train() const { return train_; }

  /// Sets `task`'s data, loss, evaluation and metrics for `model` (boosted by the loop).
  void configure(apps::TrainTask& task, llama::LlamaForCausalLM model, std::pair<int, int> replica,
                 const dist::Group& replica_group, c10::Device device);

 private:
  struct Rollout;
  Rollout roll_out(const std::vector<int64_t>& positions, int64_t step, booster::BoostedOptimizer& optimizer);
  // The engine's completions of `prompts`; under tensor parallelism each rank of the group samples
  // its share and they are exchanged, so every rank holds all of them.
  std::vector<llama::Completion> sample_shared(const std::vector<std::vector<int64_t>>& prompts,
                                               const std::vector<uint64_t>& seeds, double temperature);
  double reward_of(const llama::Prompt& p, const std::string& completion) const;
  std::optional<apps::Metrics> evaluate(booster::BoostedOptimizer& optimizer);
  // The engine, made on first use: where this process does not hold the model whole (tensor
  // parallelism, Gemini) it samples from the weights the optimizer's checkpoint layout gathers.
  llama::RolloutEngine& engine(booster::BoostedOptimizer& optimizer);

  const TrainArgs& args_;
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  RewardFunction reward_;
  llama::PromptDataset train_;
  std::optional<llama::PromptDataset> eval_;
  llama::LlamaForCausalLM model_{nullptr};
  std::unique_ptr<llama::RolloutEngine> engine_;
  std::pair<int, int> replica_{0, 1};
  dist::Group replica_group_;
  c10::Device device_{c10::kCPU};
  int64_t refreshed_at_ = -1;  // the step whose weights the engine holds
  // The log window: wall time since the last line, and the engine's seconds and tokens then.
  double window_start_ = 0, engine_seconds_at_ = 0;
  int64_t engine_tokens_at_ = 0;
};

}  // namespace colossal::llama_app
