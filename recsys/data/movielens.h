#pragma once
// MovieLens "latest-small" (100,004 ratings of 9,066 movies by 671 users) as click-through data:
// read from dslabs' R data file (Debian's r-cran-dslabs, unpacked by scripts/setup.sh) with
// core/data/r_data.h. A rating of 4 or more is a click. Split by time: the earliest ratings
// train, the latest are held out, so the model predicts the future from the past.
//
// Sparse fields: user, movie, genres (a bag: "Comedy|Romance"), release year, hour of day and
// day of week of the rating. Dense features: the release year (scaled), whether it is known,
// the number of genres (scaled), and history: the user's and the movie's earlier ratings in the
// past (mean, shrunk toward the overall mean; count, log-scaled). No rating sees itself; with
// online_history (the default, as a deployed system sees feedback arrive) a held-out rating's
// history includes the held-out ratings before it, otherwise only the training period's.
#include <string>

#include "recsys/data/ctr_data.h"

namespace colossal::recsys {

struct MovieLensOptions {
  std::string r_data;           // ".../dslabs/data/Rdata" (the .rdx/.rdb pair); empty: setup's copy
  double held_out_fraction = 0.2;  // the latest ratings
  double click_from = 4.0;         // ratings at or above are clicks
  bool online_history = true;      // held-out ratings' history includes earlier held-out ratings
};

struct CtrSplit {
  CtrDataset train, held_out;
};

CtrSplit load_movielens(const MovieLensOptions& options = {});

/// Where scripts/setup.sh unpacks dslabs' data (under the project's cache).
std::string default_movielens_r_data();

}  // namespace colossal::recsys
