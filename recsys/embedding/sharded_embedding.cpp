#include "recsys/embedding/sharded_embedding.h"

#include <torch/torch.h>

#include <sstream>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/dist/group.h"

namespace colossal::recsys {
namespace {

// Where a saved shard sits: "<row_begin> <rows> <col_begin> <cols> <total_rows> <total_dim> <optimizer>".
struct SavedShard {
  int64_t row_begin = 0, rows = 0, col_begin = 0, cols = 0, total_rows = 0, total_dim = 0;
  std::string optimizer;
};

std::string encode(const Shard& s, const TablePlan& t, const std::string& optimizer) {
  std::ostringstream o;
  o << s.row_begin << " " << s.rows << " " << s.col_begin << " " << s.cols << " " << t.rows << " " << t.dim << " "
    << optimizer;
  return o.str();
}

SavedShard decode(const std::string& text, const std::string& file, const std::string& key) {
  SavedShard s;
  std::istringstream in(text);
  in >> s.row_begin >> s.rows >> s.col_begin >> s.cols >> s.total_rows >> s.total_dim >> s.optimizer;
  COLOSSAL_CHECK(!in.fail() && s.rows >= 0 && s.cols >= 0 && s.row_begin >= 0 && s.col_begin >= 0 &&
                     s.row_begin + s.rows <= s.total_rows && s.col_begin + s.cols <= s.total_dim,
                 "[sharded embeddings] '", file, "': metadata '", key, "' = '", text,
                 "': expected row_begin rows col_begin cols total_rows total_dim optimizer");
  return s;
}

// Per table: each bag's id count [B] and, per id, its bag.
struct Bags {
  torch::Tensor lengths, bag_of_id;
};

Bags bags_of(const torch::Tensor& ids, const torch::Tensor& offsets) {
  const int64_t B = offsets.size(0);
  const auto ends = torch::cat({offsets.narrow(0, 1, B - 1), torch::tensor({ids.numel()}, torch::kInt64)});
  const auto lengths = ends - offsets;
  return {lengths, torch::repeat_interleave(torch::arange(B, torch::kInt64), lengths)};
}

}  // namespace

uint64_t ShardedEmbeddingOptions::table_seed(size_t i) const {
  return store.seed * 1000003 + i * 7919 + static_cast<uint64_t>(dim);
}

int ShardedEmbeddings::world() const { return group_ && group_->is_member() ? group_->size() : 1; }
int ShardedEmbeddings::rank() const { return group_ && group_->is_member() ? group_->rank() : 0; }

ShardedEmbeddings::ShardedEmbeddings(ShardedEmbeddingOptions options, const dist::Group* group)
    : options_(std::move(options)), group_(group) {
  COLOSSAL_CHECK(options_.pooling == "sum" || options_.pooling == "mean", "[sharded embeddings] pooling '",
                 options_.pooling, "': expected sum or mean");
  const auto& opt = options_.store.optimizer;
  opt.validate();
  const double element_bytes = 4.0 * (1 + static_cast<double>(opt.state_width(options_.dim)) / options_.dim);
  plan_ = plan_sharding(options_.table_sizes, options_.dim,
                        {.sharding = options_.sharding, .world = world(), .bytes_per_element = element_bytes,
                         .memory_per_rank = options_.store.offload_dir.empty() ? options_.memory_per_rank : 0,
                         .allow_column = opt.kind != "rowwise_adagrad"});
  owned_by_.assign(world(), {});
  for (size_t t = 0; t < plan_.size(); ++t)
    for (size_t k = 0; k < plan_[t].shards.size(); ++k) {
      owned_by_[plan_[t].shards[k].rank].push_back(all_shards_.size());
      all_shards_.emplace_back(t, k);
    }
  for (size_t f : owned_by_[rank()]) {
    const auto [t, k] = all_shards_[f];
    const auto& s = plan_[t].shards[k];
    EmbeddingStoreOptions o = options_.store;
    o.rows = s.rows;
    o.dim = s.cols;
    o.pooling = "sum";  // a mean is taken by the requester over the whole bag
    o.seed = options_.table_seed(t);
    o.total_rows = plan_[t].rows;
    o.total_dim = plan_[t].dim;
    o.row_begin = s.row_begin;
    o.col_begin = s.col_begin;
    local_.push_back({t, k, s, make_embedding_store(o, options_.cached), {}, {}});
  }
}

std::vector<torch::Tensor> ShardedEmbeddings::exchange(const std::vector<torch::Tensor>& send) const {
  const int n = world();
  if (n == 1) return send;
  std::vector<int64_t> send_counts(n), recv_counts(n);
  for (int r = 0; r < n; ++r) send_counts[r] = send[r].numel();
  auto counts_in = torch::tensor(send_counts, torch::kInt64), counts_out = torch::empty({n}, torch::kInt64);
  dist::all_to_all(counts_out, counts_in, *group_);
  int64_t total = 0;
  for (int r = 0; r < n; ++r) total += recv_counts[r] = counts_out[r].item<int64_t>();
  auto in = torch::cat(send);
  auto out = torch::empty({total}, in.options());
  dist::all_to_all(out, in, *group_, recv_counts, send_counts);
  std::vector<torch::Tensor> received;
  for (int r = 0, begin = 0; r < n; begin += recv_counts[r], ++r) received.push_back(out.narrow(0, begin, recv_counts[r]));
  return received;
}

std::vector<torch::Tensor> ShardedEmbeddings::forward(const std::vector<torch::Tensor>& ids,
                                                      const std::vector<torch::Tensor>& offsets, bool training) {
  const size_t tables = plan_.size();
  COLOSSAL_CHECK(ids.size() == tables && offsets.size() == tables, "[sharded embeddings] ", options_.name, ": a batch of ",
                 ids.size(), " sparse fields for ", tables, " tables");
  const int64_t B = offsets.empty() ? 0 : offsets[0].size(0);
  COLOSSAL_CHECK(B >= 1, "[sharded embeddings] an empty batch");
  std::vector<torch::Tensor> flat(tables);
  std::vector<Bags> bags(tables);
  for (size_t t = 0; t < tables; ++t) {
    COLOSSAL_CHECK(offsets[t].size(0) == B, "[sharded embeddings] field ", t, " has ", offsets[t].size(0),
                   " bags, field 0 has ", B);
    flat[t] = ids[t].to(torch::kInt64).contiguous();
    bags[t] = bags_of(flat[t], offsets[t].to(torch::kInt64));
    if (flat[t].numel() > 0) {
      const int64_t lo = flat[t].min().item<int64_t>(), hi = flat[t].max().item<int64_t>();
      COLOSSAL_CHECK(lo >= 0 && hi < plan_[t].rows, "[sharded embeddings] ", options_.name, " table ", t, ": id ",
                     lo < 0 ? lo : hi, " outside the table of ", plan_[t].rows, " rows");
    }
  }
  // 1. Ids to the shard owners: [B, then per shard the owner holds: bag lengths (B), ids].
  const int n = world();
  std::vector<torch::Tensor> requests(n);
  for (int o = 0; o < n; ++o) {
    std::vector<torch::Tensor> parts = {torch::tensor({B}, torch::kInt64)};
    for (size_t f : owned_by_[o]) {
      const auto [t, k] = all_shards_[f];
      const auto& plan = plan_[t];
      if (plan.kind != "row") {
        parts.push_back(bags[t].lengths);
        parts.push_back(flat[t]);
        continue;
      }
      const auto mask = flat[t].div(plan.row_block(), "floor").eq(static_cast<int64_t>(k));
      parts.push_back(torch::bincount(bags[t].bag_of_id.masked_select(mask), {}, B));
      parts.push_back(flat[t].masked_select(mask) - plan.shards[k].row_begin);
    }
    requests[o] = torch::cat(parts);
  }
  const auto received = exchange(requests);
  // 2. Each local shard pools every sender's bags in one call.
  std::vector<int64_t> cursor(n, 1), senders_batch(n);
  for (int r = 0; r < n; ++r) senders_batch[r] = received[r][0].item<int64_t>();
  for (auto& l : local_) {
    std::vector<torch::Tensor> all_ids, all_lengths;
    for (int r = 0; r < n; ++r) {
      const auto lengths = received[r].narrow(0, cursor[r], senders_batch[r]);
      const int64_t count = lengths.sum().item<int64_t>();
      all_lengths.push_back(lengths);
      all_ids.push_back(received[r].narrow(0, cursor[r] + senders_batch[r], count));
      cursor[r] += senders_batch[r] + count;
    }
    const auto lengths = torch::cat(all_lengths), local_ids = torch::cat(all_ids);
    const auto local_offsets = lengths.cumsum(0) - lengths;
    l.bags_per_sender = senders_batch;
    l.pooled = training ? l.store->forward(local_ids, local_offsets) : l.store->lookup(local_ids, local_offsets);
  }
  // 3. The pooled pieces back to their requesters.
  std::vector<torch::Tensor> replies(n);
  for (int r = 0; r < n; ++r) {
    std::vector<torch::Tensor> parts = {torch::empty({0})};
    int64_t begin = 0;
    for (int q = 0; q < r; ++q) begin += senders_batch[q];
    for (auto& l : local_) parts.push_back(l.pooled.detach().narrow(0, begin, senders_batch[r]).reshape(-1));
    replies[r] = torch::cat(parts);
  }
  const auto pieces = exchange(replies);
  std::vector<torch::Tensor> out(tables);
  for (size_t t = 0; t < tables; ++t) out[t] = torch::zeros({B, options_.dim});
  for (int o = 0; o < n; ++o) {
    int64_t at = 0;
    for (size_t f : owned_by_[o]) {
      const auto [t, k] = all_shards_[f];
      const auto& s = plan_[t].shards[k];
      out[t].narrow(1, s.col_begin, s.cols).add_(pieces[o].narrow(0, at, B * s.cols).view({B, s.cols}));
      at += B * s.cols;
    }
  }
  for (size_t t = 0; t < tables; ++t) {
    if (options_.pooling == "mean") out[t].div_(bags[t].lengths.clamp_min(1).unsqueeze(1));
    if (training) out[t].set_requires_grad(true);
  }
  if (training) {
    outputs_ = out;
    bag_lengths_.clear();
    for (const auto& b : bags) bag_lengths_.push_back(b.lengths);
  }
  return out;
}

void ShardedEmbeddings::step() {
  COLOSSAL_CHECK(!outputs_.empty(), "[sharded embeddings] step() without a training forward before it");
  const int n = world();
  std::vector<torch::Tensor> grads(outputs_.size());
  for (size_t t = 0; t < outputs_.size(); ++t) {
    auto g = outputs_[t].grad().defined() ? outputs_[t].grad() : torch::zeros_like(outputs_[t]);
    if (options_.pooling == "mean") g = g / bag_lengths_[t].clamp_min(1).unsqueeze(1);
    grads[t] = g / n;  // the data-parallel mean over the group's batches
  }
  std::vector<torch::Tensor> send(n);
  for (int o = 0; o < n; ++o) {
    std::vector<torch::Tensor> parts = {torch::empty({0})};
    for (size_t f : owned_by_[o]) {
      const auto [t, k] = all_shards_[f];
      const auto& s = plan_[t].shards[k];
      parts.push_back(grads[t].narrow(1, s.col_begin, s.cols).contiguous().reshape(-1));
    }
    send[o] = torch::cat(parts);
  }
  const auto received = exchange(send);
  std::vector<int64_t> cursor(n, 0);
  for (auto& l : local_) {
    std::vector<torch::Tensor> parts;
    for (int r = 0; r < n; ++r) {
      const int64_t count = l.bags_per_sender[r] * l.shard.cols;
      parts.push_back(received[r].narrow(0, cursor[r], count).view({l.bags_per_sender[r], l.shard.cols}));
      cursor[r] += count;
    }
    l.pooled.backward(torch::cat(parts));
    l.pooled = torch::Tensor();
    l.store->step();
  }
  outputs_.clear();
}

void ShardedEmbeddings::warm_up(size_t table, const std::vector<int64_t>& counts) {
  for (auto& l : local_)
    if (l.table == table)
      l.store->warm_up(std::vector<int64_t>(counts.begin() + l.shard.row_begin,
                                            counts.begin() + l.shard.row_begin + l.shard.rows));
}

void ShardedEmbeddings::advise(size_t table, const torch::Tensor& ids) {
  for (auto& l : local_)
    if (l.table == table) {
      const auto flat = ids.to(torch::kInt64);
      const auto mine = flat.masked_select(flat.ge(l.shard.row_begin) & flat.lt(l.shard.row_begin + l.shard.rows));
      l.store->advise(mine - l.shard.row_begin);
    }
}

void ShardedEmbeddings::flush() {
  for (auto& l : local_) l.store->flush();
}

CacheStats ShardedEmbeddings::cache_stats() const {
  CacheStats s;
  for (const auto& l : local_) s += l.store->stats();
  return s;
}

void ShardedEmbeddings::reset_cache_stats() {
  for (auto& l : local_) l.store->reset_stats();
}

void ShardedEmbeddings::collect(checkpoint::NamedTensors& tensors, std::map<std::string, std::string>& metadata) {
  flush();
  for (auto& l : local_) {
    const std::string key = options_.name + "." + std::to_string(l.table) + "." + std::to_string(l.index);
    tensors.emplace_back(key + ".weight", l.store->table().detach());
    tensors.emplace_back(key + ".state", l.store->state());
    metadata["shard:" + key] = encode(l.shard, plan_[l.table], options_.store.optimizer.kind);
  }
}

void ShardedEmbeddings::load(const std::vector<std::shared_ptr<checkpoint::SafetensorsFile>>& files) {
  torch::NoGradGuard no_grad;
  const auto& opt = options_.store.optimizer;
  const std::string prefix = "shard:" + options_.name + ".";
  for (auto& l : local_) {
    auto weight = l.store->table().detach();
    auto state = l.store->state();
    int64_t covered = 0;
    for (const auto& file : files)
      for (const auto& [key, text] : file->metadata()) {
        if (key.rfind(prefix, 0) != 0) continue;
        const std::string name = key.substr(6);  // "<name>.<table>.<shard>"
        const auto dot = name.rfind('.');
        const auto table_dot = name.rfind('.', dot - 1);
        if (std::stoul(name.substr(table_dot + 1, dot - table_dot - 1)) != l.table) continue;
        const auto saved = decode(text, file->path(), key);
        const auto& plan = plan_[l.table];
        COLOSSAL_CHECK(saved.total_rows == plan.rows && saved.total_dim == plan.dim, "[sharded embeddings] '",
                       file->path(), "': ", options_.name, " table ", l.table, " was ", saved.total_rows, " x ",
                       saved.total_dim, ", this model's is ", plan.rows, " x ", plan.dim);
        COLOSSAL_CHECK(saved.optimizer == opt.kind, "[sharded embeddings] '", file->path(), "': ", options_.name,
                       " table ", l.table, " was trained with ", saved.optimizer, ", this run uses ", opt.kind,
                       " (--sparse_optimizer)");
        const int64_t r0 = std::max(saved.row_begin, l.shard.row_begin),
                      r1 = std::min(saved.row_begin + saved.rows, l.shard.row_begin + l.shard.rows);
        const int64_t c0 = std::max(saved.col_begin, l.shard.col_begin),
                      c1 = std::min(saved.col_begin + saved.cols, l.shard.col_begin + l.shard.cols);
        if (r0 >= r1 || c0 >= c1) continue;
        const auto src_weight = file->view(name + ".weight"), src_state = file->view(name + ".state");
        auto dst_rows = [&](const torch::Tensor& t) { return t.narrow(0, r0 - l.shard.row_begin, r1 - r0); };
        auto src_rows = [&](const torch::Tensor& t) { return t.narrow(0, r0 - saved.row_begin, r1 - r0); };
        dst_rows(weight).narrow(1, c0 - l.shard.col_begin, c1 - c0)
            .copy_(src_rows(src_weight).narrow(1, c0 - saved.col_begin, c1 - c0));
        for (int64_t b = 0; b < opt.column_blocks(); ++b)  // per-column state, block by block
          dst_rows(state).narrow(1, b * l.shard.cols + c0 - l.shard.col_begin, c1 - c0)
              .copy_(src_rows(src_state).narrow(1, b * saved.cols + c0 - saved.col_begin, c1 - c0));
        if (opt.row_scalars() > 0)  // per-row state: the same in every column shard of a row
          dst_rows(state).narrow(1, opt.column_blocks() * l.shard.cols, opt.row_scalars())
              .copy_(src_rows(src_state).narrow(1, opt.column_blocks() * saved.cols, opt.row_scalars()));
        covered += (r1 - r0) * (c1 - c0);
      }
    COLOSSAL_CHECK(covered == l.shard.rows * l.shard.cols, "[sharded embeddings] the checkpoint's files cover ",
                   covered, " of the ", l.shard.rows * l.shard.cols, " elements of ", options_.name, " table ",
                   l.table, "'s shard on rank ", rank(), " (rows ", l.shard.row_begin, "+", l.shard.rows, ", columns ",
                   l.shard.col_begin, "+", l.shard.cols, "): a rank's file is missing");
    l.store->drop_cache();
  }
}

}  // namespace colossal::recsys
