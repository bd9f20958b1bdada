#pragma once
// ProcessGroupMesh: the world laid out as a grid of named axes, e.g. {pp:2, dp:2, tp:2}.
// Axes are ordered outermost first, as in ColossalAI (pp, dp, sp, tp: tp innermost, so
// tensor-parallel peers are neighbouring ranks). rank = sum_i coord[i] * stride[i], row-major.
//
// A group "along" a set of axes holds the ranks that differ only in those axes' coordinates:
// along {tp} on {dp:2, tp:2}: {0,1} and {2,3}; along {dp}: {0,2} and {1,3}; along {dp,tp}:
// everyone. Groups are created on first request, all of an axis set at once and in the same
// order on every rank, and cached.
#include <map>
#include <string>
#include <vector>

#include "core/dist/group.h"

namespace colossal::dist {

struct MeshAxis {
  std::string name;
  int size = 1;
};

/// The pure arithmetic of a mesh (no communication), so it can be tested exhaustively.
class MeshLayout {
 public:
  /// Throws when names repeat or are empty, or a size is < 1.
  explicit MeshLayout(std::vector<MeshAxis> axes);

  const std::vector<MeshAxis>& axes() const { return axes_; }
  int num_ranks() const { return num_ranks_; }
  int axis_index(const std::string& name) const;  // throws listing the axes on a bad name
  int axis_size(const std::string& name) const { return axes_[axis_index(name)].size; }

  std::vector<int> coords_of(int rank) const;
  int rank_of(const std::vector<int>& coords) const;

  /// Members of the group along `along` that contains `rank`, ordered by their coordinates on
  /// those axes (mesh order, row-major): group rank i is the i-th member.
  std::vector<int> group_ranks(const std::vector<std::string>& along, int rank) const;
  /// Every group along `along`, ordered by the smallest member: a partition of the world.
  std::vector<std::vector<int>> all_groups(const std::vector<std::string>& along) const;

  /// "pp=2 x dp=2 x tp=2"
  std::string describe() const;

 private:
  std::vector<int> sorted_axis_indices(const std::vector<std::string>& along) const;

  std::vector<MeshAxis> axes_;
  std::vector<int> strides_;
  int num_ranks_ = 1;
};

class ProcessGroupMesh {
 public:
  /// The product of the axis sizes must equal dist::world_size(); the error says what does not
  /// multiply to what.
  explicit ProcessGroupMesh(std::vector<MeshAxis> axes);

  const MeshLayout& layout() const { return layout_; }
  int size(const std::string& axis) const { return layout_.axis_size(axis); }
  /// This rank's coordinate on an axis.
  int coord(const std::string& axis) const;
  const std::vector<int>& coords() const { return coords_; }

  /// This rank's group along one axis or a set of axes.
  Group group(const std::string& axis);
  Group group(const std::vector<std::string>& axes);

 private:
  MeshLayout layout_;
  int rank_ = 0;
  std::vector<int> coords_;
  std::map<std::string, Group> cache_;
};

}  // namespace colossal::dist
