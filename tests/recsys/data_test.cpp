// recsys/ data: R's data files read without R (core/data/r_data.h) on the real packages setup
// fetches, MovieLens as click data split by time, the synthetic Criteo-shaped stream.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <fstream>
#include <map>

#include "core/common/env.h"
#include "core/common/fs.h"
#include "core/data/r_data.h"
#include "recsys/data/movielens.h"
#include "recsys/data/synthetic.h"
#include "tests/support/errors.h"

namespace recsys_data_test {
using namespace colossal;
using namespace colossal::recsys;

TEST(RData, ReadsBothRealPackagesDatasets) {
  const auto names = data::r_lazyload_names(default_movielens_r_data());
  EXPECT_NE(std::find(names.begin(), names.end(), "movielens"), names.end());
  const data::RDataFrame frame(data::read_r_object(default_movielens_r_data(), "movielens"), "movielens");
  EXPECT_EQ(frame.rows(), 100004);
  for (const char* c : {"movieId", "title", "year", "genres", "userId", "rating", "timestamp"}) EXPECT_TRUE(frame.has(c)) << c;
  const auto titles = frame.strings("title");  // a factor
  EXPECT_EQ(titles[0], "Dangerous Minds");
  EXPECT_EQ(frame.strings("genres")[1], "Animation|Children|Drama|Musical");
  // The other R dataset the project reads: janeaustenr's novels, character vectors.
  const auto austen = cache_root() + "/corpus/janeaustenr/usr/lib/R/site-library/janeaustenr/data/Rdata";
  const auto emma = data::read_r_object(austen, "emma");
  EXPECT_EQ(emma.type, 16);
  EXPECT_EQ(emma.strings[0], "EMMA");
}

TEST(RData, ErrorsNameTheFileAndObject) {
  const auto austen = cache_root() + "/corpus/janeaustenr/usr/lib/R/site-library/janeaustenr/data/Rdata";
  auto msg = colossal::testing::error_message_of([&] { data::read_r_object(austen, "movielens"); });
  EXPECT_NE(msg.find("has no object 'movielens'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("emma"), std::string::npos) << msg;  // lists what it has
  msg = colossal::testing::error_message_of([] { data::read_r_object("/nonexistent/Rdata", "x"); });
  EXPECT_NE(msg.find("/nonexistent/Rdata.rdx"), std::string::npos) << msg;
  // A truncated database: the object's record is cut short.
  const auto dir = ::testing::TempDir() + "rdata_" + std::to_string(::getpid());
  fs::make_dirs(dir);
  fs::copy_file(default_movielens_r_data() + ".rdx", dir + "/Rdata.rdx");
  fs::copy_file(default_movielens_r_data() + ".rdb", dir + "/Rdata.rdb");
  std::ifstream whole(dir + "/Rdata.rdb", std::ios::binary | std::ios::ate);
  ASSERT_EQ(::truncate((dir + "/Rdata.rdb").c_str(), static_cast<off_t>(whole.tellg()) / 2), 0);
  msg = colossal::testing::error_message_of([&] {
    for (const auto& n : data::r_lazyload_names(dir + "/Rdata")) data::read_r_object(dir + "/Rdata", n);
  });
  EXPECT_NE(msg.find(dir + "/Rdata.rdb' object"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  fs::remove_all(dir);
}

TEST(MovieLens, ClickDataSplitByTime) {
  const auto split = load_movielens();
  EXPECT_EQ(split.train.size() + split.held_out.size(), 100004);
  EXPECT_EQ(split.held_out.size(), 20001);
  const auto sizes = split.train.table_sizes();
  ASSERT_EQ(sizes.size(), 6u);
  EXPECT_EQ(sizes[0], 671);   // users
  EXPECT_EQ(sizes[1], 9066);  // movies
  EXPECT_EQ(sizes[2], 20);    // genres
  EXPECT_GT(split.train.positive_rate(), 0.4);
  EXPECT_LT(split.train.positive_rate(), 0.6);
  split.train.validate("train");
  split.held_out.validate("held out");
  // Genres are bags: some samples hold several ids.
  const auto& genres = split.train.fields[2];
  int64_t longest = 0;
  for (int64_t i = 0; i < genres.samples(); ++i) longest = std::max(longest, genres.offsets[i + 1] - genres.offsets[i]);
  EXPECT_GE(longest, 3);
  // History features: a user's first training rating has no history (count 0, mean at the prior).
  const auto first = split.train.dense[0];
  EXPECT_NEAR(first[3].item<float>(), 0.0f, 1e-6);
  EXPECT_FLOAT_EQ(first[4].item<float>(), 0.0f);
  // Without online history the held-out rows' history stops at the training period: it differs.
  const auto offline = load_movielens({.online_history = false});
  EXPECT_TRUE(torch::equal(offline.train.dense, split.train.dense));
  EXPECT_FALSE(torch::equal(offline.held_out.dense, split.held_out.dense));
}

TEST(Synthetic, SlicesAgreeAndIdsFollowAPowerLaw) {
  SyntheticOptions o{.samples = 20000, .fields = 4, .table_size = 10000, .seed = 3};
  const auto whole = make_synthetic(o, 0, 20000);
  const auto part = make_synthetic(o, 500, 100);
  whole.validate("synthetic");
  EXPECT_TRUE(torch::equal(whole.dense.slice(0, 500, 600), part.dense));
  EXPECT_TRUE(torch::equal(whole.labels.slice(0, 500, 600), part.labels));
  EXPECT_EQ(std::vector<int64_t>(whole.fields[2].ids.begin() + 500, whole.fields[2].ids.begin() + 600),
            part.fields[2].ids);
  std::map<int64_t, int64_t> counts;
  for (int64_t id : whole.fields[0].ids) ++counts[id];
  std::vector<int64_t> c;
  for (const auto& [_, k] : counts) c.push_back(k);
  std::sort(c.rbegin(), c.rend());
  int64_t head = 0;
  for (size_t i = 0; i < 100 && i < c.size(); ++i) head += c[i];  // the hottest 1% of the table
  EXPECT_GT(head, 20000 / 5) << "a power law puts much of the traffic on few ids";
  const double rate = whole.positive_rate();
  EXPECT_GT(rate, 0.2);
  EXPECT_LT(rate, 0.8);
}

}  // namespace recsys_data_test
