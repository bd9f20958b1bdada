#pragma once
// train_llama --mode dpo and --mode rm: preference pairs trained through the shared loop. The task's loss is
// the preference loss (DPO, IPO, SimPO or ORPO: core/posttrain/preference_loss.h) of each pair's
// answers, scored by the model's own token log-probabilities (LlamaForCausalLM::token_log_probs,
// the head fused in); the metrics are TRL's (rewards/chosen, rewards/rejected, rewards/margins,
// rewards/accuracies, logps/chosen, logps/rejected).
//
// The reference model (DPO, IPO) is the starting model: before the first step each replica scores
// the pairs the run will draw (a copy of the sampler looks ahead) and every held-out pair, once,
// and the replicas pool the table. Under LoRA it is the model with its adapters switched off
// (parallel::LoraDisabledGuard), so no second copy of the weights exists. Checkpoints carry the
// table: a resumed full-parameter run no longer holds its starting weights.
//
// --mode rm trains a reward model on the same pairs: the score head (LlamaForCausalLM::
// add_score_head) read at each sequence's last token that is not padding, as transformers'
// *ForSequenceClassification reads it, and the pairwise loss -log sigmoid(r_chosen - r_rejected)
// (plus TRL's optional centring term); the metrics are TRL's RewardTrainer's (accuracy, margin,
// mean_reward), held-out pair accuracy at each evaluation.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/common/train_loop.h"
#include "apps/llama/train_args.h"
#include "llama/model.h"
#include "llama/preference_data.h"

namespace colossal::llama_app {

class PreferenceTask {
 public:
  /// Opens the training pairs (and --eval_dataset's). With no --dataset: the built-in pairs made
  /// from `default_text` paragraphs (llama::write_preference_pairs) under OUTPUT/data.
  PreferenceTask(const TrainArgs& args, const text::Tokenizer& tokenizer, const std::string& default_train_text,
                 const std::string& default_eval_text);
  const llama::PreferenceDataset& train() const { return train_; }

  /// Sets `task`'s data, loss, evaluation, metrics and checkpoint hooks for `model` (boosted by
  /// the loop), whose ranks form `replica` = (data-parallel rank, replicas).
  void configure(apps::TrainTask& task, llama::LlamaForCausalLM model, std::pair<int, int> replica,
                 const dist::Group& replica_group, c10::Device device);

 private:
  struct Scores;  // per pair: summed log-probabilities and answer tokens
  Scores score(const llama::PreferenceDataset& data, const std::vector<int64_t>& pairs, bool reference);
  void compute_reference(const llama::PreferenceDataset& data, std::vector<double>& table,
                         const std::vector<int64_t>& needed);
  posttrain::PairLogProbs pair_log_probs(const Scores& s, const std::vector<double>& table,
                                         const std::vector<int64_t>& pairs) const;
  std::optional<apps::Metrics> evaluate();
  /// rm: the rewards [2B] of a batch's chosen then rejected answers.
  torch::Tensor rewards(const llama::PreferenceDataset& data, const std::vector<int64_t>& pairs);
  bool reward_model() const { return args_.mode == "rm"; }
  /// The pairwise loss (and centring) of rewards [2B].
  torch::Tensor reward_loss(const torch::Tensor& rewards) const;

  const TrainArgs& args_;
  llama::PreferenceDataset train_;
  std::optional<llama::PreferenceDataset> eval_;
  llama::LlamaForCausalLM model_{nullptr};
  std::pair<int, int> replica_{0, 1};
  dist::Group replica_group_;  // one rank of each replica (the data-parallel group)
  c10::Device device_{c10::kCPU};
  int64_t pad_multiple_ = 1;
  // Reference log-probabilities per pair (chosen, rejected), NaN where not scored yet.
  std::vector<double> reference_train_, reference_eval_;
  bool reference_loaded_ = false;
};

}  // namespace colossal::llama_app
