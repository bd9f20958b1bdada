#include "apps/llama/preference_task.h"

#include <sys/stat.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/checkpoint/safetensors.h"
#include "core/common/check.h"
#include "core/common/fs.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/parallel/tensor/parallel_linear.h"
#include "llama/corpus.h"
#include "llama/shapes.h"

namespace colossal::llama_app {
namespace {

constexpr const char* kReferenceFile = "preference_reference.safetensors";
const double kMissing = std::numeric_limits<double>::quiet_NaN();

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// Sequence lengths the layout can split: the sequence-parallel group's (ring attention's zigzag
// needs two blocks per rank).
int64_t pad_multiple(const parallel::ParallelContext& ctx) {
  using Mode = parallel::SequenceParallelMode;
  const int64_t n = ctx.sp_size();
  return ctx.sp_mode == Mode::kRingAttn ? 2 * n : n;
}

// The scored pairs of a table: their indices [K] and (chosen, rejected) log-probabilities [K, 2].
std::pair<torch::Tensor, torch::Tensor> scored_part(const std::vector<double>& table) {
  std::vector<int64_t> index;
  std::vector<double> values;
  for (size_t i = 0; 2 * i < table.size(); ++i)
    if (!std::isnan(table[2 * i])) {
      index.push_back(static_cast<int64_t>(i));
      values.insert(values.end(), {table[2 * i], table[2 * i + 1]});
    }
  return {torch::tensor(index, torch::kInt64), torch::tensor(values, torch::kFloat64).reshape({-1, 2})};
}

// Puts a file's scored pairs back into `table`, naming what does not fit.
void restore(std::vector<double>& table, const checkpoint::SafetensorsFile& file, const std::string& part) {
  auto index = file.load(part + ".index"), values = file.load(part + ".logps");
  const int64_t pairs = static_cast<int64_t>(table.size() / 2);
  COLOSSAL_CHECK(index.dim() == 1 && values.dim() == 2 && values.size(0) == index.size(0) && values.size(1) == 2 &&
                     (index.numel() == 0 || (index.min().item<int64_t>() >= 0 && index.max().item<int64_t>() < pairs)),
                 "[dpo] ", file.path(), ": '", part, "' does not describe pairs of a ", pairs, "-pair dataset");
  const auto* i = index.data_ptr<int64_t>();
  const auto* v = values.data_ptr<double>();
  for (int64_t k = 0; k < index.numel(); ++k) {
    table[static_cast<size_t>(2 * i[k])] = v[2 * k];
    table[static_cast<size_t>(2 * i[k] + 1)] = v[2 * k + 1];
  }
}

}  // namespace

struct PreferenceTask::Scores {
  torch::Tensor sums;    // [2B]: the chosen answers' summed log-probabilities, then the rejected ones'
  torch::Tensor tokens;  // [2B] answer tokens scored
};

PreferenceTask::PreferenceTask(const TrainArgs& a, const text::Tokenizer& tok, const std::string& default_train_text,
                               const std::string& default_eval_text)
    : args_(a) {
  llama::PreferenceDataOptions o;
  o.files = a.dataset;
  o.chat_template = a.chat_template;
  o.on_bad_line = a.on_bad_line;
  o.max_length = a.max_length;
  std::string eval_file = a.eval_dataset;
  if (o.files.empty()) {
    // Built in: pairs made from the corpus's paragraphs (rank 0 writes them, the others wait).
    const std::string dir = a.output + "/data";
    const std::string train = dir + "/preference_train.jsonl", eval = dir + "/preference_valid.jsonl";
    if (dist::rank() == 0 && !exists(train)) {
      const auto n = llama::write_preference_pairs(default_train_text, train, a.loop.seed);
      const auto m = llama::write_preference_pairs(default_eval_text, eval, a.loop.seed + 1);
      std::printf("data: %ld built-in preference pairs (a passage's next words against the same words shuffled or "
                  "half of them said twice), %ld held out\n", n, m);
    }
    dist::barrier(dist::world_group());
    o.files = {train};
    if (eval_file.empty()) eval_file = eval;
  }
  train_ = llama::PreferenceDataset::open(o, tok);
  if (!eval_file.empty()) {
    o.files = {eval_file};
    eval_.emplace(llama::PreferenceDataset::open(o, tok));
  }
  reference_train_.assign(static_cast<size_t>(2 * train_.size()), kMissing);
  if (eval_) reference_eval_.assign(static_cast<size_t>(2 * eval_->size()), kMissing);
}

PreferenceTask::Scores PreferenceTask::score(const llama::PreferenceDataset& data, const std::vector<int64_t>& pairs,
                                             bool reference) {
  auto b = data.batch(pairs, pad_multiple_);
  std::optional<parallel::LoraDisabledGuard> base_only;
  if (reference && args_.lora.enabled()) base_only.emplace();
  auto logps = model_->token_log_probs(b.input_ids.to(device_), b.labels.to(device_));
  const int64_t T = b.labels.size(1);
  return {model_->sum_over_sequence(logps).to(torch::kFloat),
          b.labels.narrow(1, 1, T - 1).ne(-100).sum(1).to(torch::kFloat)};
}

torch::Tensor PreferenceTask::rewards(const llama::PreferenceDataset& data, const std::vector<int64_t>& pairs) {
  auto b = data.batch(pairs, pad_multiple_);
  // The last token that is not padding (transformers' rule with config.pad_token_id = pad_id()).
  const int64_t T = b.input_ids.size(1);
  auto kept = b.input_ids.ne(data.pad_id()).to(torch::kLong) * torch::arange(T, torch::kLong).unsqueeze(0);
  return model_->sequence_scores(b.input_ids.to(device_), kept.argmax(1));
}

torch::Tensor PreferenceTask::reward_loss(const torch::Tensor& r) const {
  const int64_t B = r.size(0) / 2;
  auto chosen = r.narrow(0, 0, B), rejected = r.narrow(0, B, B);
  auto loss = posttrain::pairwise_reward_loss(chosen, rejected);
  if (args_.center_rewards_coefficient > 0)
    loss = loss + args_.center_rewards_coefficient * (chosen + rejected).pow(2).mean();
  return loss;
}

posttrain::PairLogProbs PreferenceTask::pair_log_probs(const Scores& s, const std::vector<double>& table,
                                                       const std::vector<int64_t>& pairs) const {
  const int64_t B = static_cast<int64_t>(pairs.size());
  posttrain::PairLogProbs p;
  p.chosen = s.sums.narrow(0, 0, B);
  p.rejected = s.sums.narrow(0, B, B);
  p.chosen_tokens = s.tokens.narrow(0, 0, B).to(p.chosen.device());
  p.rejected_tokens = s.tokens.narrow(0, B, B).to(p.chosen.device());
  if (!args_.preference.needs_reference()) return p;
  std::vector<double> c, r;
  for (int64_t i : pairs) {
    const double rc = table[static_cast<size_t>(2 * i)], rr = table[static_cast<size_t>(2 * i + 1)];
    COLOSSAL_CHECK(!std::isnan(rc) && !std::isnan(rr), "[dpo] pair ", i, " has no reference log-probability: the "
                   "checkpoint's table does not cover the pairs this run draws (the data, batch or length changed "
                   "since the run started); a full-parameter run's reference is its starting model, which a "
                   "checkpoint no longer holds: start again (--load_checkpoint none)");
    c.push_back(rc);
    r.push_back(rr);
  }
  p.reference_chosen = torch::tensor(c, torch::kFloat64).to(p.chosen.options());
  p.reference_rejected = torch::tensor(r, torch::kFloat64).to(p.chosen.options());
  return p;
}

void PreferenceTask::compute_reference(const llama::PreferenceDataset& data, std::vector<double>& table,
                                       const std::vector<int64_t>& needed) {
  torch::NoGradGuard no_grad;
  model_->eval();
  // Every rank runs the same number of forwards (ZeRO-3 gathers parameters collectively); a rank
  // out of pairs scores pair 0 and drops it.
  const int64_t bs = args_.batch_size;
  auto most = torch::tensor({static_cast<int64_t>(needed.size())}, torch::kInt64);
  dist::all_reduce(most, dist::world_group(), dist::ReduceOp::kMax);
  const int64_t batches = (most.item<int64_t>() + bs - 1) / bs;
  std::vector<double> sums(table.size(), 0.0), seen(table.size() / 2, 0.0);
  for (int64_t k = 0; k < batches; ++k) {
    std::vector<int64_t> idx;
    for (int64_t j = k * bs; j < std::min<int64_t>((k + 1) * bs, static_cast<int64_t>(needed.size())); ++j)
      idx.push_back(needed[static_cast<size_t>(j)]);
    const bool real = !idx.empty();
    if (!real) idx = {0};
    auto s = score(data, idx, /*reference=*/true).sums.to(torch::kFloat64).cpu().contiguous();
    if (!real) continue;
    const size_t B = idx.size();
    const double* v = s.data_ptr<double>();
    for (size_t j = 0; j < B; ++j) {
      const auto i = static_cast<size_t>(idx[j]);
      sums[2 * i] += v[j];
      sums[2 * i + 1] += v[B + j];
      seen[i] += 1;
    }
  }
  // Pool the replicas' pairs (a pair two replicas drew, in different epochs, is averaged).
  auto pooled = torch::cat({torch::tensor(sums, torch::kFloat64), torch::tensor(seen, torch::kFloat64)});
  if (replica_group_.is_member() && replica_group_.size() > 1) dist::all_reduce(pooled, replica_group_);
  const auto* v = pooled.data_ptr<double>();
  const size_t n = seen.size();
  for (size_t i = 0; i < n; ++i)
    if (v[2 * n + i] > 0) {
      table[2 * i] = v[2 * i] / v[2 * n + i];
      table[2 * i + 1] = v[2 * i + 1] / v[2 * n + i];
    }
  model_->train();
}

std::optional<apps::Metrics> PreferenceTask::evaluate() {
  torch::NoGradGuard no_grad;
  model_->eval();
  const auto [r, n] = replica_;
  const int64_t per_replica = (eval_->size() + n - 1) / n, bs = args_.batch_size;
  // loss, correct, margins, chosen, rejected rewards, logps chosen, rejected, pairs
  std::vector<double> totals(8, 0.0);
  for (int64_t start = 0; start < per_replica; start += bs) {
    std::vector<int64_t> idx;
    for (int64_t k = start; k < std::min(per_replica, start + bs); ++k)
      if (k * n + r < eval_->size()) idx.push_back(k * n + r);
    const bool real = !idx.empty();
    if (!real) idx = {0};
    if (reward_model()) {
      auto r = rewards(*eval_, idx).to(torch::kFloat64).cpu();
      if (!real) continue;
      const int64_t B = static_cast<int64_t>(idx.size());
      auto c = r.narrow(0, 0, B), j = r.narrow(0, B, B);
      totals[0] += reward_loss(r).item<double>() * static_cast<double>(B);
      totals[1] += c.gt(j).sum().item<double>();
      totals[2] += (c - j).sum().item<double>();
      totals[3] += c.sum().item<double>();
      totals[4] += j.sum().item<double>();
      totals[7] += static_cast<double>(B);
      continue;
    }
    auto s = score(*eval_, idx, false);
    if (!real) continue;
    auto p = pair_log_probs(s, reference_eval_, idx);
    auto out = posttrain::preference_loss(p, args_.preference);
    const double B = static_cast<double>(idx.size());
    totals[0] += out.loss.item<double>() * B;
    totals[1] += out.chosen_rewards.gt(out.rejected_rewards).sum().item<double>();
    totals[2] += (out.chosen_rewards - out.rejected_rewards).sum().item<double>();
    totals[3] += out.chosen_rewards.sum().item<double>();
    totals[4] += out.rejected_rewards.sum().item<double>();
    totals[5] += p.chosen.sum().item<double>();
    totals[6] += p.rejected.sum().item<double>();
    totals[7] += B;
  }
  model_->train();
  // The world's sum counts each replica's ranks alike, so the ratios are the means.
  auto t = torch::tensor(totals, torch::kFloat64);
  dist::all_reduce(t, dist::world_group());
  const double pairs = t[7].item<double>();
  if (pairs == 0) return std::nullopt;
  auto mean = [&](int i) { return t[i].item<double>() / pairs; };
  if (reward_model())  // TRL's RewardTrainer's names
    return apps::Metrics{{"loss", mean(0)},
                         {"accuracy", mean(1)},
                         {"margin", mean(2)},
                         {"mean_reward", (t[3].item<double>() + t[4].item<double>()) / (2 * pairs)}};
  return apps::Metrics{{"loss", mean(0)},           {"rewards/accuracies", mean(1)}, {"rewards/margins", mean(2)},
                       {"rewards/chosen", mean(3)}, {"rewards/rejected", mean(4)},   {"logps/chosen", mean(5)},
                       {"logps/rejected", mean(6)}};
}

void PreferenceTask::configure(apps::TrainTask& task, llama::LlamaForCausalLM model, std::pair<int, int> replica,
                               const dist::Group& replica_group, c10::Device device) {
  model_ = model;
  replica_ = replica;
  replica_group_ = replica_group;
  device_ = device;
  const auto& ctx = model->parallel_context();
  COLOSSAL_CHECK(!ctx.pipeline.enabled(), "[posttrain] --mode ", args_.mode, " under pipeline parallelism is not "
                 "supported yet: a pair's loss needs both answers' scores on the last stage; use tp, sp or data "
                 "parallelism");
  pad_multiple_ = pad_multiple(ctx);
  COLOSSAL_CHECK(args_.max_length % pad_multiple_ == 0, "[posttrain] --max_length ", args_.max_length,
                 " does not divide into the sequence-parallel split (a multiple of ", pad_multiple_, ")");
  const auto& cfg = model->config();
  const double tokens = train_.mean_pair_tokens();
  task.train_samples = train_.size();
  task.units_per_sample = tokens;
  task.flops_per_sample = training_flops_per_token(cfg, static_cast<int64_t>(tokens / 2)) * tokens *
                          (args_.lora.enabled() ? 2.0 / 3 : 1.0);
  task.batch_flag = "--batch_size " + std::to_string(args_.batch_size) + " (pairs)";
  if (reward_model()) {
    task.loss = [this](apps::StepContext& ctx) {
      auto r = rewards(train_, ctx.positions);
      const int64_t B = static_cast<int64_t>(ctx.positions.size());
      auto both = r.detach().to(torch::kFloat64).cpu();
      auto c = both.narrow(0, 0, B), j = both.narrow(0, B, B);
      ctx.count("pairs", static_cast<double>(B));
      ctx.count("correct", c.gt(j).sum().item<double>());
      ctx.count("margin", (c - j).sum().item<double>());
      ctx.count("reward", (c + j).sum().item<double>());
      return reward_loss(r);
    };
    task.count_metrics = [](const std::map<std::string, double>& c) {
      const double n = std::max(1.0, c.at("pairs"));
      return apps::Metrics{{"accuracy", c.at("correct") / n}, {"margin", c.at("margin") / n},
                           {"mean_reward", c.at("reward") / (2 * n)}};
    };
  } else {
    task.loss = [this](apps::StepContext& ctx) {
      auto s = score(train_, ctx.positions, false);
      auto p = pair_log_probs(s, reference_train_, ctx.positions);
      if (args_.preference.loss_type == "orpo" && replica_group_.is_member() && replica_group_.size() > 1) {
        // ORPO's NLL is a mean over the global batch's chosen tokens, whatever the replicas hold.
        auto tokens = p.chosen_tokens.sum().to(torch::kFloat64).cpu().reshape({1});
        dist::all_reduce(tokens, replica_group_);
        p.nll_tokens = tokens.item<double>() / replica_group_.size();
      }
      auto out = posttrain::preference_loss(p, args_.preference);
      ctx.count("pairs", static_cast<double>(ctx.positions.size()));
      ctx.count("correct", out.chosen_rewards.gt(out.rejected_rewards).sum().item<double>());
      ctx.count("chosen", out.chosen_rewards.sum().item<double>());
      ctx.count("rejected", out.rejected_rewards.sum().item<double>());
      ctx.count("logps_chosen", p.chosen.detach().sum().item<double>());
      ctx.count("logps_rejected", p.rejected.detach().sum().item<double>());
      return out.loss;
    };
    task.count_metrics = [](const std::map<std::string, double>& c) {
      const double n = std::max(1.0, c.at("pairs"));
      return apps::Metrics{{"rewards/chosen", c.at("chosen") / n},
                           {"rewards/rejected", c.at("rejected") / n},
                           {"rewards/margins", (c.at("chosen") - c.at("rejected")) / n},
                           {"rewards/accuracies", c.at("correct") / n},
                           {"logps/chosen", c.at("logps_chosen") / n},
                           {"logps/rejected", c.at("logps_rejected") / n}};
    };
  }
  if (eval_) {
    task.evaluate = [this](const apps::EvalContext&) { return evaluate(); };
    task.eval_samples = eval_->size();
    task.eval_flag = "--eval_dataset";
  } else {
    task.evaluate = nullptr;
  }
  if (reward_model() || !args_.preference.needs_reference()) return;
  // The reference table travels with the checkpoints (rank 0 writes it; every rank has it whole).
  task.save_rank_state = [this](const std::string& dir) {
    if (dist::rank() != 0) return;
    checkpoint::NamedTensors t;
    auto [train_index, train_logps] = scored_part(reference_train_);
    t.push_back({"train.index", train_index});
    t.push_back({"train.logps", train_logps});
    if (eval_) {
      auto [eval_index, eval_logps] = scored_part(reference_eval_);
      t.push_back({"eval.index", eval_index});
      t.push_back({"eval.logps", eval_logps});
    }
    checkpoint::save_safetensors(dir + "/" + kReferenceFile, t,
                                 {{"train_pairs", std::to_string(train_.size())},
                                  {"eval_pairs", std::to_string(eval_ ? eval_->size() : 0)}});
  };
  task.load_rank_state = [this](const std::string& dir) {
    const std::string path = dir + "/" + kReferenceFile;
    COLOSSAL_CHECK(exists(path), "[dpo] checkpoint ", dir, " has no ", kReferenceFile, ": it is not from a DPO run "
                   "with a reference model, so the reference log-probabilities are unknown (--load_checkpoint none "
                   "starts over, scoring the reference from the starting model)");
    auto file = checkpoint::SafetensorsFile::open(path);
    const auto& meta = file->metadata();
    COLOSSAL_CHECK(meta.count("train_pairs") && meta.at("train_pairs") == std::to_string(train_.size()), "[dpo] ",
                   path, " is for ", meta.count("train_pairs") ? meta.at("train_pairs") : "an unknown number of",
                   " training pairs; the data has ", train_.size());
    restore(reference_train_, *file, "train");
    if (eval_ && file->find("eval.index") && meta.count("eval_pairs") &&
        meta.at("eval_pairs") == std::to_string(eval_->size()))
      restore(reference_eval_, *file, "eval");
    reference_loaded_ = true;
  };
  task.after_resume = [this](int64_t first_step, int64_t total_steps, const data::DistributedSampler& sampler) {
    // This replica's pairs for the steps to come (a copy of the sampler draws them now).
    auto ahead = sampler;
    std::vector<int64_t> needed;
    const int64_t draws = std::max<int64_t>(0, total_steps - first_step + 1) * args_.loop.accumulation_steps;
    for (int64_t k = 0; k < draws; ++k)
      for (int64_t i : ahead.next_across_epochs(args_.batch_size))
        if (std::isnan(reference_train_[static_cast<size_t>(2 * i)])) needed.push_back(i);
    std::sort(needed.begin(), needed.end());
    needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
    // A resumed full-parameter run cannot score what is missing: its weights moved on (the
    // error names the first such pair when it is drawn). Under LoRA the base is the reference.
    if (reference_loaded_ && !args_.lora.enabled()) needed.clear();
    const auto t0 = std::chrono::steady_clock::now();
    compute_reference(train_, reference_train_, needed);
    if (eval_) {
      std::vector<int64_t> all;
      const auto [r, n] = replica_;
      for (int64_t i = r; i < eval_->size(); i += n)
        if (std::isnan(reference_eval_[static_cast<size_t>(2 * i)])) all.push_back(i);
      if (!reference_loaded_ || args_.lora.enabled()) compute_reference(*eval_, reference_eval_, all);
    }
    if (dist::rank() == 0) {
      std::printf("dpo: reference log-probabilities of %zu pairs on this replica in %.1f s%s\n", needed.size(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                  args_.lora.enabled() ? " (the base model: adapters off)" : "");
      std::fflush(stdout);
    }
  };
}

}  // namespace colossal::llama_app
