// Optimizer state saved by tensor-parallel ranks (each its part of a parameter, named
// "<param>@tp<R>of<T>", with where the part sits in the whole) reassembles into the whole
// state at another tp size; parts saved without their place are refused by name there, never
// skipped.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include "core/checkpoint/optimizer_io.h"
#include "core/checkpoint/safetensors.h"
#include "tests/support/errors.h"

namespace colossal::checkpoint {
namespace {

// Whole states: W [5, 3] split by rows over tp 2 (3 rows each, the second rank's last row is
// padding), V [2, 4] split by columns, R [3] replicated.
struct Whole {
  torch::Tensor w = torch::arange(15, torch::kFloat).view({5, 3});
  torch::Tensor v = torch::arange(8, torch::kFloat).view({2, 4}) + 100;
  torch::Tensor r = torch::tensor({7.f, 8.f, 9.f});
};

void set_state(torch::optim::AdamW& opt, const torch::Tensor& p, const torch::Tensor& m, int64_t step) {
  auto s = std::make_unique<torch::optim::AdamWParamState>();
  s->exp_avg(m.clone());
  s->exp_avg_sq(m.clone() * 2);
  s->step(step);
  opt.state()[p.unsafeGetTensorImpl()] = std::move(s);
}

// Writes what tp rank `rank` of 2 saves, in `dir`'s optimizer/rank-R.safetensors.
void save_tp_rank(const std::string& dir, int rank, bool record_places) {
  const Whole whole;
  auto w_part = rank == 0 ? whole.w.narrow(0, 0, 3) : torch::cat({whole.w.narrow(0, 3, 2), torch::zeros({1, 3})});
  auto v_part = whole.v.narrow(1, 2 * rank, 2);
  std::vector<torch::Tensor> params = {torch::zeros({3, 3}), torch::zeros({2, 2}), torch::zeros({3})};
  torch::optim::AdamW opt(params);
  set_state(opt, params[0], w_part, 4);
  set_state(opt, params[1], v_part, 4);
  set_state(opt, params[2], whole.r, 4);
  const std::string tag = "@tp" + std::to_string(rank) + "of2";
  std::vector<OptimizerSlice> slices(3);
  slices[0] = {"W" + tag, 0, params[0]};
  slices[1] = {"V" + tag, 0, params[1]};
  slices[2] = {"R" + tag, 0, params[2]};
  if (record_places) {
    slices[0].whole_shape = {5, 3}, slices[0].split_dim = 0, slices[0].split_start = 3 * rank, slices[0].split_size = rank == 0 ? 3 : 2;
    slices[1].whole_shape = {2, 4}, slices[1].split_dim = 1, slices[1].split_start = 2 * rank, slices[1].split_size = 2;
    slices[2].whole_shape = {3};
  }
  std::map<std::string, std::string> meta = {
      {"world_size", "2"}, {"rank", std::to_string(rank)}, {"layout", "sliced"}, {"plugin", "hybrid"}};
  auto tensors = optimizer_state(opt, slices, &meta);
  std::filesystem::create_directories(dir + "/optimizer");
  save_safetensors(dir + "/optimizer/rank-" + std::to_string(rank) + ".safetensors", tensors, meta);
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "optimizer_io_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(OptimizerIO, TensorParallelPartsReassembleAtAnotherTpSize) {
  const auto dir = fresh_dir("placed");
  save_tp_rank(dir, 0, true);
  save_tp_rank(dir, 1, true);
  OptimizerStateSource source(dir);
  const Whole whole;
  // One process: whole parameters under their plain names.
  std::vector<torch::Tensor> params = {torch::zeros({5, 3}), torch::zeros({2, 4}), torch::zeros({3})};
  torch::optim::AdamW opt(params);
  load_optimizer_state(opt, {{"W", 0, params[0]}, {"V", 0, params[1]}, {"R", 0, params[2]}}, source);
  auto state = [&](int i) { return static_cast<torch::optim::AdamWParamState&>(*opt.state().at(params[i].unsafeGetTensorImpl())); };
  EXPECT_TRUE(torch::equal(state(0).exp_avg(), whole.w)) << state(0).exp_avg();
  EXPECT_TRUE(torch::equal(state(0).exp_avg_sq(), whole.w * 2));
  EXPECT_TRUE(torch::equal(state(1).exp_avg(), whole.v)) << state(1).exp_avg();
  EXPECT_TRUE(torch::equal(state(2).exp_avg(), whole.r));
  EXPECT_EQ(state(0).step(), 4);
  // A ZeRO slice of the whole (elements 4..10 of W flattened) under one process.
  auto piece = torch::zeros({6});
  torch::optim::AdamW sliced({piece});
  load_optimizer_state(sliced, {{"W", 4, piece, 15}}, source);
  auto& s = static_cast<torch::optim::AdamWParamState&>(*sliced.state().at(piece.unsafeGetTensorImpl()));
  EXPECT_TRUE(torch::equal(s.exp_avg(), whole.w.reshape({-1}).narrow(0, 4, 6)));
  // tp 4 over W's rows (padded to 8: 2 rows each; the last rank holds only padding).
  for (int r = 0; r < 4; ++r) {
    auto part = torch::zeros({2, 3});
    torch::optim::AdamW o({part});
    OptimizerSlice sl{"W@tp" + std::to_string(r) + "of4", 0, part};
    sl.whole_shape = {5, 3}, sl.split_dim = 0, sl.split_start = 2 * r, sl.split_size = std::clamp<int64_t>(5 - 2 * r, 0, 2);
    load_optimizer_state(o, {sl}, source);
    auto& st = static_cast<torch::optim::AdamWParamState&>(*o.state().at(part.unsafeGetTensorImpl()));
    auto want = torch::zeros({2, 3});
    if (sl.split_size > 0) want.narrow(0, 0, sl.split_size).copy_(whole.w.narrow(0, 2 * r, sl.split_size));
    EXPECT_TRUE(torch::equal(st.exp_avg(), want)) << "tp rank " << r << " of 4\n" << st.exp_avg();
  }
}

TEST(OptimizerIO, PartsWithoutTheirPlaceAreRefusedAtAnotherTpSize) {
  const auto dir = fresh_dir("unplaced");
  save_tp_rank(dir, 0, false);
  save_tp_rank(dir, 1, false);
  OptimizerStateSource source(dir);
  std::vector<torch::Tensor> params = {torch::zeros({5, 3})};
  torch::optim::AdamW opt(params);
  const auto msg = testing::error_message_of([&] { load_optimizer_state(opt, {{"W", 0, params[0]}}, source); });
  EXPECT_NE(msg.find("optimizer state of 'W' was saved at another tensor-parallel size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("resume at the tp size it was saved with"), std::string::npos) << msg;
  // At the size it was saved with, the names match and it loads.
  auto part = torch::zeros({3, 3});
  torch::optim::AdamW same({part});
  load_optimizer_state(same, {{"W@tp0of2", 0, part}}, source);
  EXPECT_TRUE(same.state().count(part.unsafeGetTensorImpl()));
}

}  // namespace
}  // namespace colossal::checkpoint
