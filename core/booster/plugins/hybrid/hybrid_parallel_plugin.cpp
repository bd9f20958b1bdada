#include "core/booster/plugins/hybrid/hybrid_parallel_plugin.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/amp/precision.h"
#include "core/booster/plugins/ddp/ddp_plugin.h"
#include "core/common/check.h"
#include "core/dist/runtime.h"
#include "core/checkpoint/model_io.h"
#include "core/parallel/expert/experts.h"
#include "core/parallel/pipeline/state_exchange.h"
#include "core/parallel/tensor/shard.h"
#include "core/booster/plugins/low_level_zero/low_level_zero_plugin.h"

namespace colossal::booster {
namespace {


// The data-parallel plugin's wrapper with tensor parallelism around it: checkpoints see whole
// tensors, optimizer state is named per tensor-parallel slice.
class HybridModel : public ModelWrapper {
 public:
  HybridModel(std::unique_ptr<ModelWrapper> inner, std::map<std::string, parallel::ShardSpec> specs, int tp, int tp_rank,
              int dp_rank, parallel::pipeline::PipelineLayout pipeline)
      : ModelWrapper("hybrid"),
        inner_(std::move(inner)),
        specs_(std::move(specs)),
        dp_rank_(dp_rank),
        tp_(tp),
        tp_rank_(tp_rank),
        pipeline_(std::move(pipeline)) {}

  // Expert parallelism: `ep` shares out the experts (`experts`: this rank's parameter names);
  // `edp_rank`: this rank's place among the replicas holding the same experts.
  void set_experts(dist::Group ep, std::set<std::string> experts, int edp_rank) {
    ep_ = std::move(ep);
    experts_ = std::move(experts);
    edp_rank_ = edp_rank;
  }

  double evaluate_pipeline(const parallel::pipeline::StageFunctions& model, const std::vector<torch::Tensor>& inputs,
                           const std::vector<torch::Tensor>& targets) override {
    COLOSSAL_CHECK(pipeline_.enabled(), "[hybrid] evaluate_pipeline needs pp > 1 (this layout has one stage)");
    if (!runner_) runner_.emplace(parallel::pipeline::Schedule(pipeline_.schedule), pipeline_.group);
    return runner_->evaluate(model, inputs, targets);
  }

  // Under pipeline parallelism: the names the other stages hold (exchanged once, collective).
  // Under expert parallelism likewise the experts the other ep ranks hold.
  void learn_other_stages(const torch::nn::Module& model) {
    if (!pipeline_.enabled() && !expert_parallel()) return;
    std::vector<std::string> mine;
    for (const auto& [name, t] : checkpoint::model_state(model)) mine.push_back(name);
    const std::set<std::string> own(mine.begin(), mine.end());
    for (const auto* group : {&pipeline_.group, &ep_}) {
      if (!group->is_member() || group->size() == 1) continue;
      for (auto& name : parallel::pipeline::all_names(*group, mine))
        if (!own.count(name)) elsewhere_.insert(std::move(name));
    }
  }

  // One step of the schedule. Gradients accumulate locally and each chunk's are reduced over
  // the data-parallel ranks during its last backward step (the runner switches sync on there).
  double execute_pipeline(const parallel::pipeline::StageFunctions& model, const std::vector<torch::Tensor>& inputs,
                          const std::vector<torch::Tensor>& targets) override {
    COLOSSAL_CHECK(pipeline_.enabled(), "[hybrid] execute_pipeline needs pp > 1 (this layout has one stage); "
                   "run forward and Booster::backward instead");
    const int m = static_cast<int>(pipeline_.holds_first() ? inputs.size() : targets.size());
    auto options = pipeline_.schedule;
    options.microbatches = m;
    if (!runner_ || runner_->schedule().microbatches() != m)
      runner_.emplace(parallel::pipeline::Schedule(options), pipeline_.group);
    auto fns = model;
    fns.loss_scale = inner_->loss_scale();
    fns.gradient_sync = [this](bool on) { inner_->set_gradient_sync(on); };
    inner_->before_backward();
    inner_->set_gradient_sync(false);
    double loss = 0;
    try {
      loss = runner_->run(fns, inputs, targets);
    } catch (...) {
      inner_->set_gradient_sync(true);
      throw;
    }
    inner_->set_gradient_sync(true);
    inner_->after_backward();
    return loss;
  }

  void before_backward() override { inner_->before_backward(); }
  void after_backward() override { inner_->after_backward(); }
  void set_gradient_sync(bool enabled) override { inner_->set_gradient_sync(enabled); }
  bool gradient_sync() const override { return inner_->gradient_sync(); }
  c10::ScalarType compute_dtype() const override { return inner_->compute_dtype(); }
  double loss_scale() const override { return inner_->loss_scale(); }
  bool optimizer_step(torch::optim::Optimizer& optimizer) override { return inner_->optimizer_step(optimizer); }
  void zero_grad(torch::optim::Optimizer& optimizer) override { inner_->zero_grad(optimizer); }
  double clip_grad_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) override {
    return inner_->clip_grad_norm(optimizer, max_norm, norm_type);
  }
  std::map<std::string, double> extra_state() const override { return inner_->extra_state(); }
  void load_extra_state(const std::map<std::string, double>& s) override { inner_->load_extra_state(s); }
  MemoryReport memory_report(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer) const override {
    return inner_->memory_report(model, optimizer);
  }

  // Whole tensors: split ones gathered over tp (and kept, so a load can write into them and
  // after_model_load copy each rank's slice back).
  checkpoint::NamedTensors full_model_state(const torch::nn::Module& model) const override {
    auto state = inner_->full_model_state(model);
    gathered_.clear();
    for (auto& [name, t] : state) {
      auto it = specs_.find(name);
      if (it == specs_.end() || it->second.dim < 0) continue;
      auto full = parallel::gather_full(t, it->second);
      gathered_.push_back({t, full, it->second});
      t = full;
    }
    return state;
  }

  // The whole model on the pipeline's first rank (the one that writes): every stage's tensors.
  checkpoint::NamedTensors model_state_to_save(const torch::nn::Module& model) const override {
    auto state = gather_experts(full_model_state(model));
    if (!pipeline_.enabled()) return state;
    return parallel::pipeline::gather_to_first(pipeline_.group, std::move(state));
  }
  std::set<std::string> state_held_elsewhere() const override { return elsewhere_; }

  // The data-parallel plugin's gradients of this rank's slices, gathered whole over tp (every
  // tp rank, in the same order), then every stage's to the pipeline's first rank.
  checkpoint::NamedTensors full_gradients(const torch::nn::Module& model) const override {
    auto grads = inner_->full_gradients(model);
    for (auto& [name, g] : grads) {
      auto it = specs_.find(name);
      if (it != specs_.end() && it->second.dim >= 0) g = parallel::gather_full(g, it->second);
    }
    grads = gather_experts(std::move(grads));
    if (!pipeline_.enabled()) return grads;
    return parallel::pipeline::gather_to_first(pipeline_.group, std::move(grads));
  }

  void after_model_load() override {
    torch::NoGradGuard no_grad;
    for (auto& g : gathered_) g.local.copy_(parallel::slice_of(g.full, g.spec, g.local.size(g.spec.dim)));
    gathered_.clear();
    inner_->after_model_load();
  }

  // Each tensor-parallel rank's optimizer state is its own, named with the rank ("...@tp1of2",
  // replicated parameters too, so no two ranks write the same piece); every rank writes its
  // file, with where its part sits in the whole parameter, so a resume at another tp size (or
  // none) reassembles the whole state and takes its own part (checkpoint/optimizer_io.h).
  std::vector<checkpoint::OptimizerSlice> optimizer_slices(const torch::nn::Module& model) const override {
    auto slices = inner_->optimizer_slices(model);
    if (tp_ == 1) return slices;
    const auto local = model.named_parameters();
    for (auto& s : slices) {
      const auto* param = local.find(s.name);
      COLOSSAL_CHECK(param, "[hybrid] optimizer state of '", s.name, "', which is not a parameter of the model");
      s.whole_shape = param->sizes().vec();
      auto spec = specs_.find(s.name);
      if (spec != specs_.end() && spec->second.dim >= 0) {
        s.split_dim = spec->second.dim;
        s.split_start = spec->second.local_start;
        s.split_size = spec->second.local_size;
        s.whole_shape[s.split_dim] = spec->second.full_size;
      }
      s.name += "@tp" + std::to_string(tp_rank_) + "of" + std::to_string(tp_);
    }
    return slices;
  }
  // Pipeline stages (and ep ranks) hold different parameters: each writes its own optimizer
  // file, and a resume at another pp or ep size (or none) finds every parameter's state by name.
  bool optimizer_sharded() const override {
    return tp_ > 1 || pipeline_.enabled() || expert_parallel() || inner_->optimizer_sharded();
  }
  // DDP replicas of a stage hold the same state: the first data-parallel rank writes it. Under
  // expert parallelism the first replica of each ep rank writes its experts, and the ep rank 0
  // among them the dense parameters too.
  bool writes_optimizer_slices() const override {
    return inner_->optimizer_sharded() || (expert_parallel() ? edp_rank_ == 0 : dp_rank_ == 0);
  }
  bool writes_optimizer_slice(const std::string& slice) const override {
    if (!expert_parallel() || ep_.rank() == 0 || inner_->optimizer_sharded()) return true;
    return experts_.count(slice.substr(0, slice.find('@'))) > 0;  // "...@tp1of2"
  }

 private:
  bool expert_parallel() const { return ep_.is_member() && ep_.size() > 1; }

  // The ep group's first rank gets the other ep ranks' experts after its own tensors; the others
  // keep theirs.
  checkpoint::NamedTensors gather_experts(checkpoint::NamedTensors state) const {
    if (!expert_parallel()) return state;
    checkpoint::NamedTensors experts;
    for (const auto& [name, t] : state)
      if (experts_.count(name)) experts.emplace_back(name, t);
    auto gathered = parallel::pipeline::gather_to_first(ep_, std::move(experts));
    if (ep_.rank() != 0) return state;
    const size_t own = std::count_if(state.begin(), state.end(), [&](const auto& e) { return experts_.count(e.first) > 0; });
    for (size_t i = own; i < gathered.size(); ++i) state.push_back(std::move(gathered[i]));
    return state;
  }

  struct Gathered {
    torch::Tensor local, full;
    parallel::ShardSpec spec;
  };
  std::unique_ptr<ModelWrapper> inner_;
  std::map<std::string, parallel::ShardSpec> specs_;
  int dp_rank_;
  int tp_, tp_rank_;
  parallel::pipeline::PipelineLayout pipeline_;
  std::set<std::string> elsewhere_;  // names of the whole model held by other stages (or ep ranks)
  dist::Group ep_;
  std::set<std::string> experts_;
  int edp_rank_ = 0;
  std::optional<parallel::pipeline::PipelineRunner> runner_;
  mutable std::vector<Gathered> gathered_;
};

}  // namespace

void HybridParallelPlugin::Options::validate() const {
  COLOSSAL_CHECK(zero_stage >= 0 && zero_stage <= 2, "[hybrid] zero_stage: expected 0, 1 or 2, got ", zero_stage,
                 " (ZeRO-3 is the gemini plugin)");
  COLOSSAL_CHECK(bucket_bytes >= 0, "[hybrid] bucket_mib: expected > 0 (or 0: the data-parallel wrapper's own)");
  COLOSSAL_CHECK(communication_dtype.empty() || zero_stage > 0, "[hybrid] communication_dtype '", communication_dtype,
                 "' is ZeRO's (zero_stage 1 or 2); DDP reduces in the working dtype");
  COLOSSAL_CHECK(num_microbatches >= 0, "[hybrid] num_microbatches: expected >= 0 (0: pp x num_model_chunks), got ",
                 num_microbatches);
  (void)parallel::pipeline::parse_schedule(pp_schedule);
  (void)parallel::pipeline::parse_balance(pp_balance);
  COLOSSAL_CHECK(microbatch_size >= 0, "[hybrid] microbatch_size: expected >= 0, got ", microbatch_size);
  COLOSSAL_CHECK(microbatch_size == 0 || num_microbatches == 0, "[hybrid] num_microbatches ", num_microbatches,
                 " and microbatch_size ", microbatch_size, ": give one of them (the batch size sets the other)");
  (void)amp::parse_precision(precision);
}

parallel::pipeline::ScheduleOptions HybridParallelPlugin::Options::schedule(int pp) const {
  return {.kind = pp_schedule,
          .stages = pp,
          .microbatches = num_microbatches > 0 ? num_microbatches : pp * num_model_chunks,
          .chunks = num_model_chunks,
          .costs = {}};  // unit costs; the runner re-plans zbh1/zbv from measured ones
}

HybridParallelPlugin::HybridParallelPlugin(Options options, PluginEnvironment env)
    : Plugin(std::move(env)), options_(std::move(options)) {
  options_.validate();
  // The schedule is checked against the layout now, before any group or model exists.
  if (dims().pp() > 1) options_.schedule(dims().pp()).validate();
}

parallel::ParallelContext HybridParallelPlugin::parallel_context() {
  if (!context_) {
    context_ = parallel::ParallelContext::from(dims());
    if (dims().pp() > 1) {
      context_->pipeline.schedule = options_.schedule(dims().pp());
      context_->pipeline.balance = parallel::pipeline::parse_balance(options_.pp_balance);
      context_->pipeline.microbatch_size = options_.microbatch_size;
    }
  }
  return *context_;
}

std::unique_ptr<ModelWrapper> HybridParallelPlugin::wrap_model(torch::nn::Module& model,
                                                               torch::optim::Optimizer& optimizer) {
  const auto context = parallel_context();
  const int tp = dims().tp();
  const auto specs = parallel::collect_shard_specs(model);
  // A model built without the layout's groups would silently train as tp copies of itself.
  COLOSSAL_CHECK(tp == 1 || !specs.empty(), "[hybrid] tp ", tp,
                 ": the model holds no tensor-parallel slices; build it with plugin.parallel_context()");
  parallel::DataParallelScope scope;
  scope.group = dims().gradient_group();
  scope.gradient_divisor = dims().dp();
  if (dims().pp() > 1) scope.pipeline_group = context.pipeline.group;
  if (tp > 1) {
    scope.norm_group = context.tp;
    for (const auto& [name, spec] : specs)
      if (spec.dim >= 0) scope.split_over_norm_group.insert(name);
  }
  // Expert parallelism: each ep rank holds other experts (their gradients are reduced over the
  // replicas holding the same ones, their norms summed over ep).
  const auto experts = parallel::expert::expert_parameter_names(model);
  const int ep = dims().ep();
  if (ep > 1) {
    COLOSSAL_CHECK(!experts.empty(), "[hybrid] ep ", ep, ": the model holds no experts; build a mixture-of-experts "
                   "model with plugin.parallel_context()");
    scope.expert_group = dims().expert_gradient_group();
    // DDP ranks hold whole experts, so a norm adds the other ep ranks'. ZeRO's norm already sums
    // over the whole data-parallel group, where every rank holds other shards of the experts.
    if (options_.zero_stage == 0) scope.expert_norm_group = context.ep;
    scope.expert_parameters = experts;
  }
  PluginEnvironment inner_env{shared_dims(), device()};
  std::unique_ptr<ModelWrapper> inner;
  if (options_.zero_stage == 0) {
    DDPPlugin::Options o;
    o.precision = options_.precision;
    if (options_.bucket_bytes > 0) o.bucket_bytes = options_.bucket_bytes;
    o.loss_scaler = options_.loss_scaler;
    o.scope = scope;
    inner = DDPPlugin(o, inner_env).wrap_model(model, optimizer);
  } else {
    LowLevelZeroPlugin::Options o;
    o.stage = options_.zero_stage;
    o.precision = options_.precision;
    if (options_.bucket_bytes > 0) o.bucket_bytes = options_.bucket_bytes;
    o.communication_dtype = options_.communication_dtype;
    o.loss_scaler = options_.loss_scaler;
    o.scope = scope;
    inner = LowLevelZeroPlugin(o, inner_env).wrap_model(model, optimizer);
  }
  // After the inner wrap (mixed precision may replace the parameters): gradients that each rank
  // computes only in part (kv heads kept whole, norms on sequence shards) are summed over tp
  // before the data-parallel reduction sees them.
  parallel::register_partial_gradient_hooks(model);
  auto wrapped = std::make_unique<HybridModel>(std::move(inner), specs, tp, context.tp_rank(),
                                               dims().coord(dist::Axis::kDp), context.pipeline);
  if (ep > 1) wrapped->set_experts(context.ep, experts, dims().coord(dist::Axis::kEdp));
  wrapped->learn_other_stages(model);
  return wrapped;
}

}  // namespace colossal::booster
