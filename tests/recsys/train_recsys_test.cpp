// train_recsys driven as a user drives it (through `colossal run` for several ranks): the
// data-parallel plugins equal one process step for step, a checkpoint resumes on another number
// of ranks, bad input is named.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/common/fs.h"
#include "tests/support/multirank.h"

namespace recsys_train_test {
namespace fs = colossal::fs;

struct Run {
  int rc = 0;
  std::string output;
  std::map<int64_t, double> loss;  // by step
  std::map<int64_t, double> auc;   // by step
  double evictions = 0;            // cached tables: the last logged count
};

Run train_recsys(int ranks, const std::string& name, const std::string& flags) {
  const std::string bin = colossal::testing::binary_dir();
  const std::string dir = ::testing::TempDir() + "train_recsys_" + name + "_" + std::to_string(::getpid());
  const std::string out = dir + ".out";
  const std::string prefix = ranks > 1 ? bin + "/colossal run --nproc_per_node " + std::to_string(ranks) + " -- " : "";
  const std::string cmd = prefix + bin + "/train_recsys --save_dir " + dir + " --log_interval 1 " + flags + " > " + out + " 2>&1";
  Run r;
  r.rc = std::system(cmd.c_str());
  std::ifstream so(out);
  r.output = cmd + "\n" + std::string(std::istreambuf_iterator<char>(so), std::istreambuf_iterator<char>());
  std::ifstream log(dir + "/log.jsonl");
  std::string line;
  while (std::getline(log, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("event") && j["event"] == "eval") r.auc[j["step"]] = j["auc"];
    else if (j.contains("loss")) r.loss[j["step"]] = j["loss"];
    if (j.contains("cache_evictions")) r.evictions = j["cache_evictions"];
  }
  return r;
}

std::string dir_of(const std::string& name) {
  return ::testing::TempDir() + "train_recsys_" + name + "_" + std::to_string(::getpid());
}

// Short runs on MovieLens: 12 steps of a 512-sample global batch.
const std::string kShort = "--max_steps 12 --load_checkpoint none --held_out_fraction 0.9 ";

TEST(TrainRecsys, DataParallelPluginsEqualOneProcess) {
  for (const char* model : {"dlrm", "deepfm"}) {
    fs::remove_all(dir_of(std::string("one_") + model));
    const auto one = train_recsys(1, std::string("one_") + model, kShort + "--model " + model);
    ASSERT_EQ(one.rc, 0) << one.output;
    ASSERT_EQ(one.loss.size(), 12u) << one.output;
    for (const char* plugin : {"ddp", "zero2"}) {
      const std::string name = std::string(plugin) + "_" + model;
      fs::remove_all(dir_of(name));
      const auto two = train_recsys(2, name, kShort + "--model " + model + " --plugin " + plugin);
      ASSERT_EQ(two.rc, 0) << two.output;
      for (const auto& [step, loss] : one.loss)
        EXPECT_NEAR(two.loss.at(step), loss, 1e-5 * std::abs(loss)) << model << " " << plugin << " step " << step;
      EXPECT_NEAR(two.auc.at(12), one.auc.at(12), 1e-5) << model << " " << plugin;
    }
  }
}

TEST(TrainRecsys, ResumesOnAnotherNumberOfRanks) {
  fs::remove_all(dir_of("straight"));
  const auto straight = train_recsys(2, "straight", kShort + "--save_interval 6 --keep_checkpoints 0");
  ASSERT_EQ(straight.rc, 0) << straight.output;
  // From the straight run's step 6, on one process: steps 7..12 as the straight run did them.
  fs::remove_all(dir_of("resumed"));
  const auto resumed = train_recsys(1, "resumed", "--max_steps 12 --held_out_fraction 0.9 --load_checkpoint " +
                                                      dir_of("straight") + "/checkpoints/step-6");
  ASSERT_EQ(resumed.rc, 0) << resumed.output;
  EXPECT_EQ(resumed.loss.count(6), 0u) << "resumed runs start after the checkpoint";
  for (int64_t step = 7; step <= 12; ++step)
    EXPECT_NEAR(resumed.loss.at(step), straight.loss.at(step), 1e-5 * std::abs(straight.loss.at(step))) << step;
}

TEST(TrainRecsys, CachedTablesEqualResidentOnesAndOneProcess) {
  // Users (671) in 300 slots and movies (9,066) in 454 evict all the time; a 100% cache never
  // does; both run the same row-wise updates.
  const std::string batch = "--batch_size 128 ";
  const std::string cached = kShort + batch + "--model deepfm --cache_ratio 0.05 --cache_min_slots 300 "
                             "--sparse_optimizer adamw --sparse_lr 0.01 ";
  fs::remove_all(dir_of("cache_small"));
  const auto small = train_recsys(1, "cache_small", cached);
  fs::remove_all(dir_of("cache_whole"));
  const auto whole = train_recsys(1, "cache_whole", kShort + batch +
                                  "--model deepfm --cache_ratio 1 --sparse_optimizer adamw --sparse_lr 0.01");
  fs::remove_all(dir_of("cache_two"));
  const auto two = train_recsys(2, "cache_two", cached + "--plugin zero2");
  for (const auto* r : {&small, &whole, &two}) ASSERT_EQ(r->rc, 0) << r->output;
  ASSERT_EQ(small.loss.size(), 12u) << small.output;
  EXPECT_GT(small.evictions, 100) << small.output;
  EXPECT_EQ(whole.evictions, 0) << whole.output;
  for (const auto& [step, loss] : whole.loss) {
    EXPECT_NEAR(small.loss.at(step), loss, 1e-6 * std::abs(loss)) << "step " << step;
    EXPECT_NEAR(two.loss.at(step), loss, 1e-5 * std::abs(loss)) << "2 ranks, step " << step;
  }
  EXPECT_NEAR(small.auc.at(12), whole.auc.at(12), 1e-6);
  EXPECT_NEAR(two.auc.at(12), whole.auc.at(12), 1e-5);
  // The learning moved the cached tables: not the start's figures.
  EXPECT_NE(whole.loss.at(12), whole.loss.at(1));
}

TEST(TrainRecsys, CachedTablesResumeOnAnotherNumberOfRanks) {
  const std::string cached = "--cache_ratio 0.05 --cache_min_slots 300 --batch_size 128 --held_out_fraction 0.9 ";
  fs::remove_all(dir_of("cache_straight"));
  const auto straight = train_recsys(2, "cache_straight", cached + "--max_steps 12 --load_checkpoint none "
                                                          "--save_interval 6 --keep_checkpoints 0");
  ASSERT_EQ(straight.rc, 0) << straight.output;
  fs::remove_all(dir_of("cache_resumed"));
  const auto resumed = train_recsys(1, "cache_resumed", cached + "--max_steps 12 --load_checkpoint " +
                                                            dir_of("cache_straight") + "/checkpoints/step-6");
  ASSERT_EQ(resumed.rc, 0) << resumed.output;
  for (int64_t step = 7; step <= 12; ++step)
    EXPECT_NEAR(resumed.loss.at(step), straight.loss.at(step), 1e-5 * std::abs(straight.loss.at(step))) << step;
}

TEST(TrainRecsys, DefaultRunLearnsMovieLens) {
  fs::remove_all(dir_of("default"));
  const auto r = train_recsys(2, "default", "");
  ASSERT_EQ(r.rc, 0) << r.output;
  ASSERT_EQ(r.auc.size(), 3u) << r.output;  // before training and after each of the 2 epochs
  EXPECT_LT(r.auc.begin()->second, 0.6) << r.output;
  EXPECT_GE(r.auc.rbegin()->second, 0.75) << r.output;
}

TEST(TrainRecsys, BadInputIsNamed) {
  const std::string bin = colossal::testing::binary_dir();
  auto run = [&](const std::string& flags) {
    const std::string out = ::testing::TempDir() + "train_recsys_bad_" + std::to_string(::getpid());
    const int rc = std::system((bin + "/train_recsys " + flags + " > " + out + " 2>&1").c_str());
    std::ifstream in(out);
    return std::make_pair(rc, std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  };
  auto [rc, out] = run("--model nonsense");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--model: expected dlrm or deepfm, got 'nonsense'"), std::string::npos) << out;
  std::tie(rc, out) = run("--r_data /nonexistent/Rdata --save_dir " + ::testing::TempDir() + "rs_bad");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("/nonexistent/Rdata.rdx"), std::string::npos) << out;
  std::tie(rc, out) = run("--plugin gemini --save_dir " + ::testing::TempDir() + "rs_bad");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--plugin gemini"), std::string::npos) << out;
  std::tie(rc, out) = run("--sharding diagonal");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--sharding: expected none, auto, table, row or column, got 'diagonal'"), std::string::npos) << out;
  std::tie(rc, out) = run("--offload_dir /tmp");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--offload_dir holds cached or sharded tables"), std::string::npos) << out;
  std::tie(rc, out) = run("--cache_ratio 0.5 --offload_dir /nonexistent/tier --save_dir " + ::testing::TempDir() + "rs_bad");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("offload_dir '/nonexistent/tier' is not an existing directory"), std::string::npos) << out;
}

// Sharded tables (table-, row- and column-wise; DeepFM's first-order tables are one column
// wide) on 2 and 4 ranks take the steps one process takes with the same flags.
TEST(TrainRecsys, ShardedTablesEqualOneProcess) {
  const std::string flags = kShort + "--model deepfm --batch_size 256 --sparse_optimizer adamw --sparse_lr 0.01 ";
  for (const char* sharding : {"table", "row", "column"}) {
    const std::string name = std::string("shard_one_") + sharding;
    fs::remove_all(dir_of(name));
    const auto one = train_recsys(1, name, flags + "--sharding " + sharding);
    ASSERT_EQ(one.rc, 0) << one.output;
    ASSERT_EQ(one.loss.size(), 12u) << one.output;
    EXPECT_NE(one.loss.at(12), one.loss.at(1));
    for (int ranks : {2, 4}) {
      const std::string many = std::string("shard_") + sharding + "_" + std::to_string(ranks);
      fs::remove_all(dir_of(many));
      const auto r = train_recsys(ranks, many, flags + "--sharding " + sharding);
      ASSERT_EQ(r.rc, 0) << r.output;
      for (const auto& [step, loss] : one.loss)
        EXPECT_NEAR(r.loss.at(step), loss, 1e-5 * std::abs(loss)) << sharding << " " << ranks << " ranks, step " << step;
      EXPECT_NEAR(r.auc.at(12), one.auc.at(12), 1e-5) << sharding << " " << ranks << " ranks";
    }
  }
}

// A checkpoint of row-wise shards from 2 ranks resumes on 1 rank column-wise and on 4 ranks
// table-wise, continuing the straight run's steps.
TEST(TrainRecsys, ShardedTablesResumeOnAnotherNumberOfRanksAndPlan) {
  const std::string flags = "--model deepfm --batch_size 256 --held_out_fraction 0.9 --max_steps 12 ";
  fs::remove_all(dir_of("shard_straight"));
  const auto straight = train_recsys(2, "shard_straight", flags + "--sharding row --load_checkpoint none "
                                                          "--save_interval 6 --keep_checkpoints 0");
  ASSERT_EQ(straight.rc, 0) << straight.output;
  const std::string step6 = dir_of("shard_straight") + "/checkpoints/step-6";
  for (const auto& [ranks, sharding] : std::vector<std::pair<int, std::string>>{{1, "column"}, {4, "table"}}) {
    const std::string name = "shard_resumed_" + sharding;
    fs::remove_all(dir_of(name));
    const auto resumed = train_recsys(ranks, name, flags + "--sharding " + sharding + " --load_checkpoint " + step6);
    ASSERT_EQ(resumed.rc, 0) << resumed.output;
    for (int64_t step = 7; step <= 12; ++step)
      EXPECT_NEAR(resumed.loss.at(step), straight.loss.at(step), 1e-5 * std::abs(straight.loss.at(step)))
          << sharding << " step " << step;
  }
  // Replicated tables cannot resume sharded ones: named, not half-loaded.
  fs::remove_all(dir_of("shard_none"));
  const auto none = train_recsys(1, "shard_none", flags + "--load_checkpoint " + step6);
  EXPECT_NE(none.rc, 0);
  EXPECT_NE(none.output.find("holds sharded embedding tables"), std::string::npos) << none.output;
}

}  // namespace recsys_train_test
