#include "core/parallel/tensor/grid/tensor_grid.h"

#include <algorithm>
#include <functional>

#include "core/common/check.h"
#include "core/dist/runtime.h"

namespace colossal::parallel {
namespace {

// One kind of subgroup of the tp grid: every member of the tp group walks all of them in the
// same order (creating a group is collective among its members), keeping the one it is in.
// `members(fixed)` lists, for one value of the fixed coordinates, the tp ranks in group order.
dist::Group grid_group(const dist::Group& tp, const std::string& name, int count,
                       const std::function<std::vector<int>(int)>& members) {
  dist::Group mine;
  for (int i = 0; i < count; ++i) {
    std::vector<int> ranks;
    for (int t : members(i)) ranks.push_back(tp.global_rank(t));
    auto g = dist::new_group(ranks, tp.name() + "." + name);
    if (g.is_member()) mine = g;
  }
  COLOSSAL_CHECK(mine.is_member(), "[tp] ", name, ": this rank is in none of the grid's groups");
  return mine;
}

}  // namespace

TensorGrid TensorGrid::create(const dist::Group& tp, TensorParallelMode mode, int depth) {
  COLOSSAL_CHECK(tp.is_member(), "[tp] a tensor grid is built by the members of the tp group");
  COLOSSAL_CHECK(mode != TensorParallelMode::k1d, "[tp] tp_mode 1d has no grid (its layers are ParallelLinear)");
  const auto shape = dist::tensor_grid_shape(mode, tp.size(), depth);
  TensorGrid g;
  g.mode_ = mode;
  g.q_ = shape.q;
  g.depth_ = shape.depth;
  g.weight_out_parts_ = shape.weight_out_parts;
  g.size_ = tp.size();
  g.all_ = tp;
  const int q = shape.q, d = shape.depth, t = tp.rank();
  g.coord_[0] = t / (q * q);  // 2D/2.5D: depth layer k; 3D: a
  g.coord_[1] = t / q % q;    // row r; b
  g.coord_[2] = t % q;        // column c; c
  auto rank_of = [q](int x0, int x1, int x2) { return x0 * q * q + x1 * q + x2; };
  // For each kind, the group's members with two coordinates fixed (enumerated as i) and the
  // remaining one (or two, for planes) running in order.
  if (mode == TensorParallelMode::k3d) {
    auto axis = [&](int which) {
      return grid_group(tp, std::string("axis") + "abc"[which], q * q, [&, which](int i) {
        std::vector<int> m;
        for (int v = 0; v < q; ++v) {
          int x[3];
          x[which] = v;
          x[(which + 1) % 3] = which == 0 ? i / q : (which == 1 ? i % q : i / q);
          x[(which + 2) % 3] = which == 0 ? i % q : (which == 1 ? i / q : i % q);
          m.push_back(rank_of(x[0], x[1], x[2]));
        }
        return m;
      });
    };
    for (int a = 0; a < 3; ++a) g.axis_[a] = axis(a);
    // Planes: (a, b) with c fixed (stream rows), (a, c) with b fixed (inner rows), a major.
    auto plane_ab = grid_group(tp, "plane_ab", q, [&](int c) {
      std::vector<int> m;
      for (int a = 0; a < q; ++a)
        for (int b = 0; b < q; ++b) m.push_back(rank_of(a, b, c));
      return m;
    });
    auto plane_ac = grid_group(tp, "plane_ac", q, [&](int b) {
      std::vector<int> m;
      for (int a = 0; a < q; ++a)
        for (int c = 0; c < q; ++c) m.push_back(rank_of(a, b, c));
      return m;
    });
    // A weight's output rows: q^2 blocks, the output feature axis major and a minor (column
    // layers: (b, a) with c fixed; row layers: (c, a) with b fixed).
    g.weight_rows_[0] = grid_group(tp, "weight_rows_ba", q, [&](int c) {
      std::vector<int> m;
      for (int b = 0; b < q; ++b)
        for (int a = 0; a < q; ++a) m.push_back(rank_of(a, b, c));
      return m;
    });
    g.weight_rows_[1] = grid_group(tp, "weight_rows_ca", q, [&](int b) {
      std::vector<int> m;
      for (int c = 0; c < q; ++c)
        for (int a = 0; a < q; ++a) m.push_back(rank_of(a, b, c));
      return m;
    });
    g.stream_ = {g.axis_[2], plane_ab};
    g.inner_ = {g.axis_[1], plane_ac};
    g.column_ = {.input_gather = g.axis_[1], .input_dim = 0, .weight_gather = g.axis_[0], .weight_dim = 0,
                 .output_scatter = g.axis_[2], .weight_replicas = {}, .in = g.stream_, .out = g.inner_};
    g.row_ = {.input_gather = g.axis_[2], .input_dim = 0, .weight_gather = g.axis_[0], .weight_dim = 0,
              .output_scatter = g.axis_[1], .weight_replicas = {}, .in = g.inner_, .out = g.stream_};
    return g;
  }
  // 2D and 2.5D: (k, r, c).
  auto row = grid_group(tp, "row", q * d, [&](int i) {
    std::vector<int> m;
    for (int c = 0; c < q; ++c) m.push_back(rank_of(i / q, i % q, c));
    return m;
  });
  auto column = grid_group(tp, "column", q * d, [&](int i) {
    std::vector<int> m;
    for (int r = 0; r < q; ++r) m.push_back(rank_of(i / q, r, i % q));
    return m;
  });
  auto depth_group = grid_group(tp, "depth", q * q, [&](int i) {
    std::vector<int> m;
    for (int k = 0; k < d; ++k) m.push_back(rank_of(k, i / q, i % q));
    return m;
  });
  auto rows = d == 1 ? column : grid_group(tp, "rows", q, [&](int c) {
    std::vector<int> m;
    for (int k = 0; k < d; ++k)
      for (int r = 0; r < q; ++r) m.push_back(rank_of(k, r, c));
    return m;
  });
  g.axis_[0] = row;
  g.axis_[1] = column;
  g.axis_[2] = depth_group;
  g.stream_ = {row, rows};
  g.inner_ = g.stream_;
  g.column_ = {.input_gather = row, .input_dim = -1, .weight_gather = column, .weight_dim = 1,
               .output_scatter = {}, .weight_replicas = d > 1 ? depth_group : dist::Group(), .in = g.stream_,
               .out = g.stream_};
  g.row_ = g.column_;
  return g;
}

ShardSpec grid_shard_spec(const GridBlock& block, const std::vector<int64_t>& shape, int64_t real_rows) {
  ShardSpec s;
  s.replicas = block.replicas;
  if (block.cuts.empty()) return s;
  COLOSSAL_CHECK(block.cuts.size() <= 2, "[tp] a grid block cut along ", block.cuts.size(), " dimensions");
  const auto& first = block.cuts[0];
  const int64_t padded = shape.at(first.dim), part = padded / first.parts;
  COLOSSAL_CHECK(padded % first.parts == 0, "[tp] dimension ", first.dim, " of ", c10::IntArrayRef(shape),
                 " does not divide into ", first.parts, " grid blocks");
  s.dim = first.dim;
  s.group = first.group;
  s.full_size = real_rows >= 0 && first.dim == 0 ? real_rows : padded;
  s.local_start = first.index * part;
  s.local_size = std::clamp<int64_t>(s.full_size - s.local_start, 0, part);
  if (block.cuts.size() == 2) {
    const auto& second = block.cuts[1];
    const int64_t n = shape.at(second.dim);
    COLOSSAL_CHECK(n % second.parts == 0, "[tp] dimension ", second.dim, " of ", c10::IntArrayRef(shape),
                   " does not divide into ", second.parts, " grid blocks");
    s.dim2 = second.dim;
    s.group2 = second.group;
    s.full_size2 = n;
    s.local_size2 = n / second.parts;
    s.local_start2 = second.index * s.local_size2;
  }
  return s;
}

GridBlock TensorGrid::weight_block(bool column) const {
  GridBlock b;
  if (size_ == 1) return b;
  if (mode_ == TensorParallelMode::k3d) {
    // Rows of the output (feature axis of the output layout, then axis a), columns of the input.
    const int out_axis = column ? 1 : 2, in_axis = column ? 2 : 1;
    b.cuts = {{0, q_ * q_, coord_[out_axis] * q_ + coord_[0], weight_rows_[column ? 0 : 1]},
              {1, q_, coord_[in_axis], axis_[in_axis]}};
    return b;
  }
  // 2D: output block c (the row group's order), input block r (the column group's).
  b.cuts = {{0, q_, coord_[2], axis_[0]}, {1, q_, coord_[1], axis_[1]}};
  b.replicas = linear(column).weight_replicas;
  return b;
}

GridBlock TensorGrid::bias_block(bool column) const { return feature_block(linear(column).out); }

GridBlock TensorGrid::feature_block(const ActivationLayout& layout) const {
  GridBlock b;
  if (size_ == 1) return b;
  b.cuts = {{0, layout.feature_parts(), layout.feature_index(), layout.features}};
  b.replicas = layout.rows;
  return b;
}

GridBlock TensorGrid::embedding_block() const {
  GridBlock b;
  if (size_ == 1) return b;
  b.cuts = {{0, stream_.row_parts(), stream_.row_index(), stream_.rows},
            {1, stream_.feature_parts(), stream_.feature_index(), stream_.features}};
  return b;
}

GridBlock TensorGrid::hidden_embedding_block() const {
  GridBlock b;
  if (size_ == 1) return b;
  b.cuts = {{1, stream_.feature_parts(), stream_.feature_index(), stream_.features}};
  b.replicas = stream_.rows;
  return b;
}

std::string TensorGrid::describe() const {
  if (mode_ == TensorParallelMode::k1d) return "no grid (one process)";
  const std::string side = std::to_string(q_);
  if (mode_ == TensorParallelMode::k3d)
    return std::string("3d grid ") + side + "x" + side + "x" + side + " (a " + std::to_string(coord_[0]) + ", b " +
           std::to_string(coord_[1]) + ", c " + std::to_string(coord_[2]) + ")";
  std::string s = std::string(dist::to_string(mode_)) + " grid " + side + "x" + side;
  if (mode_ == TensorParallelMode::k2p5d) s += "x" + std::to_string(depth_);
  s += " (row " + std::to_string(coord_[1]) + ", column " + std::to_string(coord_[2]);
  if (mode_ == TensorParallelMode::k2p5d) s += ", depth " + std::to_string(coord_[0]);
  return s + ")";
}

TensorGrid TensorGrid::with_fp8_payloads() const {
  TensorGrid g(*this);
  for (GridLinearComm* c : {&g.column_, &g.row_}) {
    c->input_gather = c->input_gather.with_fp8_payloads();
    c->output_scatter = c->output_scatter.with_fp8_payloads();
  }
  return g;
}

}  // namespace colossal::parallel
