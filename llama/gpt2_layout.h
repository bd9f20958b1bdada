#pragma once
// GPT-2 checkpoints in our decoder's names. transformers' GPT-2 stores its linear layers as
// Conv1D ([in, out], y = x W + b) under its own names (transformer.h.N.attn.c_attn, ...), with
// q, k and v fused in one c_attn matrix; our model keeps LLaMA's names and layout
// (model.layers.N.self_attn.q_proj, [out, in]), so the one parallel plan, pipeline split and
// inference engine serve GPT-2 too. Reading presents the file under our names (views: the
// transposes and the q/k/v split cost nothing until copied); writing produces GPT-2's.
#include "core/checkpoint/safetensors.h"
#include "llama/config.h"

namespace colossal::llama {

/// Presents a GPT-2 checkpoint (with or without the "transformer." prefix; the attention-mask
/// buffers of old files are left out) under our parameter names.
void adapt_gpt2_checkpoint(checkpoint::CheckpointReader& reader, const LlamaConfig& config);

/// Our named weights as GPT-2's (for a directory transformers opens as GPT2LMHeadModel).
checkpoint::NamedTensors to_gpt2_checkpoint(const checkpoint::NamedTensors& weights, const LlamaConfig& config);

}  // namespace colossal::llama
