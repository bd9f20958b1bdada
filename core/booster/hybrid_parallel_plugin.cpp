#include "core/booster/hybrid_parallel_plugin.h"

#include <torch/torch.h>

#include "core/amp/precision.h"
#include "core/booster/ddp_plugin.h"
#include "core/common/check.h"
#include "core/dist/runtime.h"
#include "core/parallel/tensor/shard.h"
#include "core/zero/low_level_zero_plugin.h"

namespace colossal::booster {
namespace {

using parallel::SequenceParallelMode;

// The data-parallel plugin's wrapper with tensor parallelism around it: checkpoints see whole
// tensors, optimizer state is named per tensor-parallel slice.
class HybridModel : public ModelWrapper {
 public:
  HybridModel(std::unique_ptr<ModelWrapper> inner, std::map<std::string, parallel::ShardSpec> specs, int tp, int tp_rank)
      : ModelWrapper("hybrid"), inner_(std::move(inner)), specs_(std::move(specs)), tp_(tp), tp_rank_(tp_rank) {}

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

  void after_model_load() override {
    torch::NoGradGuard no_grad;
    for (auto& g : gathered_) g.local.copy_(parallel::slice_of(g.full, g.spec, g.local.size(g.spec.dim)));
    gathered_.clear();
    inner_->after_model_load();
  }

  // Each tensor-parallel rank's optimizer state is its own, named with the rank ("...@tp1of2",
  // replicated parameters too, so no two ranks write the same piece); every rank writes its
  // file. Resuming needs the same tp size, and a different one finds no state under its names.
  std::vector<checkpoint::OptimizerSlice> optimizer_slices(const torch::nn::Module& model) const override {
    auto slices = inner_->optimizer_slices(model);
    if (tp_ == 1) return slices;
    for (auto& s : slices) s.name += "@tp" + std::to_string(tp_rank_) + "of" + std::to_string(tp_);
    return slices;
  }
  bool optimizer_sharded() const override { return tp_ > 1 || inner_->optimizer_sharded(); }

 private:
  struct Gathered {
    torch::Tensor local, full;
    parallel::ShardSpec spec;
  };
  std::unique_ptr<ModelWrapper> inner_;
  std::map<std::string, parallel::ShardSpec> specs_;
  int tp_, tp_rank_;
  mutable std::vector<Gathered> gathered_;
};

}  // namespace

void HybridParallelPlugin::Options::validate() const {
  COLOSSAL_CHECK(tp >= 1, "[hybrid] --tp: expected >= 1, got ", tp);
  COLOSSAL_CHECK(sp >= 1, "[hybrid] --sp: expected >= 1, got ", sp);
  COLOSSAL_CHECK(zero_stage >= 0 && zero_stage <= 2, "[hybrid] --zero_stage: expected 0, 1 or 2, got ", zero_stage,
                 " (ZeRO-3 is the gemini plugin)");
  const auto mode = parallel::parse_sequence_parallel_mode(sp_mode);
  COLOSSAL_CHECK(sp == 1 || mode != SequenceParallelMode::kNone, "[hybrid] --sp ", sp,
                 " needs a --sp_mode (split_gather, all_to_all or ring_attn)");
  if (mode == SequenceParallelMode::kSplitGather) {
    COLOSSAL_CHECK(tp > 1, "[hybrid] split_gather shards the sequence over the tensor-parallel group: it needs --tp > 1");
    COLOSSAL_CHECK(sp == 1 || sp == tp, "[hybrid] split_gather uses the tensor-parallel group for the sequence: --sp ",
                   sp, " must be 1 or equal to --tp ", tp);
  }
  (void)amp::parse_precision(precision);
}

HybridParallelPlugin::HybridParallelPlugin(Options options, int world_size) : options_(std::move(options)) {
  options_.validate();
  mode_ = parallel::parse_sequence_parallel_mode(options_.sp_mode);
  world_ = world_size > 0 ? world_size : dist::world_size();
  const int per_replica = options_.tp * sp_axis();
  COLOSSAL_CHECK(world_ % per_replica == 0, "[hybrid] the world of ", world_, " ranks does not divide by tp x sp = ",
                 per_replica, " (tp ", options_.tp, ", sp ", sp_axis(), ")");
}

int HybridParallelPlugin::sp_axis() const {
  return mode_ == SequenceParallelMode::kAllToAll || mode_ == SequenceParallelMode::kRingAttn ? options_.sp : 1;
}

void HybridParallelPlugin::check_model(const ModelLimits& m) const {
  const int tp = options_.tp;
  COLOSSAL_CHECK(m.attention_heads % tp == 0, "[hybrid] num_attention_heads ", m.attention_heads,
                 " does not divide by tp ", tp);
  if (m.kv_heads > 0)
    COLOSSAL_CHECK(m.kv_heads % tp == 0 || tp % m.kv_heads == 0, "[hybrid] num_key_value_heads ", m.kv_heads,
                   " and tp ", tp, ": one must divide the other");
  if (m.intermediate_size > 0)
    COLOSSAL_CHECK(m.intermediate_size % tp == 0, "[hybrid] intermediate_size ", m.intermediate_size,
                   " does not divide by tp ", tp);
  const int sp = mode_ == SequenceParallelMode::kSplitGather ? tp : sp_axis();
  if (mode_ == SequenceParallelMode::kAllToAll)
    COLOSSAL_CHECK((m.attention_heads / tp) % sp == 0, "[hybrid] all_to_all: ", m.attention_heads / tp,
                   " attention heads per tensor-parallel rank (", m.attention_heads, " / tp ", tp,
                   ") do not divide by sp ", sp);
  if (m.seq_len > 0 && sp > 1) {
    const int parts = mode_ == SequenceParallelMode::kRingAttn ? 2 * sp : sp;
    COLOSSAL_CHECK(m.seq_len % parts == 0, "[hybrid] ", options_.sp_mode, ": sequence length ", m.seq_len,
                   " does not divide by ", parts,
                   mode_ == SequenceParallelMode::kRingAttn ? " (2 x sp, the zigzag split)"
                   : mode_ == SequenceParallelMode::kSplitGather ? " (tp)" : " (sp)");
  }
}

const parallel::ParallelContext& HybridParallelPlugin::parallel_context() {
  if (mesh_) return context_;
  COLOSSAL_CHECK(dist::is_initialized(), "[hybrid] call colossal::dist::init() first");
  COLOSSAL_CHECK(world_ == dist::world_size(), "[hybrid] the plugin was sized for ", world_, " ranks, the world has ",
                 dist::world_size());
  mesh_.emplace(std::vector<dist::MeshAxis>{{"dp", dp_size()}, {"sp", sp_axis()}, {"tp", options_.tp}});
  context_.tp = mesh_->group("tp");
  context_.sp_mode = mode_;
  if (sp_axis() > 1) context_.sp = mesh_->group("sp");
  data_group_ = sp_axis() > 1 ? mesh_->group(std::vector<std::string>{"dp", "sp"}) : mesh_->group("dp");
  return context_;
}

std::pair<int, int> HybridParallelPlugin::data_parallel_rank_and_size() const {
  COLOSSAL_CHECK(mesh_.has_value(), "[hybrid] build the model with parallel_context() before boosting");
  return {mesh_->coord("dp"), dp_size()};
}

std::unique_ptr<ModelWrapper> HybridParallelPlugin::wrap_model(torch::nn::Module& model,
                                                               torch::optim::Optimizer& optimizer) {
  parallel_context();
  const auto specs = parallel::collect_shard_specs(model);
  // A model built without the plugin's groups would silently train as tp copies of itself.
  COLOSSAL_CHECK(options_.tp == 1 || !specs.empty(), "[hybrid] tp ", options_.tp,
                 ": the model holds no tensor-parallel slices; build it with plugin.parallel_context()");
  DataParallelScope scope;
  scope.group = data_group_;
  scope.gradient_divisor = dp_size();
  if (options_.tp > 1) {
    scope.norm_group = context_.tp;
    for (const auto& [name, spec] : specs)
      if (spec.dim >= 0) scope.split_over_norm_group.insert(name);
  }
  std::unique_ptr<ModelWrapper> inner;
  if (options_.zero_stage == 0) {
    DDPPlugin::Options o;
    o.precision = options_.precision;
    o.bucket_bytes = options_.bucket_bytes;
    o.scope = scope;
    inner = DDPPlugin(o).wrap_model(model, optimizer);
  } else {
    zero::LowLevelZeroPlugin::Options o;
    o.stage = options_.zero_stage;
    o.precision = options_.precision;
    o.bucket_elements = std::max<int64_t>(1, options_.bucket_bytes / 4);
    o.scope = scope;
    inner = zero::LowLevelZeroPlugin(o).wrap_model(model, optimizer);
  }
  // After the inner wrap (mixed precision may replace the parameters): gradients that each rank
  // computes only in part (kv heads kept whole, norms on sequence shards) are summed over tp
  // before the data-parallel reduction sees them.
  parallel::register_partial_gradient_hooks(model);
  return std::make_unique<HybridModel>(std::move(inner), specs, options_.tp, context_.tp_rank());
}

std::string HybridParallelPlugin::describe() const {
  std::string s = "tp " + std::to_string(options_.tp);
  if (mode_ != SequenceParallelMode::kNone)
    s += " x sp " + std::to_string(mode_ == SequenceParallelMode::kSplitGather ? options_.tp : options_.sp) + " (" +
         options_.sp_mode + ")";
  s += " x dp " + std::to_string(dp_size());
  s += options_.zero_stage ? ", ZeRO-" + std::to_string(options_.zero_stage) : ", DDP";
  return s;
}

}  // namespace colossal::booster
