#include "recsys/embedding/cached_embedding.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <functional>
#include <thread>
#include <tuple>

#include "core/common/check.h"
#include "recsys/embedding/table_init.h"

namespace colossal::recsys {

CachedEmbeddingBag::CachedEmbeddingBag(CachedEmbeddingOptions options) : EmbeddingStore(std::move(options)) {
  const int64_t rows = options_.rows, dim = options_.dim;
  slots_ = std::clamp<int64_t>(std::max(static_cast<int64_t>(std::ceil(options_.cache_ratio * rows)),
                                         std::min(options_.min_slots, rows)),
                                1, rows);
  io_threads_ = options_.io_threads > 0 ? options_.io_threads : options_.offload_dir.empty() ? 1 : 16;
  table_ = allocate(dim, "embedding table");
  init_table_slice(table_, {.seed = options_.seed, .total_rows = options_.total_rows, .total_dim = options_.total_dim,
                            .row_begin = options_.row_begin, .col_begin = options_.col_begin});
  state_ = allocate(options_.optimizer.state_width(dim), "embedding optimizer state");
  cache_ = torch::zeros({slots_, dim}).set_requires_grad(true);
  cache_state_ = torch::zeros({slots_, options_.optimizer.state_width(dim)});
  row_slot_.assign(rows, -1);
  slot_row_.assign(slots_, -1);
  slot_tag_.assign(slots_, -1);
  last_use_.assign(slots_, 0);
  frequency_.assign(rows, 0);
  drop_cache();
}

std::tuple<double, int64_t, int64_t> CachedEmbeddingBag::key(int64_t slot) const {
  const double priority = options_.eviction == "lfu" ? frequency_[slot_row_[slot]] : 0.0;
  return {priority, last_use_[slot], slot};
}

void CachedEmbeddingBag::write_back(int64_t slot, int64_t row) {
  const int64_t dim = options_.dim, width = state_.size(1);
  std::memcpy(table_.data_ptr<float>() + row * dim, cache_.data_ptr<float>() + slot * dim, dim * sizeof(float));
  std::memcpy(state_.data_ptr<float>() + row * width, cache_state_.data_ptr<float>() + slot * width,
              width * sizeof(float));
}

void CachedEmbeddingBag::load_row(int64_t slot, int64_t row) {
  const int64_t dim = options_.dim, width = state_.size(1);
  std::memcpy(cache_.data_ptr<float>() + slot * dim, table_.data_ptr<float>() + row * dim, dim * sizeof(float));
  std::memcpy(cache_state_.data_ptr<float>() + slot * width, state_.data_ptr<float>() + row * width,
              width * sizeof(float));
}

void CachedEmbeddingBag::run_transfers() {
  // On the offload disk each copy may wait for a page to be read: many at once keep the disk's
  // queue full (a random 4 KiB read costs ~0.2 ms at one in flight, ~0.05 ms at 8 or more).
  // Every write-back runs before any load: a row evicted early in a batch may be one the same
  // batch loads again later (into another slot), and it must reach the table first.
  const size_t threads = std::min<size_t>(io_threads_, pending_.size() / 64);  // small batches: not worth a thread
  auto in_parallel = [&](const std::function<void(const Transfer&)>& copy) {
    auto run = [&](size_t first) {
      for (size_t i = first; i < pending_.size(); i += std::max<size_t>(threads, 1)) copy(pending_[i]);
    };
    if (threads <= 1) return run(0);
    std::vector<std::thread> pool;
    for (size_t k = 0; k < threads; ++k) pool.emplace_back(run, k);
    for (auto& t : pool) t.join();
  };
  in_parallel([this](const Transfer& t) {
    if (t.evicted >= 0) write_back(t.slot, t.evicted);
  });
  in_parallel([this](const Transfer& t) { load_row(t.slot, t.row); });
  pending_.clear();
}

int64_t CachedEmbeddingBag::slot_for(int64_t row, int64_t tag) {
  ++stats_.lookups;
  int64_t slot = row_slot_[row], evicted = -1;
  if (slot >= 0) {
    ++stats_.hits;
    order_.erase(key(slot));  // re-keyed below with the new count and time
    frequency_[row] += 1;
  } else {
    ++stats_.misses;
    frequency_[row] += 1;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      // The least valuable slot the current batch does not hold (LFU: fewest accesses, then
      // oldest; LRU: oldest).
      auto it = order_.begin();
      while (it != order_.end() && slot_tag_[std::get<2>(*it)] == tag) ++it;
      if (it == order_.end()) return -1;  // every slot holds this batch's rows
      slot = std::get<2>(*it);
      order_.erase(it);
      evicted = slot_row_[slot];
      row_slot_[evicted] = -1;
      ++stats_.evictions;
    }
    // The copies run together in run_transfers(), before anything reads the slot: a slot this
    // batch holds is never evicted again before then.
    pending_.push_back({slot, evicted, row});
    row_slot_[row] = slot;
    slot_row_[slot] = row;
  }
  last_use_[slot] = ++clock_;
  slot_tag_[slot] = tag;
  order_.insert(key(slot));
  return slot;
}

void CachedEmbeddingBag::warm_up(const std::vector<int64_t>& counts) {
  COLOSSAL_CHECK(static_cast<int64_t>(counts.size()) == options_.rows, "[cached_embedding] warm_up: ", counts.size(),
                 " counts for ", options_.rows, " rows");
  std::vector<int64_t> order(counts.size());
  std::iota(order.begin(), order.end(), 0);
  const auto n = std::min<size_t>(slots_, order.size());
  std::partial_sort(order.begin(), order.begin() + n, order.end(),
                    [&](int64_t a, int64_t b) { return counts[a] > counts[b]; });
  torch::NoGradGuard no_grad;
  const int64_t tag = ++batch_tag_;
  for (size_t i = 0; i < n && counts[order[i]] > 0; ++i) slot_for(order[i], tag);
  run_transfers();
  for (size_t r = 0; r < counts.size(); ++r) frequency_[r] = static_cast<double>(counts[r]);
  // Re-key the cached slots by the seeded frequencies.
  order_.clear();
  for (int64_t s = 0; s < slots_; ++s)
    if (slot_row_[s] >= 0) order_.insert(key(s));
  stats_ = {};
}

void CachedEmbeddingBag::prefetch(const torch::Tensor& ids) {
  torch::NoGradGuard no_grad;
  const auto unique = std::get<0>(at::_unique(ids.to(torch::kInt64).contiguous()));
  const int64_t* p = unique.data_ptr<int64_t>();
  const int64_t tag = ++batch_tag_;
  for (int64_t i = 0; i < unique.numel(); ++i) slot_for(p[i], tag);
  run_transfers();
}

torch::Tensor CachedEmbeddingBag::forward(const torch::Tensor& ids, const torch::Tensor& offsets) {
  const auto flat = ids.to(torch::kInt64).contiguous();
  last_rows_ = std::get<0>(at::_unique(flat));  // sorted: its ends bound every id
  const int64_t* rows = last_rows_.data_ptr<int64_t>();
  const int64_t unique = last_rows_.numel();
  check_rows(last_rows_, options_.rows, "cached_embedding");
  const int64_t tag = ++batch_tag_;
  {
    torch::NoGradGuard no_grad;
    bool fits = true;
    for (int64_t i = 0; i < unique && fits; ++i) fits = slot_for(rows[i], tag) >= 0;
    run_transfers();  // the rows admitted so far are whole either way
    COLOSSAL_CHECK(fits, "[cached_embedding] a batch with ", unique, " distinct ids does not fit the cache's ", slots_,
                   " slots: raise cache_ratio");
  }
  const auto slot_ids = torch::from_blob(row_slot_.data(), {options_.rows}, torch::kInt64).index_select(0, flat);
  // A sparse gradient: the backward's cost follows the rows the batch touched, not the cache size.
  return std::get<0>(torch::embedding_bag(cache_, slot_ids, offsets, false, bag_mode(), /*sparse=*/true));
}

torch::Tensor CachedEmbeddingBag::lookup(const torch::Tensor& ids, const torch::Tensor& offsets) {
  torch::NoGradGuard no_grad;
  flush();
  return std::get<0>(torch::embedding_bag(table_, ids.to(torch::kInt64), offsets, false, bag_mode()));
}

std::pair<torch::Tensor, torch::Tensor> CachedEmbeddingBag::gradients() const {
  COLOSSAL_CHECK(last_rows_.defined(), "[cached_embedding] gradients() before any forward");
  const auto& g = cache_.grad();
  if (!g.defined()) return {last_rows_, torch::zeros({last_rows_.numel(), options_.dim})};  // no backward
  // Each slot the batch read once, with its summed gradient; its row is the slot's (the batch's
  // slots are not evicted before the step).
  const auto coalesced = g.coalesce();
  const auto slots = coalesced.indices()[0].contiguous();
  auto rows = torch::empty_like(slots);
  const int64_t* sp = slots.data_ptr<int64_t>();
  int64_t* rp = rows.data_ptr<int64_t>();
  for (int64_t k = 0; k < slots.numel(); ++k) rp[k] = slot_row_[sp[k]];
  return {rows, coalesced.values()};
}

void CachedEmbeddingBag::apply(const torch::Tensor& ids, const torch::Tensor& grads) {
  torch::NoGradGuard no_grad;
  const auto [rows, g] = checked_updates(ids, grads, "cached_embedding");
  const int64_t dim = options_.dim, width = state_.size(1);
  const int64_t* r = rows.data_ptr<int64_t>();
  const float* gp = g.data_ptr<float>();
  const int64_t tag = ++batch_tag_;
  for (int64_t i = 0; i < rows.numel(); ++i) {
    // A row touched on this rank is cached (its slot is held by the batch). A row another rank
    // touched may not be: it is updated where it lives, in the table.
    const int64_t slot = row_slot_[r[i]];
    if (slot >= 0) {
      slot_tag_[slot] = tag;
      dirty_ = true;
      update_row(options_.optimizer, cache_.data_ptr<float>() + slot * dim,
                 cache_state_.data_ptr<float>() + slot * width, gp + i * dim, dim);
    } else {
      update_row(options_.optimizer, table_.data_ptr<float>() + r[i] * dim, state_.data_ptr<float>() + r[i] * width,
                 gp + i * dim, dim);
    }
  }
  cache_.mutable_grad() = torch::Tensor();  // the next backward starts a new (sparse) gradient
}

void CachedEmbeddingBag::flush() {
  if (!dirty_) return;  // nothing updated in the cache since the last flush
  for (int64_t s = 0; s < slots_; ++s)
    if (slot_row_[s] >= 0) write_back(s, slot_row_[s]);
  dirty_ = false;
}

void CachedEmbeddingBag::load(const torch::Tensor& table, const torch::Tensor& state) {
  COLOSSAL_CHECK(table.sizes() == table_.sizes() && state.sizes() == state_.sizes(), "[cached_embedding] load: table ",
                 table.sizes(), " and state ", state.sizes(), ", expected ", table_.sizes(), " and ", state_.sizes());
  table_.copy_(table);
  state_.copy_(state);
  drop_cache();
}

void CachedEmbeddingBag::drop_cache() {
  std::fill(row_slot_.begin(), row_slot_.end(), -1);
  std::fill(slot_row_.begin(), slot_row_.end(), -1);
  std::fill(slot_tag_.begin(), slot_tag_.end(), -1);
  order_.clear();
  free_.clear();
  for (int64_t s = slots_ - 1; s >= 0; --s) free_.push_back(s);
  dirty_ = false;
}

}  // namespace colossal::recsys
