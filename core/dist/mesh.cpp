#include "core/dist/mesh.h"

#include <algorithm>
#include <set>

#include "core/common/check.h"
#include "core/dist/runtime.h"

namespace colossal::dist {

MeshLayout::MeshLayout(std::vector<MeshAxis> axes) : axes_(std::move(axes)) {
  COLOSSAL_CHECK(!axes_.empty(), "[mesh] expected at least one axis");
  std::set<std::string> names;
  for (const auto& a : axes_) {
    COLOSSAL_CHECK(!a.name.empty(), "[mesh] axis names must not be empty");
    COLOSSAL_CHECK(names.insert(a.name).second, "[mesh] axis '", a.name, "' appears twice");
    COLOSSAL_CHECK(a.size >= 1, "[mesh] axis '", a.name, "': expected size >= 1, got ", a.size);
  }
  strides_.assign(axes_.size(), 1);
  for (int i = static_cast<int>(axes_.size()) - 2; i >= 0; --i) {
    strides_[i] = strides_[i + 1] * axes_[i + 1].size;
  }
  num_ranks_ = strides_[0] * axes_[0].size;
}

int MeshLayout::axis_index(const std::string& name) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name == name) return static_cast<int>(i);
  COLOSSAL_FAIL("[mesh] no axis named '", name, "' in mesh ", describe());
}

std::vector<int> MeshLayout::coords_of(int rank) const {
  COLOSSAL_CHECK(rank >= 0 && rank < num_ranks_, "[mesh] rank ", rank, " is outside mesh ",
                 describe(), " of ", num_ranks_, " ranks");
  std::vector<int> c(axes_.size());
  for (size_t i = 0; i < axes_.size(); ++i) c[i] = (rank / strides_[i]) % axes_[i].size;
  return c;
}

int MeshLayout::rank_of(const std::vector<int>& coords) const {
  COLOSSAL_CHECK(coords.size() == axes_.size(), "[mesh] expected ", axes_.size(),
                 " coordinates, got ", coords.size());
  int r = 0;
  for (size_t i = 0; i < axes_.size(); ++i) {
    COLOSSAL_CHECK(coords[i] >= 0 && coords[i] < axes_[i].size, "[mesh] coordinate ", coords[i],
                   " on axis '", axes_[i].name, "' is outside [0, ", axes_[i].size, ")");
    r += coords[i] * strides_[i];
  }
  return r;
}

std::vector<int> MeshLayout::sorted_axis_indices(const std::vector<std::string>& along) const {
  COLOSSAL_CHECK(!along.empty(), "[mesh] a group needs at least one axis");
  std::vector<int> idx;
  for (const auto& name : along) idx.push_back(axis_index(name));
  std::sort(idx.begin(), idx.end());
  COLOSSAL_CHECK(std::adjacent_find(idx.begin(), idx.end()) == idx.end(),
                 "[mesh] an axis is listed twice in a group request");
  return idx;
}

std::vector<int> MeshLayout::group_ranks(const std::vector<std::string>& along, int rank) const {
  auto idx = sorted_axis_indices(along);
  auto base = coords_of(rank);
  int count = 1;
  for (int i : idx) count *= axes_[i].size;
  std::vector<int> members;
  members.reserve(count);
  // Enumerate the selected axes' coordinates row-major (mesh order), others fixed.
  for (int k = 0; k < count; ++k) {
    auto c = base;
    int rem = k;
    for (int j = static_cast<int>(idx.size()) - 1; j >= 0; --j) {
      c[idx[j]] = rem % axes_[idx[j]].size;
      rem /= axes_[idx[j]].size;
    }
    members.push_back(rank_of(c));
  }
  return members;
}

std::vector<std::vector<int>> MeshLayout::all_groups(const std::vector<std::string>& along) const {
  std::vector<std::vector<int>> groups;
  std::vector<bool> covered(num_ranks_, false);
  for (int r = 0; r < num_ranks_; ++r) {
    if (covered[r]) continue;
    auto g = group_ranks(along, r);
    for (int m : g) covered[m] = true;
    groups.push_back(std::move(g));
  }
  return groups;
}

std::string MeshLayout::describe() const {
  std::string s;
  for (size_t i = 0; i < axes_.size(); ++i)
    s += (i ? " x " : "") + axes_[i].name + "=" + std::to_string(axes_[i].size);
  return s;
}

ProcessGroupMesh::ProcessGroupMesh(std::vector<MeshAxis> axes) : layout_(std::move(axes)) {
  int world = world_size();
  if (layout_.num_ranks() != world) {
    std::string product;
    for (const auto& a : layout_.axes())
      product += (product.empty() ? "" : " * ") + a.name + "(" + std::to_string(a.size) + ")";
    COLOSSAL_FAIL("[mesh] invalid mesh: ", product, " = ", layout_.num_ranks(),
                  " != world size ", world);
  }
  rank_ = rank();
  coords_ = layout_.coords_of(rank_);
}

int ProcessGroupMesh::coord(const std::string& axis) const {
  return coords_[layout_.axis_index(axis)];
}

Group ProcessGroupMesh::group(const std::string& axis) { return group(std::vector<std::string>{axis}); }

Group ProcessGroupMesh::group(const std::vector<std::string>& axes) {
  // Canonical name in mesh order, so {tp, dp} and {dp, tp} are the same group.
  std::vector<std::string> ordered;
  for (const auto& a : layout_.axes())
    if (std::find(axes.begin(), axes.end(), a.name) != axes.end()) ordered.push_back(a.name);
  (void)layout_.group_ranks(axes, rank_);  // validates the names
  std::string name;
  for (const auto& a : ordered) name += (name.empty() ? "" : "+") + a;
  if (auto it = cache_.find(name); it != cache_.end()) return it->second;
  Group mine;
  for (const auto& members : layout_.all_groups(ordered)) {
    Group g = new_group(members, name);
    if (g.is_member()) mine = g;
  }
  cache_[name] = mine;
  return mine;
}

}  // namespace colossal::dist
