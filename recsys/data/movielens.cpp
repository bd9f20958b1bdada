#include "recsys/data/movielens.h"

#include <torch/torch.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <numeric>
#include <sstream>

#include "core/common/check.h"
#include "core/common/env.h"
#include "core/data/r_data.h"

namespace colossal::recsys {
namespace {

// Dense indices for the distinct values, in sorted order.
std::map<int64_t, int64_t> index_of(const std::vector<int32_t>& values) {
  std::map<int64_t, int64_t> index;
  for (int32_t v : values) index.emplace(v, 0);
  int64_t next = 0;
  for (auto& [_, i] : index) i = next++;
  return index;
}

}  // namespace

std::string default_movielens_r_data() {
  return cache_root() + "/corpus/dslabs/usr/lib/R/site-library/dslabs/data/Rdata";
}

CtrSplit load_movielens(const MovieLensOptions& o) {
  COLOSSAL_CHECK(o.held_out_fraction > 0 && o.held_out_fraction < 1, "[movielens] held_out_fraction ",
                 o.held_out_fraction, ": expected in (0, 1)");
  const std::string base = o.r_data.empty() ? default_movielens_r_data() : o.r_data;
  const data::RDataFrame frame(data::read_r_object(base, "movielens"), base + " movielens");
  const int64_t n = frame.rows();
  const auto& users = frame.ints("userId");
  const auto& movies = frame.ints("movieId");
  const auto& years = frame.ints("year");
  const auto ratings = frame.reals("rating");
  const auto timestamps = frame.reals("timestamp");
  const auto genres = frame.strings("genres");
  for (int64_t i = 0; i < n; ++i) {
    const auto where = [&] { return base + " movielens row " + std::to_string(i + 1); };
    COLOSSAL_CHECK(users[i] != INT32_MIN, "[movielens] ", where(), ": userId is NA");
    COLOSSAL_CHECK(movies[i] != INT32_MIN, "[movielens] ", where(), ": movieId is NA");
    COLOSSAL_CHECK(std::isfinite(ratings[i]) && ratings[i] >= 0 && ratings[i] <= 5, "[movielens] ", where(),
                   ": rating ", ratings[i], ", expected 0 to 5");
    COLOSSAL_CHECK(std::isfinite(timestamps[i]), "[movielens] ", where(), ": timestamp is NA");
  }

  // In time order: the split is a cut in time.
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return timestamps[a] < timestamps[b]; });

  const auto user_index = index_of(users);
  const auto movie_index = index_of(movies);
  int32_t min_year = INT32_MAX, max_year = INT32_MIN;
  for (int32_t y : years)
    if (y != INT32_MIN) min_year = std::min(min_year, y), max_year = std::max(max_year, y);
  std::map<std::string, int64_t> genre_index;
  auto split_genres = [](const std::string& g) {
    std::vector<std::string> out;
    std::stringstream ss(g);
    std::string item;
    while (std::getline(ss, item, '|'))
      if (!item.empty()) out.push_back(item);
    if (out.empty()) out.push_back("(no genres listed)");
    return out;
  };
  for (const auto& g : genres)
    for (const auto& name : split_genres(g)) genre_index.emplace(name, 0);
  int64_t next = 0;
  for (auto& [_, i] : genre_index) i = next++;

  // History features: each rating sees the user's and the movie's earlier ratings (mean, shrunk
  // toward the overall mean, and count); never its own. Online (the default), as a deployed
  // recommender sees feedback arrive, a held-out rating's history includes the held-out ratings
  // before it (the model's weights still learn from the training period only); otherwise the
  // history stops where training does.
  const auto cut = static_cast<int64_t>(std::llround(n * (1 - o.held_out_fraction)));
  double overall = 0;
  for (int64_t k = 0; k < cut; ++k) overall += ratings[order[k]];
  overall /= std::max<int64_t>(1, cut);
  std::map<int64_t, std::pair<double, int64_t>> user_history, movie_history;  // sum, count
  auto history = [&](const std::pair<double, int64_t>& h, float* out) {
    constexpr double kPrior = 5;  // ratings' worth of the overall mean
    out[0] = static_cast<float>((h.first + kPrior * overall) / (h.second + kPrior) - overall);
    out[1] = static_cast<float>(std::log1p(static_cast<double>(h.second)) / 5);
  };

  CtrDataset all;
  all.dense_names = {"year", "year_known", "genre_count", "user_mean", "user_count", "movie_mean", "movie_count"};
  std::vector<SparseField> fields = {
      {"user", static_cast<int64_t>(user_index.size()), {}, {0}},
      {"movie", static_cast<int64_t>(movie_index.size()), {}, {0}},
      {"genres", static_cast<int64_t>(genre_index.size()), {}, {0}},
      {"year", min_year <= max_year ? max_year - min_year + 2 : 1, {}, {0}},  // 0: unknown
      {"hour", 24, {}, {0}},
      {"weekday", 7, {}, {0}},
  };
  const int64_t D = static_cast<int64_t>(all.dense_names.size());
  auto dense = torch::empty({n, D});
  auto labels = torch::empty({n});
  auto* d = dense.data_ptr<float>();
  auto* l = labels.data_ptr<float>();
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = order[k];
    const auto g = split_genres(genres[i]);
    const bool known = years[i] != INT32_MIN;
    const auto t = static_cast<int64_t>(timestamps[i]);
    const int64_t values[] = {user_index.at(users[i]), movie_index.at(movies[i]), -1,
                              known ? years[i] - min_year + 1 : 0, (t / 3600) % 24, (t / 86400 + 4) % 7};
    for (size_t f = 0; f < fields.size(); ++f) {
      if (f == 2)
        for (const auto& name : g) fields[f].ids.push_back(genre_index.at(name));
      else
        fields[f].ids.push_back(values[f]);
      fields[f].offsets.push_back(static_cast<int64_t>(fields[f].ids.size()));
    }
    float* row = d + D * k;
    row[0] = known ? (years[i] - 1990) / 30.0f : 0.0f;
    row[1] = known ? 1.0f : 0.0f;
    row[2] = static_cast<float>(g.size()) / 5.0f;
    auto& uh = user_history[users[i]];
    auto& mh = movie_history[movies[i]];
    history(uh, row + 3);
    history(mh, row + 5);
    if (k < cut || o.online_history) {
      uh.first += ratings[i], ++uh.second;
      mh.first += ratings[i], ++mh.second;
    }
    l[k] = ratings[i] >= o.click_from ? 1.0f : 0.0f;
  }
  all.dense = dense;
  all.labels = labels;
  all.fields = std::move(fields);
  all.validate(base + " movielens");
  return {all.slice(0, cut), all.slice(cut, n)};
}

}  // namespace colossal::recsys
