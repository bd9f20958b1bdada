#pragma once
// Multi-LoRA serving (as vLLM's): the base weights stay packed and unmerged, and each request
// names the adapter it runs under (0: none). One forward carries tokens of any mix of adapters:
// the base product runs once over every token, then for each adapter present the tokens it
// owns go through their low-rank update, y[rows] += (x[rows] A^T) B^T, in two small GEMMs over
// those rows together. A fused matrix (q/k/v, gate/up) holds one piece per projection, each
// adding into its own columns of the output.
//
// Under tensor parallelism each rank holds the pieces of its slice: column layers their B rows
// (A whole), row layers their A columns (B whole), so a row layer's update is a partial sum that
// the base's all-reduce completes.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace colossal::inference {

/// A forward's tokens grouped by adapter: for each adapter present (> 0), the rows it owns.
struct AdapterRows {
  struct Group {
    int64_t adapter = 0;
    at::Tensor rows;  // int64 row indices, ascending
    bool all = false; // every row of the batch: no gather or scatter needed
  };
  std::vector<Group> groups;
  /// From each token's adapter id ([N] int64; undefined: all the base).
  static AdapterRows of(const at::Tensor& adapters);
  bool empty() const { return groups.empty(); }
};

/// One packed matrix's adapters.
class MatrixAdapters {
 public:
  /// Adds adapter `adapter`'s update to output columns [out_offset, out_offset + b.size(0)):
  /// a [r, in] and b [out, r] (already times alpha / r), both taken as fp32.
  void add(int64_t adapter, const at::Tensor& a, const at::Tensor& b, int64_t out_offset);
  bool empty() const { return pieces_.empty(); }
  /// y[n, ldy] (fp32, its first columns the matrix's output) += each token's adapter update
  /// of x[n, in] (fp32).
  void apply(const at::Tensor& x, at::Tensor y, const AdapterRows& rows) const;

 private:
  struct Piece {
    int64_t adapter;
    at::Tensor a, b;
    int64_t out_offset;
  };
  std::vector<Piece> pieces_;
};

}  // namespace colossal::inference
