// The AVX-512 and AVX2 paged attention against the portable kernel and against plain float64
// softmax attention over the same cache: head dims 16..256, block sizes 16 and 32, fp32, bf16 and
// q8_0 caches (int8 values, an fp32 scale per group of 32 or per row), grouped-query heads,
// contexts that end inside a block.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/cpu/paged_attention.h"

namespace colossal::kernels::cpu {
namespace {

TEST(PagedAttentionKernel, VectorKernelMatchesPortableAndFloat64) {
  torch::manual_seed(7);
  for (int64_t d : {16, 40, 64, 96, 128, 256})
    for (int64_t block : {16, 32})
      for (const std::string kind : {"fp32", "bf16", "q8_0"}) {
        const bool bf16 = kind == "bf16", q8 = kind == "q8_0";
        const int64_t heads = 4, kv_heads = 2, blocks = 9, tokens = 3, group = d % 32 == 0 ? 32 : d;
        auto dtype = bf16 ? torch::kBFloat16 : q8 ? torch::kChar : torch::kFloat;
        auto k = q8 ? torch::randint(-127, 128, {blocks, block, kv_heads, d}).to(dtype)
                    : torch::randn({blocks, block, kv_heads, d}).to(dtype);
        auto v = q8 ? torch::randint(-127, 128, {blocks, block, kv_heads, d}).to(dtype)
                    : torch::randn({blocks, block, kv_heads, d}).to(dtype);
        auto k_scales = torch::rand({blocks, block, kv_heads, d / group}) / 64 + 1e-3;
        auto v_scales = torch::rand({blocks, block, kv_heads, d / group}) / 64 + 1e-3;
        auto q = torch::randn({tokens, heads, d});
        // Sequence 0 owns blocks 4, 1, 7; sequence 1 owns 2, 8. Contexts end mid-block.
        auto tables = torch::tensor({4, 1, 7, 2, 8, 0}, torch::kInt).view({2, 3});
        auto seq = torch::tensor({0, 0, 1}, torch::kInt);
        auto ctx = torch::tensor({static_cast<int>(2 * block + 3), 1, static_cast<int>(block + 5)}, torch::kInt);
        PagedAttentionArgs a;
        a.q = q.data_ptr<float>();
        a.k_cache = k.data_ptr();
        a.v_cache = v.data_ptr();
        a.bf16_cache = bf16;
        if (q8) {
          a.k_scales = k_scales.data_ptr<float>();
          a.v_scales = v_scales.data_ptr<float>();
          a.scale_group = group;
        }
        a.heads = heads;
        a.kv_heads = kv_heads;
        a.head_dim = d;
        a.block_size = block;
        a.block_tables = tables.data_ptr<int32_t>();
        a.max_blocks = 3;
        a.token_seq = seq.data_ptr<int32_t>();
        a.token_context = ctx.data_ptr<int32_t>();
        a.scale = 1.0f / std::sqrt(static_cast<float>(d));
        a.tokens = tokens;
        auto fast = torch::full({tokens, heads, d}, std::nan("")), portable = fast.clone(), avx2 = fast.clone();
        a.out = fast.data_ptr<float>();
        ASSERT_TRUE(detail::paged_attention_avx512_fits(d, block) || !__builtin_cpu_supports("avx512f") || d % 16);
        paged_attention(a, 0, 5);  // two ranges, as two threads split them
        paged_attention(a, 5, tokens * heads);
        const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        ASSERT_TRUE(detail::paged_attention_avx2_fits(d, block) || !has_avx2);
        if (has_avx2) {
          a.out = avx2.data_ptr<float>();
          detail::paged_attention_avx2(a, 0, tokens * heads);
        }
        a.out = portable.data_ptr<float>();
        paged_attention_portable(a, 0, tokens * heads);
        // float64 reference: gather each token's visible keys/values through its table.
        auto dequantized = [&](const torch::Tensor& x, const torch::Tensor& scales) {
          auto xd = x.to(torch::kDouble);
          if (!q8) return xd;
          return (xd.view({blocks, block, kv_heads, d / group, group}) * scales.to(torch::kDouble).unsqueeze(-1))
              .view({blocks, block, kv_heads, d});
        };
        auto kd = dequantized(k, k_scales).view({blocks * block, kv_heads, d});
        auto vd = dequantized(v, v_scales).view({blocks * block, kv_heads, d});
        for (int64_t t = 0; t < tokens; ++t) {
          const int64_t n = ctx[t].item<int64_t>(), s = seq[t].item<int64_t>();
          std::vector<int64_t> rows;
          for (int64_t pos = 0; pos < n; ++pos) rows.push_back(tables[s][pos / block].item<int64_t>() * block + pos % block);
          auto idx = torch::tensor(rows, torch::kLong);
          for (int64_t h = 0; h < heads; ++h) {
            auto keys = kd.index_select(0, idx).select(1, h / 2), values = vd.index_select(0, idx).select(1, h / 2);
            auto p = torch::softmax(torch::mv(keys, q[t][h].to(torch::kDouble)) / std::sqrt(static_cast<double>(d)), 0);
            auto ref = torch::mv(values.t(), p);
            auto what = "d " + std::to_string(d) + " block " + std::to_string(block) + " " + kind +
                        " token " + std::to_string(t) + " head " + std::to_string(h);
            EXPECT_TRUE(torch::allclose(fast[t][h].to(torch::kDouble), ref, 1e-5, 1e-5)) << what;
            EXPECT_TRUE(torch::allclose(portable[t][h].to(torch::kDouble), ref, 1e-5, 1e-5)) << what;
            if (has_avx2) EXPECT_TRUE(torch::allclose(avx2[t][h].to(torch::kDouble), ref, 1e-5, 1e-5)) << what << " avx2";
          }
        }
      }
}

}  // namespace
}  // namespace colossal::kernels::cpu
