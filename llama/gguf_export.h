#pragma once
// A Hugging Face LLaMA-architecture directory (llama, mistral, qwen2, qwen3: the families
// llama/gguf.h reads back) as a GGUF file that llama.cpp runs: hyper-parameters, the
// vocabulary (SentencePiece or byte-level BPE: llama/gguf_vocab_export.h), the chat template, and the
// tensors under llama.cpp's names, the query/key rows of LLaMA put in llama.cpp's interleaved
// rotary order (as its converter does). Matrices in the asked type (f32, f16, bf16, q8_0, q4_0;
// a quantized type falls back to f16 for a matrix whose rows are not whole blocks of 32) or
// K-quant mix (q4_k_m, q5_k_m, q6_k: the types llama-quantize picks per tensor without an
// importance matrix, rounded as its reference quantizer rounds; rows that are not whole
// super-blocks of 256 take q8_0), norms and biases in f32. Tensors are read one at a time from the checkpoint's memory-mapped files.
#include <cstdint>
#include <string>

namespace colossal::llama {

struct GgufExportOptions {
  std::string outtype = "f16";  // f32 | f16 | bf16 | q8_0 | q4_0 | q4_k_m | q5_k_m | q6_k
  /// Throws naming the field.
  void validate() const;
};

struct GgufExportResult {
  int64_t tensors = 0;
  int64_t bytes = 0;  // of the file
};

/// Writes `model_dir` as `out_path` (atomically). Throws naming what the file cannot hold: a
/// family llama.cpp stores otherwise, rope scaling, experts, a tokenizer it does not name.
GgufExportResult export_gguf(const std::string& model_dir, const std::string& out_path,
                             const GgufExportOptions& options);

}  // namespace colossal::llama
