#pragma once
// Row-wise softmax cross entropy over a large vocabulary, and its gradient in the same visit.
//
// One row of logits (a vocabulary of 32k fp32 values is 128 KiB) stays in the core's L2 while
// it is read three times: its maximum, the sum of exp(x - max) (the exponentials written back
// in place), and the gradient scale * (softmax - one_hot(target)) written over them. So the
// logits come from memory once and the gradient goes back once, with one exp per element.
// A row whose target is `ignore_index` has loss 0 and (with a gradient) a zero gradient.
// AVX-512 when the CPU has it, else AVX2 with FMA, else scalar (chosen at run time); all in fp32.
#include <cstdint>
#include <string>

namespace colossal::kernels::cpu {

struct CrossEntropyRows {
  int64_t rows = 0;
  int64_t vocab = 0;
  const int64_t* target = nullptr;  // [rows]; each in [0, vocab) or ignore_index
  int64_t ignore_index = -100;
  float* loss = nullptr;            // [rows]: log-sum-exp minus the target's logit (0 if ignored)
  bool write_gradient = false;      // overwrite the logits with the gradient
  float gradient_scale = 1.0f;      // the gradient of each counted row's loss (1 / count for a mean)
};

/// fp32 logits [rows, vocab], contiguous; overwritten by the gradient when asked.
void cross_entropy_rows(float* logits, const CrossEntropyRows& args);
/// bf16 logits (raw bit patterns) [rows, vocab]; the loss in fp32, the gradient rounded to bf16
/// (nearest even). `scratch` holds `vocab` floats.
void cross_entropy_rows_bf16(uint16_t* logits, const CrossEntropyRows& args, float* scratch);

/// "avx512", "avx2" or "scalar": what the calls above use now.
const char* cross_entropy_implementation();
/// For tests and benchmarks: "avx512", "avx2", "scalar" or "auto"; returns the previous choice. A name
/// this CPU cannot run is an std::invalid_argument.
std::string cross_entropy_use(const std::string& name);

namespace detail {
void cross_entropy_row_scalar(float* x, int64_t v, int64_t target, bool grad, float scale, float* loss);
void cross_entropy_row_avx512(float* x, int64_t v, int64_t target, bool grad, float scale, float* loss);
void bf16_to_float_avx512(const uint16_t* src, float* dst, int64_t n);
void float_to_bf16_avx512(const float* src, uint16_t* dst, int64_t n);
bool cross_entropy_avx2_supported();  // AVX2 and FMA
void cross_entropy_row_avx2(float* x, int64_t v, int64_t target, bool grad, float scale, float* loss);
void bf16_to_float_avx2(const uint16_t* src, float* dst, int64_t n);
void float_to_bf16_avx2(const float* src, uint16_t* dst, int64_t n);
}  // namespace detail

}  // namespace colossal::kernels::cpu
