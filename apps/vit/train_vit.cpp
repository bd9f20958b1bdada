// train_vit: train a vision transformer on image folders, IDX or CIFAR files with any Booster
// plugin, on one process or many; evaluate with top-1/top-5 accuracy and a confusion matrix;
// classify image files with a saved model (--predict).
//
// With no arguments it trains the nano ViT (0.54M parameters, 4 x 4 patches) on Fashion-MNIST
// (fetched by scripts/setup.sh) and writes out/vit/model plus out/vit/confusion_matrix.{csv,png}:
//   build/apps/colossal run --nproc_per_node 2 -- build/apps/train_vit
//   build/apps/train_vit --data photos/ --model small --image_size 96 --plugin zero2 --epochs 20
//   build/apps/train_vit --predict shoe.png shirt.jpg            (uses out/vit/model)
#include "apps/vit/train_vit.h"

#include <sys/stat.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <optional>

#include "apps/common/auto_layout.h"
#include "apps/common/train_loop.h"
#include "apps/vit/train_args.h"
#include "core/booster/booster.h"
#include "core/common/check.h"
#include "core/common/fs.h"
#include "core/data/distributed_sampler.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/nn/deferred_init.h"
#include "core/optim/factory.h"
#include "core/optim/lr_scheduler.h"
#include "core/parallel/tensor/checkpoint.h"
#include "vit/confusion_matrix.h"
#include "vit/data/datasets.h"
#include "vit/data/image_folder.h"
#include "vit/data/loader.h"
#include "vit/layout_trial.h"
#include "vit/pipeline.h"
#include "vit/pretrained.h"

namespace dist = colossal::dist;
namespace booster = colossal::booster;
using colossal::vit_app::TrainArgs;
using namespace colossal::vit;

namespace {

double elapsed(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// ---- model choice ---------------------------------------------------------------------------

int64_t automatic_patch_size(int64_t image_size) {
  if (image_size >= 128) return 16;
  // Small images: about a 7 x 7 grid of patches (28 -> 4, 32 -> 4 with an 8 x 8 grid).
  for (int64_t p = std::max<int64_t>(1, image_size / 7); p >= 1; --p)
    if (image_size % p == 0) return p;
  return 1;
}

// The size a dataset's images have (the first training image), capped at 224.
int64_t native_image_size(const ImageSource& train) {
  for (int64_t i = 0; i < std::min<int64_t>(train.size(), 16); ++i) {
    try {
      auto m = train.load(i);
      return std::min<int64_t>(224, std::min(m.rows, m.cols));
    } catch (const ImageReadError&) {
    }
  }
  return 224;
}

struct ModelChoice {
  ViTConfig config;
  ImageProcessorConfig processor;
  ViTForImageClassification model{nullptr};
  std::string description;
  bool new_head = false;  // --pretrained: the checkpoint's classifier does not fit the data's classes
};

// The model's shape and preprocessing from the flags and the data, before any weight exists (so
// --plugin auto can search layouts for it).
ModelChoice choose_model(const TrainArgs& a, const Datasets& data) {
  ModelChoice out;
  const auto classes = data.train->num_classes();
  if (!a.pretrained.empty()) {
    // The model keeps the checkpoint's position table; another --image_size is served by
    // interpolating it on the fly (model.h), so every pretrained weight loads unchanged.
    out.config = ViTConfig::from_json_file(a.pretrained + "/config.json");
    out.processor = ImageProcessorConfig::from_json_file(a.pretrained + "/preprocessor_config.json", out.config);
    if (a.image_size) out.processor.size = a.image_size;
    COLOSSAL_CHECK(out.processor.size % out.config.patch_size == 0, "--image_size ", out.processor.size,
                   " is not a multiple of the pretrained model's patch size ", out.config.patch_size);
    out.new_head = out.config.num_labels != classes;
    out.config.num_labels = classes;
    out.config.id2label = data.train->class_names();
    out.description = "from " + a.pretrained + (out.new_head ? " (new " + std::to_string(classes) + "-class head)" : "");
    return out;
  }
  const int64_t size = a.image_size ? a.image_size : native_image_size(*data.train);
  const int64_t patch = a.patch_size ? a.patch_size : automatic_patch_size(size);
  const int64_t channels = data.train->channels();
  if (a.model.size() > 5 && a.model.substr(a.model.size() - 5) == ".json") {
    out.config = ViTConfig::from_json_file(a.model);
    out.config.num_labels = classes;
    if (a.image_size) out.config.image_size = a.image_size;
    if (a.patch_size) out.config.patch_size = a.patch_size;
    out.config.num_channels = channels;
  } else {
    out.config = ViTConfig::named(a.model, size, patch, channels, classes);
  }
  out.config.id2label = data.train->class_names();
  out.config.validate();
  out.processor.size = out.config.image_size;
  out.processor.image_mean.assign(static_cast<size_t>(channels), 0.5);
  out.processor.image_std.assign(static_cast<size_t>(channels), 0.5);
  out.description = a.model + (a.init == "mimetic" ? " (mimetic init" : " (normal init") +
                    (a.position_init == "sincos" ? ", sine-cosine positions)" : ")");
  return out;
}

// The chosen model under the plugin: the checkpoint's weights, or fresh ones built lazily.
void build_model(const TrainArgs& a, ModelChoice& out, booster::Plugin& plugin) {
  // The layout against the model's shape rules on every rank, before any group exists; then the
  // plugin's context (groups, and the pipeline's schedule and stage).
  check_parallel(out.config, plugin.dims());
  const auto parallel = plugin.parallel_context();
  torch::manual_seed(a.loop.seed);
  if (!a.pretrained.empty()) {
    out.model = ViTForImageClassification(out.config, parallel);
    auto report = parallel.tensor_parallel()
                      ? colossal::parallel::load_model_slices(*out.model, a.pretrained, {.strict = false})
                      : colossal::checkpoint::load_model_state(*out.model, a.pretrained, {.strict = false});
    // A pipeline stage holds some layers: the checkpoint's others belong to other stages.
    bool usable = report.missing.empty() && (parallel.pipeline.enabled() || report.unexpected.empty());
    for (const auto& name : report.mismatched) usable = usable && out.new_head && name.rfind("classifier.", 0) == 0;
    COLOSSAL_CHECK(usable, "--pretrained ", a.pretrained, ": its weights do not fit a ViT of its config.json: ",
                   report.describe());
    return;
  }
  {
    // Lazily: no weight exists until boost() makes what this rank keeps (its ZeRO-3 shards, its
    // tensor-parallel slices), with the values an eager build would have (nn/deferred_init.h).
    colossal::nn::DeferredInitGuard deferred;
    out.model = ViTForImageClassification(out.config, parallel);
  }
  // Mimetic attention: on Fashion-MNIST one epoch of the nano ViT reached 83.1% with it and
  // 80.9% without (transformers' ViT, same data and schedule).
  if (a.init == "mimetic") out.model->mimetic_init();
  if (a.position_init == "sincos") out.model->sincos_position_init();
}

TransformOptions transform_options(const TrainArgs& a, const ModelChoice& m) {
  TransformOptions t;
  t.image_size = m.processor.size;
  t.channels = static_cast<int>(m.config.num_channels);
  t.mean = m.processor.image_mean;
  t.std = m.processor.image_std;
  // Small images (Fashion-MNIST, CIFAR) lose too much to random crops in a short schedule: the
  // nano ViT's training loss after 400 steps on Fashion-MNIST was 1.14 with crops of 60-100% of
  // the area and 0.75 without.
  t.crop_min_scale = a.min_crop_scale > 0 ? a.min_crop_scale : 0.08;
  t.random_resized_crop = a.min_crop_scale > 0 || t.image_size >= 64;
  t.horizontal_flip = !a.no_flip;
  t.randaugment_ops = a.randaugment;
  t.randaugment_magnitude = a.randaugment_magnitude;
  return t;
}

// ---- evaluation -----------------------------------------------------------------------------

// Single-view counts, and with --eval_flip the counts for probabilities averaged over each image
// and its mirror image.
struct EvalCounts {
  ClassificationCounts single;
  std::optional<ClassificationCounts> mirrored;
};

// Where evaluation runs: this rank's data-parallel replica (the ranks of one replica, split by
// tensor parallelism, classify the same images together), the group that sums the replicas'
// counts, the device and dtype of the inputs.
struct EvalPlace {
  int replica = 0, replicas = 1;
  dist::Group replica_group;  // one rank of every replica: the dp group
  c10::Device device = c10::kCPU;
  c10::ScalarType dtype = c10::kFloat;
  // Pipeline parallelism: class log-probabilities of a batch through the stages (defined on the
  // last stage's ranks only), and the group whose counts are summed first (the pipeline's).
  std::function<torch::Tensor(const torch::Tensor& pixels)> pipeline_log_probs;
  dist::Group pipeline_group;
};

// Every replica classifies every n-th image; replicas out of images repeat image 0 with weight 0
// so all run the same number of forward passes (ZeRO-3 gathers parameters collectively). Counts
// are summed over the replicas.
EvalCounts evaluate(ViTForImageClassification& model, PrefetchLoader& loader, int64_t batch_size,
                    const EvalPlace& place, size_t depth, bool mirror) {
  torch::NoGradGuard no_grad;
  const int n = place.replicas, r = place.replica;
  const auto dtype = place.dtype;
  const int64_t size = loader.source().size(), per_rank = (size + n - 1) / n;
  EvalCounts out{ClassificationCounts(loader.source().num_classes()), std::nullopt};
  if (mirror) out.mirrored.emplace(loader.source().num_classes());
  std::deque<std::vector<double>> weights;  // of the batches submitted and not yet taken
  int64_t next = 0;
  auto top_up = [&] {
    for (; next < per_rank && weights.size() < depth; next += batch_size) {
      std::vector<int64_t> idx;
      std::vector<double> w;
      for (int64_t k = next; k < std::min(per_rank, next + batch_size); ++k) {
        const int64_t i = k * n + r;
        idx.push_back(i < size ? i : 0);
        w.push_back(i < size ? 1.0 : 0.0);
      }
      loader.submit(idx, 0);
      weights.push_back(w);
    }
  };
  auto log_probs_of = [&](const torch::Tensor& pixels) {
    return place.pipeline_log_probs ? place.pipeline_log_probs(pixels) : class_log_probs(model, pixels, false);
  };
  model->eval();
  for (top_up(); !weights.empty(); top_up()) {
    auto batch = loader.take();
    std::vector<double> w;
    for (int64_t p : batch.positions) w.push_back(weights.front()[p]);
    weights.pop_front();
    for (const auto& s : batch.skipped) std::fprintf(stderr, "[rank %d] skipped: %s\n", r, s.c_str());
    if (batch.labels.size(0) == 0) {  // keep the collective forward in step with other ranks
      if (place.pipeline_log_probs) continue;  // the pipeline's ranks all read this batch: all skip it
      const auto& t = loader.options().transform;
      (void)class_log_probs(model, torch::zeros({1, t.channels, t.image_size, t.image_size}).to(place.device, dtype),
                            mirror);
      continue;
    }
    auto pixels = batch.pixels.to(place.device, dtype);
    const auto labels = batch.labels.to(place.device);
    auto nll = [&](const torch::Tensor& log_probs) {
      return torch::nn::functional::nll_loss(
          log_probs, labels, torch::nn::functional::NLLLossFuncOptions().reduction(torch::kNone)).cpu();
    };
    auto single = log_probs_of(pixels);
    if (single.defined()) out.single.add(single.cpu(), batch.labels, nll(single), w);
    if (out.mirrored) {
      // Only the mirror pass is new; the single view above is reused for the average.
      auto mirrored = log_probs_of(pixels.flip({3}));
      if (single.defined()) {
        auto averaged = mean_log_probs(single, mirrored);
        out.mirrored->add(averaged.cpu(), batch.labels, nll(averaged), w);
      }
    }
  }
  model->train();
  auto packed = out.mirrored ? torch::cat({out.single.pack(), out.mirrored->pack()}) : out.single.pack();
  if (place.pipeline_group.is_member() && place.pipeline_group.size() > 1)
    dist::all_reduce(packed, place.pipeline_group);  // the last stage counted; every stage learns
  dist::all_reduce(packed, place.replica_group);
  const int64_t part = out.mirrored ? packed.size(0) / 2 : packed.size(0);
  out.single.unpack(packed.narrow(0, 0, part).clone());
  if (out.mirrored) out.mirrored->unpack(packed.narrow(0, part, part).clone());
  return out;
}

// ---- prediction -----------------------------------------------------------------------------

int predict(const TrainArgs& a) {
  std::string dir = !a.model_dir.empty() ? a.model_dir : !a.pretrained.empty() ? a.pretrained : a.save_dir + "/model";
  COLOSSAL_CHECK(exists(dir + "/config.json"), "--predict: no model at ", dir,
                 " (train one first, or pass --model_dir DIR)");
  auto loaded = load_pretrained(dir);
  loaded.model->eval();
  TransformOptions t;
  t.image_size = loaded.processor.size;
  t.channels = static_cast<int>(loaded.config.num_channels);
  t.mean = loaded.processor.image_mean;
  t.std = loaded.processor.image_std;
  torch::NoGradGuard no_grad;
  int failures = 0;
  const int64_t k = std::min<int64_t>(a.top_k, loaded.config.num_labels);
  for (const auto& path : a.predict) {
    cv::Mat image;
    try {
      image = read_image(path, t.channels);
    } catch (const ImageReadError& e) {
      std::fprintf(stderr, "train_vit: %s\n", e.what());
      ++failures;
      continue;
    }
    auto pixels = torch::empty({1, t.channels, t.image_size, t.image_size});
    transform_eval(image, t, pixels.data_ptr<float>());
    auto probs = class_log_probs(loaded.model, pixels, a.eval_flip)[0].exp();
    auto [values, indices] = probs.topk(k);
    std::printf("%s:", path.c_str());
    for (int64_t j = 0; j < k; ++j) {
      int64_t c = indices[j].item<int64_t>();
      std::string name = c < static_cast<int64_t>(loaded.config.id2label.size()) ? loaded.config.id2label[c]
                                                                                 : "LABEL_" + std::to_string(c);
      std::printf("%s %s %.3f", j ? "," : "", name.c_str(), values[j].item<double>());
    }
    std::printf("\n");
  }
  std::fflush(stdout);
  return failures ? 1 : 0;
}

// ---- training -------------------------------------------------------------------------------

// --plugin auto (apps/common/auto_layout.h): the search over the layouts ViT allows, for the
// global batch --batch_size gives under plain data parallelism. Sets the plugin, the per-replica
// batch and checkpointing to the winner's.
void choose_layout_by_measurement(TrainArgs& a, const ViTConfig& config) {
  const int world = dist::world_size();
  colossal::apps::AutoLayoutOptions o;
  o.global_batch = a.batch_size * world;
  o.sequence = config.num_patches() + 1;  // tokens per image
  o.precision = a.plugin.precision;
  o.trials = a.auto_layout.trials;
  o.budget_s = a.auto_layout.budget_s;
  o.report_path = a.auto_layout.report.empty() ? a.save_dir + "/auto_layout.json" : a.auto_layout.report;
  colossal::tools::TrialOptions trial;
  trial.seed = a.loop.seed;
  const auto report = colossal::apps::choose_layout(
      model_spec(config), o, [&](const colossal::tools::Layout& l) { return layout_is_valid(config, l, world); },
      [&](const colossal::tools::Layout& l) { return time_training_steps(config, l, a.plugin, trial); },
      [&](const colossal::tools::MachineRates& rates, colossal::tools::SearchSpace& space) {
        calibrate_compute(config, a.batch_size, rates, space);
      });
  const auto& best = report.candidates[report.chosen].layout;
  a.plugin = colossal::apps::chosen_plugin_config(best, a.plugin);
  a.grad_checkpoint = best.activation_checkpointing;
  a.batch_size = best.replica_batch;
}

void train(TrainArgs& a, colossal::apps::RunSummary& summary) {
  colossal::apps::TrainJob job(a.loop, a.plugin);  // the runtime; colossal verify's one-process reference
  a.batch_size *= job.batch_factor();  // the reference run takes every replica's images
  job.lock_output(a.save_dir);         // one job per output, before anything is written there
  // The plugin first: its layout is checked against the world before anything else runs. Under
  // --plugin auto the search needs the model's shape, so the data comes first.
  const bool automatic = a.plugin.name == "auto";
  std::shared_ptr<booster::Plugin> plugin;
  if (!automatic) plugin = booster::make_plugin(a.plugin);
  colossal::fs::make_dirs(a.save_dir);

  DatasetOptions dopt;
  dopt.held_out_fraction = a.held_out_fraction;
  dopt.seed = a.loop.seed;
  auto data = open_datasets(a.data.empty() ? a.dataset : a.data, dopt);
  COLOSSAL_CHECK(data.train->size() > 0 && data.eval->size() > 0, "[data] ", data.description,
                 ": training and evaluation both need images");
  COLOSSAL_CHECK(data.train->num_classes() >= 2, "[data] ", data.description, ": expected at least 2 classes");
  auto m = choose_model(a, data);
  if (automatic) {
    choose_layout_by_measurement(a, m.config);
    plugin = booster::make_plugin(a.plugin);
  }
  const auto& dims = plugin->dims();
  const c10::Device device = plugin->device();
  const int n = dims.dp(), r = dist::rank();  // n: data-parallel replicas (the ranks of one share a batch)
  build_model(a, m, *plugin);
  if (!colossal::nn::has_deferred_parameters(*m.model)) m.model->to(device);  // else boost makes them there
  m.model->set_gradient_checkpointing(a.grad_checkpoint);
  m.model->set_patch_keep(a.patch_keep);
  auto& model = m.model;
  const auto replica_group = dims.group(dist::Axis::kDp);  // sums counts over the replicas
  // Pipeline parallelism: each step's batch runs through the stages in microbatches; every rank
  // of a pipeline reads the same images (the first stage needs the pixels, the last the labels).
  const auto& pipeline = model->parallel_context().pipeline;
  const bool pipelined = pipeline.enabled();
  const auto stage = stage_functions(model, a.label_smoothing);
  const int64_t microbatches = pipelined ? pipeline.microbatches_for(a.batch_size) : 1;

  // The loader runs ahead of the loop on its own copy of the sampler (made once the checkpoint
  // is loaded); the loop's sampler advances as batches are used, so a checkpoint records what was
  // trained on.
  LoaderOptions lo;
  lo.workers = a.workers;
  lo.skip_bad_images = a.on_bad_image == "skip";
  lo.seed = a.loop.seed;
  lo.transform = transform_options(a, m);
  PrefetchLoader train_loader(data.train, lo);
  lo.augment = false;
  PrefetchLoader eval_loader(data.eval, lo);
  const size_t depth = static_cast<size_t>(std::max(2, a.workers + 2));
  std::optional<colossal::data::DistributedSampler> feed;  // the loop's sampler, some batches ahead
  auto top_up = [&] {
    while (train_loader.queued() < depth) {
      auto idx = feed->next(a.batch_size);
      if (static_cast<int64_t>(idx.size()) < a.batch_size) {  // the epoch ends: start the next
        feed->set_epoch(feed->epoch() + 1);
        idx = feed->next(a.batch_size);
      }
      train_loader.submit(idx, feed->epoch());
    }
  };
  // The next training batch from the loader (the images the loop's sampler just drew).
  auto take_batch = [&] {
    top_up();
    ImageBatch batch;
    try {
      batch = train_loader.take();
    } catch (const ImageReadError& e) {
      COLOSSAL_FAIL("cannot read training image ", e.what(), " (--on_bad_image skip leaves such images out)");
    }
    for (const auto& s : batch.skipped) std::fprintf(stderr, "[rank %d] skipped: %s\n", r, s.c_str());
    return batch;
  };

  if (r == 0) {
    const auto& c = m.config;
    std::printf("data: %s\n", data.description.c_str());
    // The whole model's count: under tp or pp this rank holds only a part.
    const double parameters = static_cast<double>(c.num_parameters());
    std::printf("model: ViT %s, %.2fM parameters (hidden %ld, layers %ld, heads %ld, patch %ld, image %ld x %ld x %ld)\n",
                m.description.c_str(), parameters / 1e6,
                c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.patch_size, c.num_channels,
                lo.transform.image_size, lo.transform.image_size);
    std::fflush(stdout);
  }

  colossal::apps::TrainTask task;
  task.name = "train_vit";
  task.plugin = plugin;
  task.model = model.ptr();
  task.optimizer = colossal::optim::make_optimizer(*model, {.name = "fused_adamw", .lr = a.lr, .weight_decay = a.weight_decay});
  task.schedule = [&](int64_t steps) {
    return colossal::optim::LRScheduler::Options{.kind = "cosine",
                                                 .warmup_steps = static_cast<int64_t>(a.warmup_ratio * steps),
                                                 .total_steps = steps, .min_lr_ratio = 0.0};
  };
  task.train_samples = data.train->size();
  task.micro_batch = a.batch_size;
  task.whole_batches = true;
  task.epochs = a.epochs;
  task.epoch_period = 1;  // evaluate and save at every epoch's end
  task.batch_flag = "--batch_size " + std::to_string(a.batch_size);
  task.length_flags = "--epochs or --max_steps";
  task.throughput_unit = "images";
  task.after_resume = [&](int64_t, int64_t, const colossal::data::DistributedSampler& sampler) { feed.emplace(sampler); };
  task.count_metrics = [](const std::map<std::string, double>& counts) {
    return colossal::apps::Metrics{{"acc", counts.at("correct") / std::max(1.0, counts.at("images"))}};
  };
  task.loss = [&](colossal::apps::StepContext& ctx) -> torch::Tensor {
    const auto batch = take_batch();
    ctx.count("images", static_cast<double>(batch.labels.size(0)));
    if (batch.labels.size(0) == 0) {  // every image unreadable: take part in the step with no gradient
      ctx.count("correct", 0);
      auto dummy = torch::zeros({1, m.config.num_channels, lo.transform.image_size, lo.transform.image_size});
      return model->forward(dummy.to(device, ctx.compute_dtype)).sum() * 0.0;
    }
    auto logits = model->forward(batch.pixels.to(device, ctx.compute_dtype)).to(torch::kFloat);
    const auto labels = batch.labels.to(device);
    ctx.count("correct", logits.argmax(1).eq(labels).sum().item<double>());
    return stage.loss(logits, labels);  // the pipeline's loss too: cross entropy, label smoothing
  };
  if (pipelined)
    task.pipeline_step = [&](colossal::apps::StepContext& ctx) {
      const auto batch = take_batch();
      // Every rank of the pipeline read the same batch, so all of them stop here alike.
      COLOSSAL_CHECK(batch.labels.size(0) == a.batch_size, "step ", ctx.step, ": ", batch.labels.size(0), " of ",
                     a.batch_size, " images were readable; pipeline stages need whole microbatches, so with --pp "
                     "fix or remove the unreadable images instead of skipping them");
      double correct = 0;
      auto fns = stage;
      fns.loss = [&, base = stage.loss](const torch::Tensor& logits, const torch::Tensor& labels) {
        correct += logits.argmax(1).eq(labels).sum().item<double>();  // on the last stage
        return base(logits, labels);
      };
      const int64_t rows = a.batch_size / microbatches;
      const double loss = ctx.booster.execute_pipeline(ctx.optimizer, fns,
                                                       batch.pixels.to(device, ctx.compute_dtype).split(rows),
                                                       batch.labels.to(device).split(rows));
      auto c = torch::tensor({correct}, torch::kFloat64);  // counted on the last stage; every stage learns it
      dist::all_reduce(c, pipeline.group);
      ctx.count("correct", c.item<double>());
      ctx.count("images", static_cast<double>(batch.labels.size(0)));
      return loss;
    };
  EvalPlace eval_place{dims.coord(dist::Axis::kDp), n, replica_group, device, c10::kFloat, {}, {}};
  std::optional<EvalCounts> last_eval;
  task.evaluate = [&](const colossal::apps::EvalContext& ctx) -> std::optional<colossal::apps::Metrics> {
    eval_place.dtype = ctx.compute_dtype;
    if (pipelined) {
      eval_place.pipeline_group = pipeline.group;
      eval_place.pipeline_log_probs = [&, &booster = ctx.booster, &optimizer = ctx.optimizer](const torch::Tensor& pixels) {
        std::vector<torch::Tensor> logits;
        auto fns = stage;
        fns.loss = [&](const torch::Tensor& out, const torch::Tensor&) {  // keeps the logits; no loss needed
          logits.push_back(out.to(torch::kFloat));
          return torch::zeros({}, torch::kFloat64);
        };
        // Equal microbatches (a stage link fixes each channel's shape for the step): the most, up
        // to the training count, that divide this batch. On a 2D/2.5D/3D grid a microbatch is a
        // multiple of the grid's row blocks: the batch is filled up with copies of its first
        // image, whose predictions are dropped.
        const auto& context = model->parallel_context();
        const int64_t rows = context.grid_parallel() ? context.grid.stream().row_parts() : 1;
        const int64_t images = pixels.size(0), pad = (rows - images % rows) % rows;
        auto batch = pad > 0 ? torch::cat({pixels, pixels.narrow(0, 0, 1).expand({pad, pixels.size(1), pixels.size(2),
                                                                                   pixels.size(3)})})
                             : pixels;
        const int64_t units = batch.size(0) / rows;
        int64_t parts = std::min<int64_t>(microbatches, units);
        while (units % parts != 0) --parts;
        const std::vector<torch::Tensor> targets(parts, torch::zeros({0}));  // the labels stay with evaluate()
        (void)booster.evaluate_pipeline(optimizer, fns, batch.split(batch.size(0) / parts), targets);
        return logits.empty() ? torch::Tensor() : torch::log_softmax(torch::cat(logits), 1).narrow(0, 0, images);
      };
    }
    last_eval = evaluate(model, eval_loader, a.batch_size, eval_place, depth, a.eval_flip);
    const auto& counts = last_eval->single;
    colossal::apps::Metrics metrics = {
        {"loss", counts.mean_loss()}, {"top1", counts.top1_accuracy()}, {"top5", counts.top5_accuracy()}};
    if (last_eval->mirrored) {
      metrics.push_back({"top1_flip", last_eval->mirrored->top1_accuracy()});
      metrics.push_back({"top5_flip", last_eval->mirrored->top5_accuracy()});
    }
    metrics.push_back({"images", counts.samples});
    return metrics;
  };
  task.eval_samples = data.eval->size();
  task.checkpoint_dir = a.save_dir + "/checkpoints";
  // Every step's model/ opens as a model (config and preprocessing beside the weights).
  task.model_files = {{"config.json", m.config.to_json()}, {"preprocessor_config.json", m.processor.to_json()}};
  const auto t0 = std::chrono::steady_clock::now();
  auto run = job.run(task, summary);
  if (run.recorded) return;
  summary.outputs["model"] = a.save_dir + "/model";
  if (!last_eval)  // resumed at the end: nothing ran, the confusion matrix still needs an evaluation
    (void)task.evaluate({run.total_steps, run.boosted.compute_dtype, *run.booster, *run.boosted.optimizer});
  const auto& counts = last_eval->single;
  auto state = run.boosted.optimizer->model_wrapper().checkpoint().model_state_to_save(*model);
  if (r == 0) {
    save_pretrained(m.config, state, a.save_dir + "/model", m.processor);
    write_confusion_csv(counts.confusion, data.eval->class_names(), a.save_dir + "/confusion_matrix.csv");
    char title[160];
    std::snprintf(title, sizeof title, "ViT %s: top-1 %.2f%%, top-5 %.2f%% on %.0f images", m.description.c_str(),
                  100 * counts.top1_accuracy(), 100 * counts.top5_accuracy(), counts.samples);
    write_confusion_png(counts.confusion, data.eval->class_names(), title, a.save_dir + "/confusion_matrix.png");
    std::printf("result: top-1 %.2f%%, top-5 %.2f%% on %.0f evaluation images; %.0f s in all (%d rank(s))\n",
                100 * counts.top1_accuracy(), 100 * counts.top5_accuracy(), counts.samples, elapsed(t0), n);
    if (last_eval->mirrored)
      std::printf("result with mirror averaging (--eval_flip): top-1 %.2f%%, top-5 %.2f%%\n",
                  100 * last_eval->mirrored->top1_accuracy(), 100 * last_eval->mirrored->top5_accuracy());
    std::printf("saved: %s/model (config.json, preprocessor_config.json, model.safetensors), "
                "%s/confusion_matrix.csv and .png\n",
                a.save_dir.c_str(), a.save_dir.c_str());
    std::fflush(stdout);
  }
  dist::barrier(dist::world_group());
}

}  // namespace

namespace colossal::vit_app {

colossal::apps::RunSummary train_vit(const std::vector<std::string>& args) {
  return colossal::apps::run_job<TrainArgs>("train_vit", args, &parse_train_args,
                                            [](TrainArgs& a, colossal::apps::RunSummary& summary) {
    if (!a.predict.empty()) summary.exit_code = predict(a);
    else train(a, summary);
  });
}

}  // namespace colossal::vit_app
