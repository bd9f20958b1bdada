#pragma once
// Where a data-parallel plugin (DDP, ZeRO-1/2) synchronises gradients when it runs inside a
// larger mesh (the hybrid plugin): its group, what the summed gradients are divided by, and how
// a gradient norm counts parameters that tensor parallelism splits. The default is plain data
// parallelism over the world.
//
// Sequence parallelism over its own axis (all_to_all, ring_attn) needs the divisor: each rank's
// gradients cover its own tokens, so they are summed over sp and averaged over dp, i.e. reduced
// over the dp x sp group and divided by dp.
#include <ATen/core/Tensor.h>

#include <map>
#include <set>
#include <string>

#include "core/dist/collectives.h"

namespace colossal::parallel {

struct DataParallelScope {
  dist::Group group;          // not a member (default): the world
  int gradient_divisor = 0;   // 0: the group's size (an average)
  dist::Group norm_group;     // tensor parallelism: gradient norms are summed over it too
  // Parameters whose ranks of norm_group hold different slices; every other parameter is the
  // same on all of them and counted once, by its rank 0.
  std::set<std::string> split_over_norm_group;
  // Of those, blocks of a 2D/2.5D/3D grid that several ranks of norm_group hold alike (norm
  // weights, biases, 2.5D's depth layers): counted by the first rank of these replicas only.
  std::map<std::string, dist::Group> block_replicas;
  dist::Group pipeline_group;  // pipeline parallelism: each stage holds other parameters, so
                               // gradient norms are summed over the stages too
  // Expert parallelism: each ep rank holds other experts. Their gradients are reduced over the
  // replicas that hold the same ones (expert_group: edp, x sp as above) with the same divisor,
  // and gradient norms add the other ep ranks' experts (expert_norm_group: ep).
  dist::Group expert_group;
  dist::Group expert_norm_group;
  std::set<std::string> expert_parameters;

  dist::Group resolved_group() const;
  /// The group `expert` parameters are reduced over (resolved_group() for dense ones).
  dist::Group reduction_group(bool expert) const;
  bool is_expert(const std::string& name) const { return expert_parameters.count(name) > 0; }
  /// Starts the reduction of a flat gradient buffer over reduction_group(expert): an average, or
  /// a sum divided by gradient_divisor.
  dist::Handle reduce_async(at::Tensor& flat, bool expert = false) const;
  /// Reduce-scatter with the same division (ZeRO-2).
  dist::Handle reduce_scatter_async(at::Tensor& out, const at::Tensor& in, bool expert = false) const;
  /// Whether this rank adds `name`'s gradient to the norm (false for a replicated parameter on
  /// ranks other than norm_group's first).
  bool counts_in_norm(const std::string& name) const;
  /// Whether a gradient norm needs other ranks' parts (tensor or pipeline parallelism).
  bool norm_spans_ranks() const;
  /// The local sum of |g|^p (or the max, for p = inf) combined over norm_group and the pipeline;
  /// `local_expert`, the experts' part, is combined over expert_norm_group first.
  double combine_over_norm_group(double local, bool inf_norm, double local_expert = 0) const;
};

}  // namespace colossal::parallel
