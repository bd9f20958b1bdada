#include "apps/llama/grpo_task.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>

#include "core/booster/booster.h"
#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/parallel/tensor/parallel_linear.h"
#include "core/posttrain/grpo_loss.h"
#include "llama/chat_tasks.h"

namespace colossal::llama_app {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A completion's own random stream: the run's seed, the step, the prompt's index and the sample's
// place in its group (splitmix64), so it is the same whatever replica or batch draws it.
uint64_t completion_seed(uint64_t seed, int64_t step, int64_t prompt, int64_t g) {
  uint64_t z = seed;
  for (uint64_t v : {static_cast<uint64_t>(step), static_cast<uint64_t>(prompt), static_cast<uint64_t>(g)}) {
    z += 0x9e3779b97f4a7c15ull + v;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
  }
  return z;
}

llama::PromptDataset open_prompts(const std::vector<std::string>& files, const TrainArgs& a,
                                  const text::Tokenizer& tok) {
  llama::PromptDataOptions o;
  o.files = files;
  o.chat_template = a.chat_template;
  o.on_bad_line = a.on_bad_line;
  o.max_length = a.max_length;
  o.completion_tokens = a.grpo.max_completion_length;
  return llama::PromptDataset::open(o, tok);
}

}  // namespace

struct GrpoTask::Rollout {
  torch::Tensor ids, labels;    // [S, T]: prompt + completion; labels the completion's tokens
  std::vector<double> rewards;  // [S], groups of G consecutive completions
  int64_t generated = 0;        // completion tokens
};

GrpoTask::GrpoTask(const TrainArgs& a, std::shared_ptr<const text::Tokenizer> tokenizer, const std::string&,
                   RewardFunction reward)
    : args_(a), tokenizer_(std::move(tokenizer)), reward_(std::move(reward)),
      train_(open_prompts(a.dataset, a, *tokenizer_)) {
  if (!a.eval_dataset.empty()) eval_.emplace(open_prompts({a.eval_dataset}, a, *tokenizer_));
}

double GrpoTask::reward_of(const llama::Prompt& p, const std::string& completion) const {
  if (!reward_) {
    return args_.reward == "partial_match" ? llama::partial_match_reward(completion, p.answer)
                                           : llama::exact_match_reward(completion, p.answer);
  }
  double r = 0;
  try {
    r = reward_(p.text, completion, p.answer);
  } catch (const std::exception& e) {
    COLOSSAL_FAIL("[grpo] the reward function failed on the prompt at ", p.where, ": ", e.what());
  }
  COLOSSAL_CHECK(std::isfinite(r), "[grpo] the reward function returned ", r, " for the prompt at ", p.where,
                 ": a reward must be a finite number");
  return r;
}

llama::RolloutEngine& GrpoTask::engine(booster::BoostedOptimizer& optimizer) {
  if (engine_) return *engine_;
  llama::RolloutEngine::WholeWeights whole;
  if (args_.plugin.name == "gemini" || model_->parallel_context().tp_size() > 1) {
    auto* layout = &optimizer.model_wrapper().checkpoint();
    whole = [layout, model = model_] { return layout->full_model_state(*model); };
  }
  engine_ = std::make_unique<llama::RolloutEngine>(model_, tokenizer_, std::move(whole));
  return *engine_;
}

namespace {

// A completion as int64s: [tokens, ended, text bytes, the tokens..., the bytes...], padded with 0.
std::vector<int64_t> pack(const llama::Completion& c) {
  std::vector<int64_t> out{static_cast<int64_t>(c.tokens.size()), c.ended ? 1 : 0,
                           static_cast<int64_t>(c.text.size())};
  out.insert(out.end(), c.tokens.begin(), c.tokens.end());
  for (unsigned char b : c.text) out.push_back(b);
  return out;
}

llama::Completion unpack(const int64_t* p) {
  llama::Completion c;
  c.tokens.assign(p + 3, p + 3 + p[0]);
  c.ended = p[1] != 0;
  for (int64_t i = 0; i < p[2]; ++i) c.text.push_back(static_cast<char>(p[3 + p[0] + i]));
  return c;
}

}  // namespace

std::vector<llama::Completion> GrpoTask::sample_shared(const std::vector<std::vector<int64_t>>& prompts,
                                                       const std::vector<uint64_t>& seeds, double temperature) {
  // Under tensor parallelism the ranks of a group train on the same completions: each samples
  // every n-th (a completion's seed makes it the same whoever samples it) and they swap them.
  const auto& tp = model_->parallel_context().tp;
  const int n = tp.is_member() ? tp.size() : 1;
  const auto& o = args_.grpo;
  if (n == 1) return engine_->sample(prompts, seeds, o.max_completion_length, temperature);
  const int me = tp.rank();
  std::vector<std::vector<int64_t>> my_prompts;
  std::vector<uint64_t> my_seeds;
  for (size_t i = static_cast<size_t>(me); i < prompts.size(); i += static_cast<size_t>(n)) {
    my_prompts.push_back(prompts[i]);
    my_seeds.push_back(seeds[i]);
  }
  std::vector<std::vector<int64_t>> packed;
  int64_t width = 0;
  for (const auto& c : engine_->sample(my_prompts, my_seeds, o.max_completion_length, temperature)) {
    packed.push_back(pack(c));
    width = std::max<int64_t>(width, static_cast<int64_t>(packed.back().size()));
  }
  auto w = torch::tensor({width}, torch::kInt64);
  dist::all_reduce(w, tp, dist::ReduceOp::kMax);
  width = w.item<int64_t>();
  const int64_t slots = (static_cast<int64_t>(prompts.size()) + n - 1) / n;
  auto mine = torch::zeros({slots, width}, torch::kInt64);
  for (size_t k = 0; k < packed.size(); ++k)
    std::copy(packed[k].begin(), packed[k].end(), mine.data_ptr<int64_t>() + static_cast<int64_t>(k) * width);
  auto all = torch::empty({n * slots, width}, torch::kInt64);
  dist::all_gather(all, mine, tp);
  std::vector<llama::Completion> out;
  for (size_t i = 0; i < prompts.size(); ++i) {  // completion i: rank i % n's slot i / n
    const int64_t row = static_cast<int64_t>(i % n) * slots + static_cast<int64_t>(i / n);
    out.push_back(unpack(all.data_ptr<int64_t>() + row * width));
  }
  return out;
}

GrpoTask::Rollout GrpoTask::roll_out(const std::vector<int64_t>& positions, int64_t step,
                                     booster::BoostedOptimizer& optimizer) {
  const int64_t G = args_.grpo.num_generations;
  std::vector<std::vector<int64_t>> prompts;
  std::vector<uint64_t> seeds;
  for (int64_t pos : positions)
    for (int64_t g = 0; g < G; ++g) {
      prompts.push_back(train_.prompt(pos).ids);
      seeds.push_back(completion_seed(args_.loop.seed, step, pos, g));
    }
  if (refreshed_at_ != step) {  // the weights of the last optimizer step
    engine(optimizer).refresh();
    refreshed_at_ = step;
  }
  const auto completions = sample_shared(prompts, seeds, args_.grpo.temperature);
  Rollout r;
  int64_t T = 2;
  for (size_t i = 0; i < prompts.size(); ++i)
    T = std::max<int64_t>(T, static_cast<int64_t>(prompts[i].size() + completions[i].tokens.size()));
  const int64_t S = static_cast<int64_t>(prompts.size());
  const int64_t pad = tokenizer_->pad_id() >= 0 ? tokenizer_->pad_id() : engine_->eos_id();
  r.ids = torch::full({S, T}, pad, torch::kInt64);
  r.labels = torch::full({S, T}, -100, torch::kInt64);
  auto* ip = r.ids.data_ptr<int64_t>();
  auto* lp = r.labels.data_ptr<int64_t>();
  for (int64_t s = 0; s < S; ++s) {
    const auto& p = prompts[static_cast<size_t>(s)];
    const auto& c = completions[static_cast<size_t>(s)];
    std::copy(p.begin(), p.end(), ip + s * T);
    std::copy(c.tokens.begin(), c.tokens.end(), ip + s * T + p.size());
    std::copy(c.tokens.begin(), c.tokens.end(), lp + s * T + p.size());
    r.generated += static_cast<int64_t>(c.tokens.size());
    r.rewards.push_back(reward_of(train_.prompt(positions[static_cast<size_t>(s / G)]), c.text));
  }
  return r;
}

std::optional<apps::Metrics> GrpoTask::evaluate(booster::BoostedOptimizer& optimizer) {
  // Greedy completions of every held-out prompt, each replica its share; the mean reward.
  const auto [r, n] = replica_;
  std::vector<std::vector<int64_t>> prompts;
  std::vector<int64_t> which;
  for (int64_t i = r; i < eval_->size(); i += n) {
    prompts.push_back(eval_->prompt(i).ids);
    which.push_back(i);
  }
  engine(optimizer).refresh();  // every rank: the gathered weights are a collective
  refreshed_at_ = -1;
  const auto completions = sample_shared(prompts, std::vector<uint64_t>(prompts.size(), 0), 0.0);
  double total = 0;
  for (size_t k = 0; k < completions.size(); ++k) total += reward_of(eval_->prompt(which[k]), completions[k].text);
  auto t = torch::tensor({total, static_cast<double>(completions.size())}, torch::kFloat64);
  if (replica_group_.is_member() && replica_group_.size() > 1) dist::all_reduce(t, replica_group_);
  if (t[1].item<double>() == 0) return std::nullopt;
  return apps::Metrics{{"reward", t[0].item<double>() / t[1].item<double>()}};
}

void GrpoTask::configure(apps::TrainTask& task, llama::LlamaForCausalLM model, std::pair<int, int> replica,
                         const dist::Group& replica_group, c10::Device device) {
  model_ = model;
  replica_ = replica;
  replica_group_ = replica_group;
  device_ = device;
  COLOSSAL_CHECK(device.is_cpu(), "[grpo] the rollout engine runs on the CPU; --device cuda is not supported yet");
  const auto& o = args_.grpo;
  task.train_samples = train_.size();
  task.throughput_unit = "completions";
  task.units_per_sample = static_cast<double>(o.num_generations);
  task.flops_per_sample = 0;
  task.batch_flag = "--batch_size " + std::to_string(args_.batch_size) + " (prompts)";
  task.loss_weight = nullptr;
  task.loss = [this](apps::StepContext& ctx) {
    const auto& o = args_.grpo;
    const int64_t G = o.num_generations;
    if (window_start_ == 0) window_start_ = now_seconds();
    auto r = roll_out(ctx.positions, ctx.step, ctx.optimizer);
    auto rewards = torch::tensor(r.rewards, torch::kFloat64);
    auto advantages = posttrain::group_advantages(rewards, G, o.scale_rewards);
    auto keep = o.dynamic_sampling ? posttrain::groups_with_signal(rewards, G)
                                   : torch::ones({rewards.size(0)}, torch::kBool);
    const int64_t T = r.labels.size(1);
    auto mask = torch::zeros(r.labels.sizes(), torch::kFloat);
    mask.narrow(1, 0, T - 1).copy_(r.labels.narrow(1, 1, T - 1).ne(-100));  // position t predicts t + 1
    mask.mul_(keep.to(torch::kFloat).unsqueeze(1));
    // dapo: the kept completion tokens of every replica, each replica's share of the divisor.
    auto tokens = torch::stack({mask.sum().to(torch::kFloat64)});
    double replicas = 1;
    if (replica_group_.is_member() && replica_group_.size() > 1) {
      dist::all_reduce(tokens, replica_group_);
      replicas = replica_group_.size();
    }
    auto ids = r.ids.to(device_), labels = r.labels.to(device_);
    posttrain::GrpoBatch b;
    b.logps = model_->token_log_probs(ids, labels);
    b.mask = mask.to(device_);
    b.advantages = advantages.to(device_, torch::kFloat);
    b.tokens = std::max(1.0, tokens.item<double>()) / replicas;
    if (o.beta > 0) {  // the starting model: the adapters off (LoRA only)
      torch::NoGradGuard no_grad;
      parallel::LoraDisabledGuard off;
      b.ref_logps = model_->token_log_probs(ids, labels);
    }
    auto out = posttrain::grpo_loss(b, o);
    const double kept_tokens = mask.sum().item<double>();
    auto groups = rewards.view({-1, G});
    ctx.count("completions", static_cast<double>(rewards.size(0)));
    ctx.count("reward", rewards.sum().item<double>());
    ctx.count("groups", static_cast<double>(groups.size(0)));
    ctx.count("group_std", groups.std(1, true).sum().item<double>());
    ctx.count("zero_std_groups", groups.std(1, true).eq(0).sum().item<double>());
    ctx.count("completion_tokens", static_cast<double>(r.generated));
    ctx.count("kept_tokens", kept_tokens);
    ctx.count("clipped_low", out.clipped_low * kept_tokens);
    ctx.count("clipped_high", out.clipped_high * kept_tokens);
    ctx.count("kl", out.kl * kept_tokens);
    return out.loss;
  };
  task.count_metrics = [](const std::map<std::string, double>& c) {
    const double n = std::max(1.0, c.at("completions")), groups = std::max(1.0, c.at("groups"));
    const double kept = std::max(1.0, c.at("kept_tokens"));
    return apps::Metrics{{"reward", c.at("reward") / n},
                         {"reward_std", c.at("group_std") / groups},
                         {"frac_reward_zero_std", c.at("zero_std_groups") / groups},
                         {"completions/mean_length", c.at("completion_tokens") / n},
                         {"clip_ratio/low_mean", c.at("clipped_low") / kept},
                         {"clip_ratio/high_mean", c.at("clipped_high") / kept},
                         {"kl", c.at("kl") / kept}};
  };
  task.log_metrics = [this](apps::Metrics& m, std::vector<std::pair<std::string, std::vector<double>>>&) {
    // This rank's rollouts since the last line: their share of the wall time, the engine's rate.
    if (!engine_) return;
    const double now = now_seconds(), wall = std::max(1e-9, now - window_start_);
    const double seconds = engine_->seconds() - engine_seconds_at_;
    const auto generated = static_cast<double>(engine_->tokens() - engine_tokens_at_);
    m.push_back({"rollout_share", seconds / wall});
    m.push_back({"rollout_tokens/s", seconds > 0 ? generated / seconds : 0.0});
    window_start_ = now;
    engine_seconds_at_ = engine_->seconds();
    engine_tokens_at_ = engine_->tokens();
  };
  if (eval_) {
    task.evaluate = [this](const apps::EvalContext& ctx) { return evaluate(ctx.optimizer); };
    task.eval_samples = eval_->size();
    task.eval_flag = "--eval_dataset";
  } else {
    task.evaluate = nullptr;
  }
}

}  // namespace colossal::llama_app
