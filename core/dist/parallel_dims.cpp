#include "core/dist/parallel_dims.h"

#include "core/common/check.h"
#include "core/dist/runtime.h"

namespace colossal::dist {

const char* to_string(Axis axis) {
  switch (axis) {
    case Axis::kPp: return "pp";
    case Axis::kDp: return "dp";
    case Axis::kEdp: return "edp";
    case Axis::kEp: return "ep";
    case Axis::kSp: return "sp";
    case Axis::kTp: return "tp";
  }
  return "?";
}

const char* to_string(SequenceParallelMode mode) {
  switch (mode) {
    case SequenceParallelMode::kNone: return "none";
    case SequenceParallelMode::kSplitGather: return "split_gather";
    case SequenceParallelMode::kAllToAll: return "all_to_all";
    case SequenceParallelMode::kRingAttn: return "ring_attn";
  }
  return "?";
}

SequenceParallelMode parse_sequence_parallel_mode(const std::string& name) {
  if (name == "none" || name.empty()) return SequenceParallelMode::kNone;
  if (name == "split_gather") return SequenceParallelMode::kSplitGather;
  if (name == "all_to_all") return SequenceParallelMode::kAllToAll;
  if (name == "ring_attn") return SequenceParallelMode::kRingAttn;
  COLOSSAL_FAIL("[layout] sp_mode '", name, "': expected none, split_gather, all_to_all or ring_attn");
}

const char* to_string(TensorParallelMode mode) {
  switch (mode) {
    case TensorParallelMode::k1d: return "1d";
    case TensorParallelMode::k2d: return "2d";
    case TensorParallelMode::k2p5d: return "2.5d";
    case TensorParallelMode::k3d: return "3d";
  }
  return "?";
}

TensorParallelMode parse_tensor_parallel_mode(const std::string& name) {
  if (name == "1d" || name.empty()) return TensorParallelMode::k1d;
  if (name == "2d") return TensorParallelMode::k2d;
  if (name == "2.5d") return TensorParallelMode::k2p5d;
  if (name == "3d") return TensorParallelMode::k3d;
  COLOSSAL_FAIL("[layout] tp_mode '", name, "': expected 1d, 2d, 2.5d or 3d");
}

namespace {

// The integer r with r^power == n, or 0 when there is none.
int integer_root(int n, int power) {
  for (int r = 1;; ++r) {
    int64_t p = 1;
    for (int i = 0; i < power; ++i) p *= r;
    if (p == n) return r;
    if (p > n) return 0;
  }
}

std::string powers_list(int power) {
  std::string s;
  for (int r = 1; r <= 4; ++r) {
    int p = 1;
    for (int i = 0; i < power; ++i) p *= r;
    s += std::to_string(p) + ", ";
  }
  return s + "...";
}

}  // namespace

TensorGridShape tensor_grid_shape(TensorParallelMode mode, int tp, int depth) {
  COLOSSAL_CHECK(tp >= 1, "[layout] tp: expected >= 1, got ", tp);
  COLOSSAL_CHECK(depth >= 1, "[layout] tp_depth: expected >= 1, got ", depth);
  COLOSSAL_CHECK(depth == 1 || mode == TensorParallelMode::k2p5d, "[layout] tp_depth ", depth,
                 " is for tp_mode 2.5d only (got tp_mode ", to_string(mode), ")");
  switch (mode) {
    case TensorParallelMode::k1d: return {tp, 1, tp};
    case TensorParallelMode::k2d: {
      const int q = integer_root(tp, 2);
      COLOSSAL_CHECK(q > 0, "[layout] tp_mode 2d lays the tp ranks out as a q x q grid: tp ", tp,
                     " is not a square (", powers_list(2), ")");
      return {q, 1, q};
    }
    case TensorParallelMode::k2p5d: {
      COLOSSAL_CHECK(tp % depth == 0, "[layout] tp_mode 2.5d lays the tp ranks out as q x q x depth: tp ", tp,
                     " does not divide by tp_depth ", depth);
      const int q = integer_root(tp / depth, 2);
      COLOSSAL_CHECK(q > 0, "[layout] tp_mode 2.5d lays the tp ranks out as q x q x depth: tp ", tp, " / tp_depth ",
                     depth, " = ", tp / depth, " is not a square (", powers_list(2), ")");
      return {q, depth, q};
    }
    case TensorParallelMode::k3d: {
      const int q = integer_root(tp, 3);
      COLOSSAL_CHECK(q > 0, "[layout] tp_mode 3d lays the tp ranks out as a q x q x q cube: tp ", tp,
                     " is not a cube (", powers_list(3), ")");
      return {q, q, q * q};
    }
  }
  return {tp, 1, tp};
}

void ParallelDims::Options::validate() const {
  for (auto [name, v] : {std::pair{"pp", pp}, std::pair{"sp", sp}, std::pair{"tp", tp}, std::pair{"ep", ep}})
    COLOSSAL_CHECK(v >= 1, "[layout] ", name, ": expected >= 1, got ", v);
  COLOSSAL_CHECK(dp >= 0, "[layout] dp: expected >= 1 (or 0: what the world leaves), got ", dp);
  const auto mode = parse_sequence_parallel_mode(sp_mode);
  COLOSSAL_CHECK(sp == 1 || mode != SequenceParallelMode::kNone, "[layout] sp ", sp,
                 " needs an sp_mode (split_gather, all_to_all or ring_attn)");
  if (mode == SequenceParallelMode::kSplitGather) {
    COLOSSAL_CHECK(tp > 1, "[layout] split_gather shards the sequence over the tensor-parallel ranks: it needs tp > 1");
    COLOSSAL_CHECK(sp == 1 || sp == tp, "[layout] split_gather uses the tensor-parallel ranks for the sequence: sp ",
                   sp, " must be 1 or equal to tp ", tp);
  }
  const auto tp_grid = parse_tensor_parallel_mode(tp_mode);
  (void)tensor_grid_shape(tp_grid, tp, tp_depth);
  COLOSSAL_CHECK(tp_grid == TensorParallelMode::k1d || mode != SequenceParallelMode::kSplitGather,
                 "[layout] split_gather shards the sequence over 1d tensor parallelism; tp_mode ", tp_mode,
                 " splits the batch over its grid instead (use sp_mode all_to_all or ring_attn, or tp_mode 1d)");
  if (dp > 0)
    COLOSSAL_CHECK(dp % ep == 0, "[layout] ep ", ep, " does not divide dp ", dp,
                   " (expert parallelism is carved out of the data-parallel ranks)");
}

std::string ParallelDims::Options::describe() const {
  std::string s = "pp " + std::to_string(pp) + " x dp " + (dp ? std::to_string(dp) : std::string("auto")) +
                  " x sp " + std::to_string(sp) + " x tp " + std::to_string(tp);
  if (ep > 1) s += " (ep " + std::to_string(ep) + ")";
  if (sp_mode != "none") s += ", sp_mode " + sp_mode;
  if (tp_mode != "1d") s += ", tp_mode " + tp_mode + (tp_depth > 1 ? " (depth " + std::to_string(tp_depth) + ")" : "");
  if (fp8_communication) s += ", fp8 communication";
  return s;
}

namespace {

MeshLayout make_layout(int pp, int dp, int ep, int sp, int tp) {
  return MeshLayout({{"pp", pp}, {"edp", dp / ep}, {"ep", ep}, {"sp", sp}, {"tp", tp}});
}

}  // namespace

ParallelDims::ParallelDims(Options options, int world_size)
    : options_(std::move(options)), layout_(make_layout(1, 1, 1, 1, 1)) {
  options_.validate();
  world_ = world_size > 0 ? world_size : dist::world_size();
  mode_ = parse_sequence_parallel_mode(options_.sp_mode);
  sp_axis_ = mode_ == SequenceParallelMode::kAllToAll || mode_ == SequenceParallelMode::kRingAttn ? options_.sp : 1;
  const int others = options_.pp * sp_axis_ * options_.tp;
  const std::string product = "pp(" + std::to_string(options_.pp) + ") * sp(" + std::to_string(sp_axis_) +
                              ") * tp(" + std::to_string(options_.tp) + ")";
  if (options_.dp == 0) {
    COLOSSAL_CHECK(world_ % others == 0, "[layout] the world of ", world_, " ranks does not divide by ", product,
                   " = ", others);
    dp_ = world_ / others;
    COLOSSAL_CHECK(dp_ % options_.ep == 0, "[layout] ep ", options_.ep, " does not divide dp ", dp_, " (= ", world_,
                   " ranks / ", product, "; expert parallelism is carved out of the data-parallel ranks)");
  } else {
    dp_ = options_.dp;
    COLOSSAL_CHECK(others * dp_ == world_, "[layout] invalid parallel dims: pp(", options_.pp, ") * dp(", dp_, ") * sp(",
                   sp_axis_, ") * tp(", options_.tp, ") = ", others * dp_, " != world size ", world_);
  }
  layout_ = make_layout(options_.pp, dp_, options_.ep, sp_axis_, options_.tp);
  rank_ = dist::is_initialized() && world_ == dist::world_size() ? dist::rank() : 0;
}

int ParallelDims::size(Axis axis) const {
  switch (axis) {
    case Axis::kPp: return pp();
    case Axis::kDp: return dp();
    case Axis::kEdp: return edp();
    case Axis::kEp: return ep();
    case Axis::kSp: return sp();
    case Axis::kTp: return tp();
  }
  return 1;
}

int ParallelDims::sequence_parallel_size() const {
  switch (mode_) {
    case SequenceParallelMode::kNone: return 1;
    case SequenceParallelMode::kSplitGather: return options_.tp;
    default: return sp_axis_;
  }
}

std::vector<std::string> ParallelDims::mesh_axes(std::initializer_list<Axis> axes) const {
  std::vector<std::string> names;
  for (Axis a : axes) {
    if (a == Axis::kDp) {
      names.push_back("edp");
      names.push_back("ep");
    } else {
      names.push_back(to_string(a));
    }
  }
  return names;
}

std::vector<int> ParallelDims::group_ranks(std::initializer_list<Axis> axes, int rank) const {
  return layout_.group_ranks(mesh_axes(axes), rank);
}

int ParallelDims::coord(Axis axis, int rank) const {
  auto c = layout_.coords_of(rank);
  if (axis == Axis::kDp) return c[layout_.axis_index("edp")] * ep() + c[layout_.axis_index("ep")];
  return c[layout_.axis_index(to_string(axis))];
}

int ParallelDims::coord(Axis axis) const { return coord(axis, rank_); }

Group ParallelDims::group(Axis axis) const { return group({axis}); }

Group ParallelDims::group(std::initializer_list<Axis> axes) const {
  COLOSSAL_CHECK(dist::is_initialized(), "[layout] call colossal::dist::init() before asking for groups");
  COLOSSAL_CHECK(world_ == dist::world_size(), "[layout] the layout was sized for ", world_, " ranks; the world has ",
                 dist::world_size());
  auto names = mesh_axes(axes);
  // The world group itself when the axes span every rank (no second backend for the same ranks).
  if (static_cast<int>(layout_.group_ranks(names, rank_).size()) == world_) return world_group();
  if (!mesh_) {
    std::vector<MeshAxis> mesh_axes_list;
    for (const auto& a : layout_.axes()) mesh_axes_list.push_back(a);
    mesh_.emplace(std::move(mesh_axes_list));
  }
  return mesh_->group(names);
}

Group ParallelDims::sequence_group() const {
  switch (mode_) {
    case SequenceParallelMode::kNone: return Group();
    case SequenceParallelMode::kSplitGather: return group(Axis::kTp);
    default: return group(Axis::kSp);
  }
}

Group ParallelDims::gradient_group() const {
  return sp_axis_ > 1 ? group({Axis::kDp, Axis::kSp}) : group(Axis::kDp);
}

Group ParallelDims::expert_gradient_group() const {
  return sp_axis_ > 1 ? group({Axis::kEdp, Axis::kSp}) : group(Axis::kEdp);
}

std::string ParallelDims::describe() const {
  std::string s = "pp " + std::to_string(pp()) + " x dp " + std::to_string(dp());
  if (ep() > 1) s += " (ep " + std::to_string(ep()) + " x edp " + std::to_string(edp()) + ")";
  if (mode_ != SequenceParallelMode::kNone)
    s += " x sp " + std::to_string(sequence_parallel_size()) + " (" + to_string(mode_) + ")";
  s += " x tp " + std::to_string(tp());
  if (const auto m = tp_mode(); m != TensorParallelMode::k1d) {
    const auto g = tensor_grid_shape(m, tp(), options_.tp_depth);
    s += std::string(" (") + to_string(m) + ": " + std::to_string(g.q) + "x" + std::to_string(g.q) +
         (m == TensorParallelMode::k2d ? "" : "x" + std::to_string(g.depth)) + ")";
  }
  return s;
}

}  // namespace colossal::dist
