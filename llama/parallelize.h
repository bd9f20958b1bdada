#pragma once
// LLaMA's own rules for being split: what a layout must divide. The model checks them when it is
// built (from its ParallelContext) and applications check them against the job's layout before
// any group is created (check_parallel), so a bad combination fails on every rank at once with
// the numbers that do not divide.
#include <cstdint>

#include "core/dist/parallel_dims.h"
#include "llama/config.h"

namespace colossal::llama {

/// The sizes a LLaMA model is split by.
struct ParallelSplit {
  int tp = 1;
  int sp = 1;  // ranks the sequence is sharded over (tp under split_gather)
  dist::SequenceParallelMode sp_mode = dist::SequenceParallelMode::kNone;
  int ep = 1;  // expert parallelism (a MoE model's experts shared out)
  int pp = 1;
  dist::TensorParallelMode tp_mode = dist::TensorParallelMode::k1d;  // 2d, 2.5d, 3d: tp ranks as a grid
  int tp_depth = 1;
};

/// Throws naming what does not divide (on a 2d/2.5d/3d grid: heads, kv heads, hidden and MLP widths
/// by the grid's blocks; no experts, sequence parallelism, pipeline stages or tied embeddings yet): attention heads by tp; kv heads and tp (one divides the
/// other); the MLP width by tp; under all_to_all the heads per tp rank by sp; and, when seq_len
/// is given, the sequence by the mode's split (sp, or 2 x sp for ring_attn's zigzag). A MoE model:
/// its experts by ep; ep > 1 needs experts; no split_gather with experts, nor sp with pp.
void check_parallel(const LlamaConfig& config, const ParallelSplit& split, int64_t seq_len = 0);
/// The same against a job's layout (no communication).
void check_parallel(const LlamaConfig& config, const dist::ParallelDims& dims, int64_t seq_len = 0);

}  // namespace colossal::llama
