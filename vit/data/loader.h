#pragma once
// A multi-threaded prefetching image loader. The training loop submits batches of sample
// indices ahead of time (submit), worker threads decode and transform them in the background,
// and take() hands them back in submission order — so the loop only waits when the workers fall
// behind. Results never depend on the number of workers: each sample's augmentation is seeded by
// (seed, epoch, index) (transforms.h).
//
// A sample that cannot be decoded either stops the run (take() rethrows the ImageReadError with
// its path) or, with skip_bad_images, is left out of its batch and named in ImageBatch::skipped.
#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "vit/data/image_source.h"
#include "vit/data/transforms.h"

namespace colossal::vit {

struct LoaderOptions {
  int workers = 2;       // decoding threads (0: decode in take(), on the caller's thread)
  bool augment = true;   // training transforms; false: evaluation transforms
  bool skip_bad_images = false;
  uint64_t seed = 0;
  TransformOptions transform;
};

struct ImageBatch {
  at::Tensor pixels;                 // [B, C, S, S] float32, normalised
  at::Tensor labels;                 // [B] int64
  std::vector<int64_t> indices;      // the source indices in the batch (skipped ones left out)
  std::vector<int64_t> positions;    // where each of them was in the submitted batch
  std::vector<std::string> skipped;  // "path: reason" of each sample left out
};

class PrefetchLoader {
 public:
  PrefetchLoader(std::shared_ptr<const ImageSource> source, LoaderOptions options);
  ~PrefetchLoader();
  PrefetchLoader(const PrefetchLoader&) = delete;
  PrefetchLoader& operator=(const PrefetchLoader&) = delete;

  /// Queues a batch; `epoch` selects the augmentation draws.
  void submit(std::vector<int64_t> indices, int64_t epoch);
  /// The oldest queued batch, once ready.
  ImageBatch take();
  /// Batches submitted and not yet taken.
  size_t queued() const;
  /// Seconds take() spent waiting for workers so far (the loop was data-bound for that long).
  double wait_seconds() const { return wait_seconds_; }

  const ImageSource& source() const { return *source_; }
  const LoaderOptions& options() const { return options_; }

 private:
  struct Job {
    std::vector<int64_t> indices;
    int64_t epoch = 0;
    bool claimed = false, done = false;
    ImageBatch result;
    std::exception_ptr error;
  };
  void work(Job& job) const;
  void worker_loop();

  std::shared_ptr<const ImageSource> source_;
  LoaderOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_, job_done_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
  double wait_seconds_ = 0;
};

}  // namespace colossal::vit
