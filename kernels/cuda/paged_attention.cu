#include "kernels/cuda/common.cuh"
#include "kernels/cuda/index_math.h"
#include "kernels/cuda/paged_attention.h"

namespace colossal::kernels::cuda {
namespace {

using namespace detail;

constexpr int kWarps = 4;
constexpr int kGroup = 8;  // query heads per CUDA block

int64_t splits_of(const PagedAttentionArgs& a) { return index::splits_for(a.max_context, kSplitPositions); }

// One block: up to kGroup query heads of one kv head of one token, over the positions
// [split * kSplitPositions, ...) of its context (all of them when splits == 1). E = ceil(D / 32)
// elements per lane, element e*32 + lane (each load instruction of a warp reads consecutive
// elements). With one split the output is written; with several, the partial (max, sum, sum of
// p * v) per head goes to the workspace [tokens, heads, splits, D + 2] for merge_kernel.
template <typename T, int E>
__global__ void __launch_bounds__(kWarps * 32) paged_attention_kernel(PagedAttentionArgs a, int splits) {
  __shared__ float s_max[kWarps][kGroup], s_sum[kWarps][kGroup];
  __shared__ float s_acc[kWarps][kGroup][E * 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t token = blockIdx.x;
  const int split = blockIdx.z;
  const index::HeadBlock heads_here = index::head_block(blockIdx.y, a.heads, a.kv_heads, kGroup);
  const int64_t kvh = heads_here.kv_head, first = heads_here.first_head;
  const int n = heads_here.heads;
  const int64_t D = a.head_dim;
  const T* q = static_cast<const T*>(a.q) + (token * a.heads + first) * D;
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);
  const int32_t* table = a.block_tables + static_cast<int64_t>(a.token_seq[token]) * a.max_blocks;
  const int context = a.token_context[token];
  const index::Range positions = index::split_range(split, splits, context, kSplitPositions);
  const int begin = positions.begin, end = positions.end;

  float qr[kGroup][E], acc[kGroup][E], m[kGroup], l[kGroup];
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int64_t i = e * 32 + lane;
      qr[h][e] = (h < n && i < D) ? to_float(q[h * D + i]) * a.scale : 0.0f;
      acc[h][e] = 0.0f;
    }
  }
  auto offset_of = [&](int j) {
    const int64_t slot = static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
    return (slot * a.kv_heads + kvh) * D;
  };
  // Two positions per step: both loads are issued before either is used.
  for (int j = begin + warp; j < end; j += 2 * kWarps) {
    const int j2 = j + kWarps;
    const bool second = j2 < end;
    const int64_t o1 = offset_of(j), o2 = second ? offset_of(j2) : o1;
    float k[2][E], v[2][E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int64_t i = e * 32 + lane;
      k[0][e] = i < D ? to_float(kc[o1 + i]) : 0.0f;
      v[0][e] = i < D ? to_float(vc[o1 + i]) : 0.0f;
      k[1][e] = i < D ? to_float(kc[o2 + i]) : 0.0f;
      v[1][e] = i < D ? to_float(vc[o2 + i]) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (u == 1 && !second) break;
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        if (h >= n) break;
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) dot += qr[h][e] * k[u][e];
        const float s = warp_sum(dot);
        const float mn = fmaxf(m[h], s);
        const float correction = expf(m[h] - mn), p = expf(s - mn);
        l[h] = l[h] * correction + p;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[h][e] = acc[h][e] * correction + p * v[u][e];
        m[h] = mn;
      }
    }
  }
  // Merge the warps' partial softmaxes.
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
    if (h >= n) break;
    if (lane == 0) {
      s_max[warp][h] = m[h];
      s_sum[warp][h] = l[h];
    }
#pragma unroll
    for (int e = 0; e < E; ++e) s_acc[warp][h][e * 32 + lane] = acc[h][e];
  }
  __syncthreads();
  for (int64_t idx = threadIdx.x; idx < n * D; idx += blockDim.x) {
    const int h = static_cast<int>(idx / D), i = static_cast<int>(idx % D);
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_max[w][h]);
    float sum = 0.0f, val = 0.0f;
    if (mx != -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        const float f = expf(s_max[w][h] - mx);  // a warp that saw no position: exp(-inf) = 0
        sum += s_sum[w][h] * f;
        val += s_acc[w][h][i] * f;
      }
    }
    if (splits == 1) {
      T* out = static_cast<T*>(a.out) + (token * a.heads + first) * D;
      out[h * D + i] = from_float<T>(sum > 0.0f ? val / sum : 0.0f);
    } else {
      float* part = a.workspace + ((token * a.heads + first + h) * splits + split) * (D + 2);
      part[i] = val;
      if (i == 0) {
        part[D] = mx;
        part[D + 1] = sum;
      }
    }
  }
}

// out[token, head] from its splits' partial softmaxes: one block per (token, head).
template <typename T>
__global__ void merge_kernel(PagedAttentionArgs a, int splits) {
  const int64_t row = blockIdx.x;  // token * heads + head
  const int64_t D = a.head_dim;
  const float* part = a.workspace + row * splits * (D + 2);
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) mx = fmaxf(mx, part[s * (D + 2) + D]);
  T* out = static_cast<T*>(a.out) + row * D;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    float sum = 0.0f, val = 0.0f;
    if (mx != -INFINITY) {
      for (int s = 0; s < splits; ++s) {
        const float* p = part + s * (D + 2);
        const float f = expf(p[D] - mx);  // a split past the context: max -inf, weight 0
        sum += p[D + 1] * f;
        val += p[i] * f;
      }
    }
    out[i] = from_float<T>(sum > 0.0f ? val / sum : 0.0f);
  }
}

template <typename T, int E>
void launch(const PagedAttentionArgs& a, int splits, cudaStream_t stream) {
  const int64_t parts = index::blocks_per_kv_head(a.heads, a.kv_heads, kGroup);
  const dim3 grid(static_cast<unsigned>(a.tokens), static_cast<unsigned>(a.kv_heads * parts),
                  static_cast<unsigned>(splits));
  paged_attention_kernel<T, E><<<grid, kWarps * 32, 0, stream>>>(a, splits);
  if (splits > 1) {
    check_launch("paged_attention");
    merge_kernel<T><<<static_cast<unsigned>(a.tokens * a.heads), 128, 0, stream>>>(a, splits);
  }
}

template <typename T>
void launch_for_head_dim(const PagedAttentionArgs& a, int splits, cudaStream_t stream) {
  switch ((a.head_dim + 31) / 32) {
    case 1: launch<T, 1>(a, splits, stream); break;
    case 2: launch<T, 2>(a, splits, stream); break;
    case 3: launch<T, 3>(a, splits, stream); break;
    case 4: launch<T, 4>(a, splits, stream); break;
    case 5: launch<T, 5>(a, splits, stream); break;
    case 6: launch<T, 6>(a, splits, stream); break;
    case 7: launch<T, 7>(a, splits, stream); break;
    case 8: launch<T, 8>(a, splits, stream); break;
  }
}

}  // namespace

int64_t paged_attention_workspace(const PagedAttentionArgs& a) {
  const int64_t splits = splits_of(a);
  return splits == 1 ? 0 : a.tokens * a.heads * splits * (a.head_dim + 2);
}

void paged_attention(const PagedAttentionArgs& a, Stream stream) {
  const char* k = "paged_attention";
  require(a.head_dim > 0 && a.head_dim <= 256, k, "head_dim " + std::to_string(a.head_dim) + " outside 1..256");
  require(a.kv_heads > 0 && a.heads % a.kv_heads == 0, k,
          "heads " + std::to_string(a.heads) + " is not a multiple of kv_heads " + std::to_string(a.kv_heads));
  require(a.block_size > 0 && a.max_blocks > 0, k, "expected block_size > 0 and max_blocks > 0");
  require(a.max_context >= 0 && a.max_context <= a.max_blocks * a.block_size, k,
          "max_context " + std::to_string(a.max_context) + " is beyond the block tables' " +
              std::to_string(a.max_blocks * a.block_size) + " positions");
  if (a.tokens == 0) return;
  require(a.tokens < (int64_t{1} << 31), k, "too many tokens for one launch");
  const int64_t splits = splits_of(a);
  require(splits < 65536, k, "context too long for one launch");
  require(splits == 1 || a.workspace, k, "a context of more than " + std::to_string(kSplitPositions) +
                                             " positions needs the workspace (paged_attention_workspace)");
  dispatch(a.dtype, [&](auto tag) {
    launch_for_head_dim<decltype(tag)>(a, static_cast<int>(splits), stream_of(stream));
  });
  check_launch(k);
}

}  // namespace colossal::kernels::cuda
