#include "llama/parallelize.h"

#include "core/common/check.h"

namespace colossal::llama {

void check_parallel(const LlamaConfig& c, const ParallelSplit& s, int64_t seq_len) {
  using Mode = dist::SequenceParallelMode;
  const int tp = s.tp;
  const int64_t heads = c.num_attention_heads, kv = c.num_key_value_heads;
  if (s.tp_mode != dist::TensorParallelMode::k1d && tp > 1) {
    const char* mode = dist::to_string(s.tp_mode);
    const auto grid = dist::tensor_grid_shape(s.tp_mode, tp, s.tp_depth);
    const int q = grid.q;
    const int64_t out_parts = grid.weight_out_parts;
    const int64_t hd = c.resolved_head_dim();
    COLOSSAL_CHECK(heads % q == 0 && kv % q == 0, "[llama] tp_mode ", mode, ": num_attention_heads ", heads,
                   " and num_key_value_heads ", kv, " must divide by the grid's side q = ", q,
                   " (each rank attends with its block of the heads)");
    for (auto [name, width] : {std::pair{"hidden_size", c.hidden_size}, std::pair{"intermediate_size",
                                                                                  c.intermediate_size},
                               std::pair{"num_key_value_heads x head_dim", kv * hd},
                               std::pair{"num_attention_heads x head_dim", heads * hd}})
      COLOSSAL_CHECK(width % out_parts == 0, "[llama] tp_mode ", mode, ": ", name, " ", width,
                     " does not divide into the grid's ", out_parts, " weight blocks");
    COLOSSAL_CHECK(!c.is_moe(), "[llama] tp_mode ", mode, " with experts is not built yet; use --tp_mode 1d");
    COLOSSAL_CHECK(s.sp_mode == Mode::kNone, "[llama] tp_mode ", mode, " with sp_mode ", dist::to_string(s.sp_mode),
                   " is not built yet (the grid splits the batch, not the sequence)");
    COLOSSAL_CHECK(!c.tie_word_embeddings, "[llama] tp_mode ", mode, " with tie_word_embeddings is not built yet "
                   "(the embedding and the head are cut differently on the grid); use --tp_mode 1d");
    return;
  }
  COLOSSAL_CHECK(heads % tp == 0, "[llama] num_attention_heads ", heads, " does not divide by tp ", tp);
  COLOSSAL_CHECK(kv % tp == 0 || tp % kv == 0, "[llama] num_key_value_heads ", kv, " and tp ", tp,
                 ": one must divide the other (kv heads are split by tp, or whole on every rank)");
  COLOSSAL_CHECK(c.intermediate_size % tp == 0, "[llama] intermediate_size ", c.intermediate_size,
                 " does not divide by tp ", tp);
  COLOSSAL_CHECK(s.ep == 1 || c.is_moe(), "[llama] ep ", s.ep, ": the model has no experts (num_local_experts is 0)");
  if (c.is_moe()) {
    COLOSSAL_CHECK(c.num_local_experts % s.ep == 0, "[llama] num_local_experts ", c.num_local_experts,
                   " does not divide by ep ", s.ep);
    COLOSSAL_CHECK(s.sp_mode != Mode::kSplitGather || tp == 1, "[llama] sp_mode split_gather with experts: the router "
                   "needs whole tokens, not sequence shards of the tp ranks; use all_to_all or ring_attn");
    COLOSSAL_CHECK(s.pp == 1 || s.sp_mode == Mode::kNone || s.sp == 1, "[llama] pp ", s.pp, " with experts and sp_mode ",
                   dist::to_string(s.sp_mode), ": stages pass the routing statistics along the sequence, which sp "
                   "shards; use ep, tp and dp with pp");
    COLOSSAL_CHECK(s.pp == 1 || c.hidden_size >= 3 * c.num_local_experts + 4, "[llama] pp ", s.pp, ": hidden_size ",
                   c.hidden_size, " is too narrow to carry ", c.num_local_experts,
                   " experts' routing statistics between stages (needs 3 x experts + 4)");
  }
  if (s.sp_mode == Mode::kAllToAll)
    COLOSSAL_CHECK((heads / tp) % s.sp == 0, "[llama] all_to_all: ", heads / tp,
                   " attention heads per tensor-parallel rank (", heads, " / tp ", tp, ") do not divide by sp ", s.sp);
  if (seq_len > 0 && s.sp > 1 && s.sp_mode != Mode::kNone) {
    const int parts = s.sp_mode == Mode::kRingAttn ? 2 * s.sp : s.sp;
    COLOSSAL_CHECK(seq_len % parts == 0, "[llama] ", dist::to_string(s.sp_mode), ": sequence length ", seq_len,
                   " does not divide by ", parts,
                   s.sp_mode == Mode::kRingAttn     ? " (2 x sp, the zigzag split)"
                   : s.sp_mode == Mode::kSplitGather ? " (tp)"
                                                     : " (sp)");
  }
}

void check_parallel(const LlamaConfig& config, const dist::ParallelDims& dims, int64_t seq_len) {
  check_parallel(config, {dims.tp(), dims.sequence_parallel_size(), dims.sp_mode(), dims.ep(), dims.pp(),
                          dims.tp_mode(), dims.options().tp_depth}, seq_len);
  // A MoE model's pipeline stages carry the routing statistics (expert counts, probability sums)
  // inside the activations: FP8 payloads would round them (3 mantissa bits).
  COLOSSAL_CHECK(!(dims.options().fp8_communication && dims.pp() > 1 && config.is_moe()),
                 "[llama] --fp8_communication with pp ", dims.pp(), " and experts: the stages pass the routing "
                 "statistics inside the activations, and FP8 would round them; drop one of the three");
}

}  // namespace colossal::llama
