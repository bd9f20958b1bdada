#pragma once
// LLaMA-architecture GGUF files (what llama.cpp's converter and llama-quantize write) for the
// generation engine: the hyper-parameters as a LlamaConfig, the SentencePiece vocabulary stored
// in the file as a Tokenizer, and the weights through LlamaInference::load_gguf. q8_0 and q4_0
// matrices become our int8/int4 storage exactly (same values, same scales; no requantization),
// K-quant ones (Q2_K .. Q6_K, the _S/_M/_L mixes) are kept in their own blocks, each tensor in its
// type; f32/f16/bf16 ones are converted to the requested format. Another --dtype than the file's
// converts everything to it. llama.cpp's converter permutes the
// rows of the query and key projections for its interleaved rotary layout; they are put back in
// the Hugging Face order (rotate-half) on load.
#include <string>

#include "core/checkpoint/gguf.h"
#include "kernels/cpu/matvec.h"
#include "llama/config.h"
#include "llama/tokenizer.h"

namespace colossal::llama {

/// True for a path ending in ".gguf".
bool is_gguf_path(const std::string& path);
/// The file's hyper-parameters (architectures llama, qwen2, qwen3 and gpt2); throws naming the
/// key for another architecture, a mixture of experts, rope scaling or partial rotary dimensions
/// (not read in this version).
LlamaConfig gguf_llama_config(const checkpoint::GgufFile& file);
/// The tokenizer in the file (tokenizer.ggml.model "llama": SentencePiece pieces, scores and
/// types) rebuilt as a SentencePiece BPE model; throws naming the tokenizer model otherwise.
Tokenizer gguf_tokenizer(const checkpoint::GgufFile& file);
/// The vocabulary of any supported GGUF file: SentencePiece's ("llama") as gguf_tokenizer, or a
/// byte-level BPE ("gpt2": tokens, merges, token types) with the split of its tokenizer.ggml.pre
/// (llama-bpe for Llama 3, qwen2, gpt-2; others are refused by name), its special tokens and
/// chat template, run as the tokenizer.json it stands for.
std::unique_ptr<text::Tokenizer> gguf_text_tokenizer(const checkpoint::GgufFile& file);
/// The serialized SentencePiece ModelProto gguf_tokenizer loads (exposed for tests).
std::string gguf_sentencepiece_proto(const checkpoint::GgufFile& file);
/// The format the file's matrices are in (the first layer's query projection): f32, bf16 (for
/// f16 and bf16), int8 (q8_0), int4 (q4_0), q2_k .. q6_k; throws naming the type for anything else.
kernels::cpu::WeightFormat gguf_weight_format(const checkpoint::GgufFile& file);

}  // namespace colossal::llama
