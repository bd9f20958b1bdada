#include "core/inference/lora_adapters.h"

#include <ATen/ATen.h>

#include <map>

#include "core/common/check.h"

namespace colossal::inference {

AdapterRows AdapterRows::of(const at::Tensor& adapters) {
  AdapterRows out;
  if (!adapters.defined() || adapters.numel() == 0) return out;
  const auto ids = adapters.to(at::kLong).contiguous();
  const int64_t n = ids.numel();
  const int64_t* p = ids.const_data_ptr<int64_t>();
  std::map<int64_t, std::vector<int64_t>> by_adapter;
  for (int64_t i = 0; i < n; ++i)
    if (p[i] > 0) by_adapter[p[i]].push_back(i);
  for (auto& [adapter, rows] : by_adapter) {
    Group g;
    g.adapter = adapter;
    g.all = static_cast<int64_t>(rows.size()) == n;
    g.rows = at::tensor(rows, at::kLong);
    out.groups.push_back(std::move(g));
  }
  return out;
}

void MatrixAdapters::add(int64_t adapter, const at::Tensor& a, const at::Tensor& b, int64_t out_offset) {
  COLOSSAL_CHECK(adapter > 0 && a.dim() == 2 && b.dim() == 2 && a.size(0) == b.size(1) && out_offset >= 0,
                 "[lora] serving adapter ", adapter, ": expected A [r, in] and B [out, r], got ", a.sizes(), " and ",
                 b.sizes());
  // Copies: the source model may merge or drop its adapters after.
  pieces_.push_back({adapter, a.detach().to(at::kFloat).contiguous().clone(),
                     b.detach().to(at::kFloat).contiguous().clone(), out_offset});
}

void MatrixAdapters::apply(const at::Tensor& x, at::Tensor y, const AdapterRows& rows) const {
  if (pieces_.empty() || rows.empty()) return;
  for (const auto& g : rows.groups) {
    at::Tensor xs;  // the group's inputs, gathered once for all its pieces
    for (const auto& p : pieces_) {
      if (p.adapter != g.adapter) continue;
      if (!xs.defined()) xs = g.all ? x : x.index_select(0, g.rows);
      auto update = at::mm(at::mm(xs, p.a.t()), p.b.t());  // [rows, out]
      auto cols = y.narrow(1, p.out_offset, p.b.size(0));
      if (g.all) cols.add_(update);
      else cols.index_add_(0, g.rows, update);
    }
  }
}

}  // namespace colossal::inference
