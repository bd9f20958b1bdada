// Packed batches (several documents per row, each attending to itself, positions restarting):
// the same loss and gradients as one document per row, for each family's attention (rotary,
// learned positions, soft caps with sliding windows, per-head norms), in one process and under
// tensor and sequence parallelism on 2 real ranks; ring attention refuses them by name. NEFTune's
// noise: its bound, its seed, training only.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/dist/mesh.h"
#include "core/dist/runtime.h"
#include "core/dist/collectives.h"
#include "core/nn/neftune.h"
#include "core/parallel/tensor/checkpoint.h"
#include "core/parallel/tensor/shard.h"
#include "llama/model.h"
#include "tests/llama/tiny_llama.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::llama {
namespace {

constexpr int64_t kRow = 32;  // the tiny models' max_position_embeddings

// Seven documents of 3..11 tokens, the first third of each a prompt (no targets).
struct Documents {
  std::vector<torch::Tensor> ids, labels;
  Documents() {
    auto g = torch::make_generator<at::CPUGeneratorImpl>(7);
    for (int64_t n : {9, 11, 7, 5, 6, 4, 3}) {
      auto ids_n = torch::randint(100, {n}, g, torch::kInt64);
      auto labels_n = ids_n.clone();
      labels_n.narrow(0, 0, n / 3).fill_(-100);
      ids.push_back(ids_n);
      labels.push_back(labels_n);
    }
  }
  // One per row, padded to the longest (pad 0, no targets).
  std::pair<torch::Tensor, torch::Tensor> one_per_row() const {
    auto x = torch::zeros({7, 11}, torch::kInt64), y = torch::full({7, 11}, -100, torch::kInt64);
    for (size_t d = 0; d < ids.size(); ++d) {
      x[static_cast<int64_t>(d)].narrow(0, 0, ids[d].size(0)).copy_(ids[d]);
      y[static_cast<int64_t>(d)].narrow(0, 0, ids[d].size(0)).copy_(labels[d]);
    }
    return {x, y};
  }
  // Two rows: 9 + 11 + 7 + 5 = 32 (full) and 6 + 4 + 3 = 13 then padding; each document's first
  // label masked (it would be predicted from the document before).
  struct Packed {
    torch::Tensor ids, labels, positions;
  };
  Packed packed() const {
    Packed p{torch::zeros({2, kRow}, torch::kInt64), torch::full({2, kRow}, -100, torch::kInt64),
             torch::zeros({2, kRow}, torch::kInt64)};
    int64_t row = 0, col = 0;
    for (size_t d = 0; d < ids.size(); ++d) {
      const int64_t n = ids[d].size(0);
      if (d == 4) row = 1, col = 0;
      p.ids[row].narrow(0, col, n).copy_(ids[d]);
      p.labels[row].narrow(0, col, n).copy_(labels[d]);
      p.labels[row][col] = -100;
      p.positions[row].narrow(0, col, n).copy_(torch::arange(n));
      col += n;
    }
    p.positions[1].narrow(0, col, kRow - col).copy_(torch::arange(kRow - col));
    return p;
  }
};

struct Result {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;  // whole tensors
};

Result run(const LlamaConfig& c, const parallel::ParallelContext& ctx, bool packed) {
  torch::manual_seed(5);
  LlamaForCausalLM model(c, ctx);
  parallel::register_partial_gradient_hooks(*model);
  const auto specs = parallel::collect_shard_specs(*model);
  Documents docs;
  torch::Tensor loss;
  if (packed) {
    auto p = docs.packed();
    loss = model->loss(p.ids, p.labels, p.positions);
  } else {
    auto [x, y] = docs.one_per_row();
    loss = model->loss(x, y);
  }
  loss.backward();
  if (ctx.sp_mode != parallel::SequenceParallelMode::kSplitGather && ctx.sp_size() > 1)
    for (auto& p : model->parameters()) dist::all_reduce(p.mutable_grad(), ctx.sp);
  Result r{loss.item<double>(), {}};
  for (const auto& item : model->named_parameters()) {
    auto it = specs.find(item.key());
    r.grads[item.key()] =
        it == specs.end() ? item.value().grad().clone() : parallel::gather_full(item.value().grad(), it->second);
  }
  return r;
}

void expect_same(const Result& want, const Result& got, const std::string& what) {
  EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::abs(want.loss)) << what;
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
  for (const auto& [name, grad] : want.grads) {
    const double scale = grad.abs().max().item<double>();
    EXPECT_LE((got.grads.at(name) - grad).abs().max().item<double>(), 1e-5 * scale + 1e-7)
        << what << ": gradient of " << name;
  }
}

std::vector<std::pair<std::string, LlamaConfig>> families() {
  auto gemma2 = tiny_test_gemma2(false);
  gemma2.sliding_window = 4;  // inside the longer documents
  return {{"llama", tiny_test_llama()}, {"qwen3", tiny_test_qwen3()}, {"gpt2", tiny_test_gpt2(false)},
          {"gemma2", gemma2}};
}

TEST(LlamaPacking, DocumentMaskIsCausalWithinEachDocument) {
  auto mask = document_causal_mask(torch::tensor({0, 1, 2, 0, 1, 0}, torch::kInt64).unsqueeze(0));
  ASSERT_EQ(mask.sizes(), (std::vector<int64_t>{1, 1, 6, 6}));
  auto want = torch::tensor({1, 0, 0, 0, 0, 0,  //
                             1, 1, 0, 0, 0, 0,  //
                             1, 1, 1, 0, 0, 0,  //
                             0, 0, 0, 1, 0, 0,  //
                             0, 0, 0, 1, 1, 0,  //
                             0, 0, 0, 0, 0, 1}).to(torch::kBool).view({1, 1, 6, 6});
  EXPECT_TRUE(torch::equal(mask, want)) << mask;
}

TEST(LlamaPacking, PackedRowsEqualOneDocumentPerRow) {
  for (const auto& [name, c] : families()) expect_same(run(c, {}, false), run(c, {}, true), name);
}

TEST(LlamaPackingParallel, PackedRowsMatchOneProcessUnderTensorAndSequenceParallelism) {
  using Mode = parallel::SequenceParallelMode;
  testing::run_ranks(2, [] {
    for (auto mode : {Mode::kNone, Mode::kAllToAll, Mode::kSplitGather}) {
      const bool sp = mode == Mode::kAllToAll;
      dist::ProcessGroupMesh mesh({{"sp", sp ? 2 : 1}, {"tp", sp ? 1 : 2}});
      parallel::ParallelContext ctx;
      ctx.tp = mesh.group("tp");
      ctx.sp = mesh.group("sp");
      ctx.sp_mode = mode;
      for (const auto& [name, c] : families())
        expect_same(run(c, {}, false), run(c, ctx, true), name + " " + parallel::to_string(mode));
    }
    parallel::ParallelContext ring;
    ring.sp = dist::world_group();
    ring.sp_mode = Mode::kRingAttn;
    auto msg = testing::error_message_of([&] { run(tiny_test_llama(), ring, true); });
    EXPECT_NE(msg.find("packed sequences under ring_attn are not supported"), std::string::npos) << msg;
  });
}

TEST(Neftune, NoiseIsBoundedBySequenceAndWidthAndFollowsItsSeed) {
  auto a = nn::neftune_noise({2, 16, 64}, 5.0, 11), b = nn::neftune_noise({2, 16, 64}, 5.0, 11);
  const double bound = 5.0 / std::sqrt(16.0 * 64);
  EXPECT_TRUE(torch::equal(a, b)) << "the same seed, the same noise";
  EXPECT_FALSE(torch::equal(a, nn::neftune_noise({2, 16, 64}, 5.0, 12)));
  EXPECT_LE(a.abs().max().item<double>(), bound);
  EXPECT_GT(a.abs().max().item<double>(), 0.95 * bound) << "uniform over [-m, m]";
  EXPECT_NEAR(a.mean().item<double>(), 0.0, 0.05 * bound);
  auto msg = testing::error_message_of([] { nn::neftune_noise({16, 64}, 5.0, 1); });
  EXPECT_NE(msg.find("expected embeddings [batch, seq_len, hidden]"), std::string::npos) << msg;
}

TEST(Neftune, ChangesTrainingLossesOnly) {
  auto c = tiny_test_llama();
  auto x = torch::randint(100, {2, 16}, torch::kInt64);
  torch::manual_seed(5);
  LlamaForCausalLM model(c);
  torch::NoGradGuard no_grad;
  const double plain = model->loss(x, x).item<double>();
  model->set_neftune(5.0, 3);
  const double noisy = model->loss(x, x).item<double>();
  EXPECT_NE(noisy, plain);
  model->eval();
  EXPECT_EQ(model->loss(x, x).item<double>(), plain) << "no noise outside training";
  model->train();
  model->set_neftune(5.0, 3);
  EXPECT_EQ(model->loss(x, x).item<double>(), noisy) << "the same seed and count, the same noise";
}

// Every tensor-parallel rank adds the same noise: the sharded model's loss is the whole one's.
TEST(LlamaPackingParallel, NeftuneNoiseAgreesOverTensorParallelRanks) {
  auto c = tiny_test_llama();
  auto g = torch::make_generator<at::CPUGeneratorImpl>(9);  // every rank's process draws the same batch
  auto x = torch::randint(100, {2, 16}, g, torch::kInt64);
  auto noisy_loss = [&](const parallel::ParallelContext& ctx) {
    torch::manual_seed(5);
    LlamaForCausalLM model(c, ctx);
    model->set_neftune(5.0, 3);
    torch::NoGradGuard no_grad;
    return model->loss(x, x).item<double>();
  };
  const double whole = noisy_loss({});
  testing::run_ranks(2, [&] {
    for (const char* mode : {"tp", "all_to_all"}) {
      parallel::ParallelContext ctx;
      if (std::string(mode) == "tp") {
        ctx.tp = dist::world_group();
      } else {
        ctx.sp = dist::world_group();
        ctx.sp_mode = parallel::SequenceParallelMode::kAllToAll;
      }
      EXPECT_NEAR(noisy_loss(ctx), whole, 1e-5 * std::abs(whole)) << mode;
    }
  });
}

}  // namespace
}  // namespace colossal::llama
