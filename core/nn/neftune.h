#pragma once
// NEFTune (Jain et al., "NEFTune: Noisy Embeddings Improve Instruction Finetuning", 2023): during
// fine-tuning, uniform noise is added to the token embeddings, scaled so its size does not grow
// with the sequence: each value in [-m, m] with m = alpha / sqrt(seq_len x hidden) (transformers'
// and TRL's neftune_noise_alpha, whose seq_len is the padded batch length).
#include <cstdint>

#include <torch/types.h>

namespace colossal::nn {

/// Noise for embeddings [batch, seq_len, hidden] (fp32, on the CPU), drawn from a generator seeded
/// with `seed`: the same seed gives the same noise on every rank.
torch::Tensor neftune_noise(at::IntArrayRef shape, double alpha, uint64_t seed);

}  // namespace colossal::nn
