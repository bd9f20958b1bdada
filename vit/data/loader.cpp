#include "vit/data/loader.h"

#include <ATen/ATen.h>

#include <chrono>

#include "core/common/check.h"

namespace colossal::vit {

PrefetchLoader::PrefetchLoader(std::shared_ptr<const ImageSource> source, LoaderOptions options)
    : source_(std::move(source)), options_(std::move(options)) {
  COLOSSAL_CHECK(options_.workers >= 0, "[loader] workers: expected >= 0, got ", options_.workers);
  options_.transform.validate();
  for (int i = 0; i < options_.workers; ++i) threads_.emplace_back([this] { worker_loop(); });
}

PrefetchLoader::~PrefetchLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : threads_) t.join();
}

void PrefetchLoader::submit(std::vector<int64_t> indices, int64_t epoch) {
  for (int64_t i : indices)
    COLOSSAL_CHECK(i >= 0 && i < source_->size(), "[loader] sample index ", i, " is outside the dataset of ",
                   source_->size());
  auto job = std::make_shared<Job>();
  job->indices = std::move(indices);
  job->epoch = epoch;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  work_ready_.notify_one();
}

size_t PrefetchLoader::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return jobs_.size();
}

void PrefetchLoader::work(Job& job) const {
  const auto& t = options_.transform;
  const int64_t n = static_cast<int64_t>(job.indices.size()), plane = t.image_size * t.image_size * t.channels;
  auto pixels = at::empty({n, t.channels, t.image_size, t.image_size}, at::kFloat);
  auto labels = at::empty({n}, at::kLong);
  float* out = pixels.data_ptr<float>();
  int64_t kept = 0;
  for (int64_t position = 0; position < n; ++position) {
    const int64_t index = job.indices[position];
    try {
      cv::Mat image = source_->load(index);
      float* dst = out + kept * plane;
      if (options_.augment) transform_train(image, t, sample_seed(options_.seed, job.epoch, index), dst);
      else transform_eval(image, t, dst);
    } catch (const ImageReadError& e) {
      if (!options_.skip_bad_images) throw;
      job.result.skipped.push_back(e.what());
      continue;
    }
    labels.data_ptr<int64_t>()[kept] = source_->label(index);
    job.result.indices.push_back(index);
    job.result.positions.push_back(position);
    ++kept;
  }
  job.result.pixels = kept == n ? pixels : pixels.narrow(0, 0, kept);
  job.result.labels = kept == n ? labels : labels.narrow(0, 0, kept);
}

void PrefetchLoader::worker_loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] {
        if (stopping_) return true;
        for (auto& j : jobs_)
          if (!j->claimed) return true;
        return false;
      });
      if (stopping_) return;
      for (auto& j : jobs_)
        if (!j->claimed) {
          job = j;
          break;
        }
      job->claimed = true;
    }
    try {
      work(*job);
    } catch (...) {
      job->error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job->done = true;
    }
    job_done_.notify_all();
  }
}

ImageBatch PrefetchLoader::take() {
  std::shared_ptr<Job> job;
  bool here = false;  // no worker has started it: the caller decodes it rather than waiting
  {
    std::unique_lock<std::mutex> lock(mutex_);
    COLOSSAL_CHECK(!jobs_.empty(), "[loader] take() with no batch submitted");
    job = jobs_.front();
    jobs_.pop_front();
    if (!job->claimed) {
      job->claimed = here = true;
    } else if (!job->done) {
      auto t0 = std::chrono::steady_clock::now();
      job_done_.wait(lock, [&] { return job->done; });
      wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  if (here) {
    auto t0 = std::chrono::steady_clock::now();
    try {
      work(*job);
    } catch (...) {
      job->error = std::current_exception();
    }
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (job->error) std::rethrow_exception(job->error);
  return std::move(job->result);
}

}  // namespace colossal::vit
