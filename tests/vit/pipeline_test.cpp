// The image pipeline on real files written here (PNG, JPEG, a corrupt one), the transforms'
// determinism, the prefetching loader against a plain loop, dataset layouts, the evaluation
// counts and pictures, the parallel plan, and DDP / ZeRO-2 on 2 ranks against one process.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <opencv2/imgproc.hpp>
#include <opencv2/imgcodecs.hpp>
#include <set>

#include "core/booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/optim/factory.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"
#include "vit/confusion_matrix.h"
#include "vit/data/datasets.h"
#include "vit/data/image_folder.h"
#include "vit/data/loader.h"
#include "vit/model.h"

namespace colossal::vit {
namespace {
namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  auto d = ::testing::TempDir() + name + "_" + std::to_string(::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A colour image whose pixel (y, x) is (10 * y + c * 3 + x) % 256 in channel c (RGB order).
cv::Mat pattern(int h, int w, int seed) {
  cv::Mat m(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) m.at<cv::Vec3b>(y, x)[c] = static_cast<uchar>((10 * y + c * 3 + x + seed) % 256);
  return m;
}

void write_rgb(const std::string& path, const cv::Mat& rgb) {
  cv::Mat bgr;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  ASSERT_TRUE(cv::imwrite(path, bgr)) << path;
}

// DIR/{cats,dogs,owls}: 3 PNG + 1 JPEG each, a text file and a hidden file.
std::string make_folder(const std::string& name) {
  auto d = fresh_dir(name);
  int seed = 0;
  for (const char* cls : {"owls", "cats", "dogs"}) {
    fs::create_directories(d + "/" + cls);
    for (int i = 0; i < 3; ++i) write_rgb(d + "/" + cls + "/img" + std::to_string(i) + ".png", pattern(12, 16, seed++));
    write_rgb(d + "/" + cls + "/photo.jpg", pattern(12, 16, seed++));
    std::ofstream(d + "/" + cls + "/notes.txt") << "not an image";
    std::ofstream(d + "/" + cls + "/.hidden.png") << "ignored";
  }
  return d;
}

TEST(ImagePipeline, ImageFolderReadsPngAndJpegInSortedOrder) {
  auto d = make_folder("folder");
  auto f = ImageFolder::open(d, {});
  EXPECT_EQ(f->class_names(), (std::vector<std::string>{"cats", "dogs", "owls"}));
  EXPECT_EQ(f->size(), 12);
  EXPECT_EQ(f->ignored_files(), 3);  // notes.txt in each class; hidden files are not counted
  EXPECT_EQ(f->channels(), 3);
  EXPECT_EQ(f->describe(0), d + "/cats/img0.png");
  EXPECT_EQ(f->label(0), 0);
  EXPECT_EQ(f->label(11), 2);
  // PNG is lossless: the pixels come back exactly, in RGB order (owls were written first: seed 0).
  auto owl = f->load(8);
  ASSERT_EQ(f->describe(8), d + "/owls/img0.png");
  auto want = pattern(12, 16, 0);
  EXPECT_EQ(cv::norm(owl, want, cv::NORM_INF), 0);
  // JPEG decodes to nearly the same picture.
  auto jpg = f->load(11);
  EXPECT_EQ(f->describe(11), d + "/owls/photo.jpg");
  EXPECT_LT(cv::norm(jpg, pattern(12, 16, 3), cv::NORM_L1) / jpg.total() / 3, 8.0);
  // Grayscale files make a one-channel dataset.
  auto g = fresh_dir("gray");
  for (const char* cls : {"a", "b"}) {
    fs::create_directories(g + "/" + cls);
    ASSERT_TRUE(cv::imwrite(g + "/" + cls + "/x.png", cv::Mat(5, 5, CV_8U, cv::Scalar(77))));
  }
  auto gf = ImageFolder::open(g, {});
  EXPECT_EQ(gf->channels(), 1);
  EXPECT_EQ(gf->load(1).at<uchar>(2, 2), 77);
}

TEST(ImagePipeline, FolderErrorsNameThePath) {
  auto d = fresh_dir("empty_root");
  auto msg = testing::error_message_of([&] { ImageFolder::open(d, {}); });
  EXPECT_NE(msg.find(d + "' has no sub-folders"), std::string::npos) << msg;
  fs::create_directories(d + "/only");
  std::ofstream(d + "/only/readme.md") << "x";
  msg = testing::error_message_of([&] { ImageFolder::open(d, {}); });
  EXPECT_NE(msg.find("no image files"), std::string::npos) << msg;
  msg = testing::error_message_of([&] { ImageFolder::open(d + "/missing", {}); });
  EXPECT_NE(msg.find("missing' is not a directory"), std::string::npos) << msg;
  auto v = make_folder("unknown_class");
  fs::create_directories(v + "/bats");
  write_rgb(v + "/bats/b.png", pattern(4, 4, 1));
  msg = testing::error_message_of([&] { ImageFolder::open(v, {.classes = {"cats", "dogs", "owls"}}); });
  EXPECT_NE(msg.find("class 'bats' is not one of the training classes"), std::string::npos) << msg;
}

// A corrupt file is reported with its path: skipped (and named) or the run stops.
TEST(ImagePipeline, CorruptImagesAreSkippedOrStopTheRun) {
  auto d = make_folder("corrupt");
  const std::string bad = d + "/dogs/img1.png";
  std::ofstream(bad, std::ios::trunc) << "\x89PNG but then garbage";
  auto f = ImageFolder::open(d, {});
  int64_t bad_index = -1;
  for (int64_t i = 0; i < f->size(); ++i)
    if (f->describe(i) == bad) bad_index = i;
  ASSERT_GE(bad_index, 0);
  try {
    f->load(bad_index);
    FAIL() << "a corrupt PNG decoded";
  } catch (const ImageReadError& e) {
    EXPECT_EQ(e.where(), bad);
    EXPECT_NE(std::string(e.what()).find("not a decodable image"), std::string::npos) << e.what();
  }
  LoaderOptions o;
  o.transform.image_size = 8;
  o.workers = 2;
  std::vector<int64_t> batch = {0, bad_index, 2};
  {
    o.skip_bad_images = true;
    PrefetchLoader loader(f, o);
    loader.submit(batch, 0);
    auto b = loader.take();
    EXPECT_EQ(b.indices, (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(b.positions, (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(b.pixels.size(0), 2);
    EXPECT_EQ(b.labels.size(0), 2);
    ASSERT_EQ(b.skipped.size(), 1u);
    EXPECT_NE(b.skipped[0].find(bad), std::string::npos) << b.skipped[0];
  }
  o.skip_bad_images = false;
  PrefetchLoader loader(f, o);
  loader.submit(batch, 0);
  try {
    loader.take();
    FAIL() << "the loader went on past a corrupt image";
  } catch (const ImageReadError& e) {
    EXPECT_EQ(e.where(), bad);
  }
}

TEST(ImagePipeline, TransformsAreSeededPerSampleAndNormalise) {
  auto img = pattern(20, 30, 5);
  TransformOptions t;
  t.image_size = 16;
  t.randaugment_ops = 2;
  t.mean = {0.5, 0.4, 0.3};
  t.std = {0.2, 0.25, 0.3};
  const int64_t n = 3 * 16 * 16;
  auto run = [&](uint64_t seed) {
    auto out = torch::empty({n});
    transform_train(img, t, seed, out.data_ptr<float>());
    return out;
  };
  EXPECT_TRUE(torch::equal(run(sample_seed(1, 0, 7)), run(sample_seed(1, 0, 7))));
  EXPECT_FALSE(torch::equal(run(sample_seed(1, 0, 7)), run(sample_seed(1, 0, 8))));
  EXPECT_FALSE(torch::equal(run(sample_seed(1, 0, 7)), run(sample_seed(1, 1, 7))));
  EXPECT_NE(sample_seed(1, 0, 7), sample_seed(2, 0, 7));

  // Evaluation on a square image of the output size is exact normalisation.
  auto square = pattern(16, 16, 9);
  auto out = torch::empty({3, 16, 16});
  transform_eval(square, t, out.data_ptr<float>());
  for (int c = 0; c < 3; ++c) {
    float want = static_cast<float>((square.at<cv::Vec3b>(3, 5)[c] / 255.0 - t.mean[c]) / t.std[c]);
    EXPECT_NEAR(out[c][3][5].item<float>(), want, 1e-6);
  }
  // Without crops and colour operations, training output is the image or its mirror, both seen.
  t.random_resized_crop = false;
  t.randaugment_ops = 0;
  auto flipped = out.flip({2});
  int plain = 0, mirrored = 0;
  for (int64_t i = 0; i < 16; ++i) {
    auto o = torch::empty({3, 16, 16});
    transform_train(square, t, sample_seed(0, 0, i), o.data_ptr<float>());
    plain += torch::equal(o, out);
    mirrored += torch::equal(o, flipped);
  }
  EXPECT_EQ(plain + mirrored, 16);
  EXPECT_GT(plain, 0);
  EXPECT_GT(mirrored, 0);
  // Grayscale source into a 3-channel model: replicated planes.
  cv::Mat gray(16, 16, CV_8U, cv::Scalar(51));
  t.mean = {0.5};
  t.std = {0.5};
  transform_eval(gray, t, out.data_ptr<float>());
  EXPECT_TRUE(torch::allclose(out, torch::full({3, 16, 16}, (0.2f - 0.5f) / 0.5f)));
  t.crop_min_scale = 0;
  EXPECT_NE(testing::error_message_of([&] { t.validate(); }).find("crop scale"), std::string::npos);
}

// Prefetching with several workers gives exactly the batches of a loop on the caller's thread.
TEST(ImagePipeline, PrefetchingLoaderMatchesThePlainLoop) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(3);
  auto images = torch::randint(256, {40, 3, 12, 12}, g, torch::kInt64).to(torch::kByte);
  auto labels = torch::arange(40) % 4;
  auto source = std::make_shared<TensorImageSource>(images, labels, std::vector<std::string>{}, "memory");
  EXPECT_EQ(source->num_classes(), 4);
  LoaderOptions o;
  o.transform.image_size = 10;
  o.transform.randaugment_ops = 1;
  o.seed = 5;
  auto batches = [&](int workers) {
    o.workers = workers;
    PrefetchLoader loader(source, o);
    std::vector<ImageBatch> out;
    for (int b = 0; b < 8; ++b) {
      std::vector<int64_t> idx;
      for (int k = 0; k < 5; ++k) idx.push_back((b * 7 + k * 3) % 40);
      loader.submit(idx, b / 4);
    }
    for (int b = 0; b < 8; ++b) out.push_back(loader.take());
    EXPECT_EQ(loader.queued(), 0u);
    return out;
  };
  auto plain = batches(0), threaded = batches(3);
  for (size_t b = 0; b < plain.size(); ++b) {
    EXPECT_TRUE(torch::equal(plain[b].pixels, threaded[b].pixels)) << "batch " << b;
    EXPECT_TRUE(torch::equal(plain[b].labels, threaded[b].labels)) << "batch " << b;
    EXPECT_EQ(plain[b].indices, threaded[b].indices);
  }
  // Sample by sample: the batch holds each image's own transform and label.
  auto one = torch::empty({3, 10, 10});
  transform_train(source->load(13), o.transform, sample_seed(5, 0, 13), one.data_ptr<float>());
  EXPECT_EQ(plain[1].indices, (std::vector<int64_t>{7, 10, 13, 16, 19}));
  EXPECT_TRUE(torch::equal(plain[1].pixels[2], one));
  EXPECT_EQ(plain[1].labels[2].item<int64_t>(), 1);  // 13 % 4
}

TEST(ImagePipeline, DatasetLayouts) {
  // train/ + val/
  auto d = fresh_dir("layout");
  fs::create_directories(d + "/train");
  fs::create_directories(d + "/val/dogs");
  auto f = make_folder("layout_train");
  fs::rename(f, d + "/train");
  write_rgb(d + "/val/dogs/v.png", pattern(12, 16, 1));
  auto ds = open_datasets(d);
  EXPECT_EQ(ds.train->size(), 12);
  EXPECT_EQ(ds.eval->size(), 1);
  EXPECT_EQ(ds.eval->label(0), 1);  // dogs in the training folder's numbering
  EXPECT_EQ(ds.eval->class_names(), ds.train->class_names());

  // DIR/<class>/: a held-out share of every class, disjoint from training.
  auto single = make_folder("layout_single");
  auto split = open_datasets(single, {.held_out_fraction = 0.25, .seed = 3});
  EXPECT_EQ(split.train->size(), 9);
  EXPECT_EQ(split.eval->size(), 3);
  std::set<std::string> seen;
  std::vector<int> held_per_class(3);
  for (int64_t i = 0; i < split.train->size(); ++i) seen.insert(split.train->describe(i));
  for (int64_t i = 0; i < split.eval->size(); ++i) {
    EXPECT_TRUE(seen.insert(split.eval->describe(i)).second) << "held-out image also in training";
    held_per_class[split.eval->label(i)]++;
  }
  EXPECT_EQ(held_per_class, (std::vector<int>{1, 1, 1}));
  auto again = open_datasets(single, {.held_out_fraction = 0.25, .seed = 3});
  EXPECT_EQ(again.eval->describe(0), split.eval->describe(0)) << "the split depends on the seed only";

  auto msg = testing::error_message_of([&] { open_datasets("no-such-dataset"); });
  EXPECT_NE(msg.find("neither a built-in dataset"), std::string::npos) << msg;
}

TEST(ImagePipeline, ClassificationCountsAndConfusionFiles) {
  ClassificationCounts c(3);
  auto logits = torch::tensor({{3.f, 1.f, 0.f}, {0.f, 1.f, 3.f}, {0.f, 5.f, 1.f}, {9.f, 0.f, 0.f}});
  auto labels = torch::tensor({0, 1, 1, 2}, torch::kLong);
  auto losses = torch::tensor({0.1, 0.2, 0.3, 0.4}, torch::kDouble);
  c.add(logits, labels, losses, {1, 1, 1, 0});  // the last row is padding
  EXPECT_EQ(c.samples, 3);
  EXPECT_EQ(c.top1, 2);   // rows 0 and 2
  EXPECT_EQ(c.top5, 3);   // 3 classes: top-5 holds every class
  EXPECT_NEAR(c.mean_loss(), 0.2, 1e-12);
  EXPECT_EQ(c.confusion[1][2].item<int64_t>(), 1);
  EXPECT_EQ(c.confusion.sum().item<int64_t>(), 3);
  ClassificationCounts back(3);
  back.unpack(c.pack());
  EXPECT_TRUE(torch::equal(back.confusion, c.confusion));
  EXPECT_EQ(back.top1, 2);

  auto d = fresh_dir("confusion");
  write_confusion_csv(c.confusion, {"cat", "dog, big", "owl"}, d + "/m.csv");
  std::ifstream in(d + "/m.csv");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "true\\predicted,cat,\"dog, big\",owl\ncat,1,0,0\n\"dog, big\",0,1,1\nowl,0,0,0\n");
  write_confusion_png(c.confusion, {"cat", "dog, big", "owl"}, "test", d + "/m.png");
  auto png = cv::imread(d + "/m.png");
  ASSERT_FALSE(png.empty());
  EXPECT_GT(png.cols, 3 * 56);
  EXPECT_GT(png.rows, 3 * 56);
}

TEST(ImagePipeline, ParallelPlanCoversEveryParameter) {
  auto c = ViTConfig::named("nano", 28, 4, 1, 10);
  ViTForImageClassification model(c);
  auto plan = parallel_plan(c);
  for (const auto& item : model->named_parameters()) {
    std::string module = item.key().substr(0, item.key().rfind('.'));
    int matches = 0;
    for (const auto& r : plan.rules) matches += parallel::path_matches(r.pattern, module);
    EXPECT_EQ(matches, 1) << module;
  }
  EXPECT_EQ(plan.find("vit.encoder.layer.3.attention.attention.key")->style, parallel::SplitStyle::kColumn);
  EXPECT_EQ(plan.find("vit.encoder.layer.3.output.dense")->style, parallel::SplitStyle::kRow);
}

// Attention starts as mimetic initialisation prescribes: W_o W_v = 0.4 Z - 0.4 I exactly (trace
// near -0.4 per dimension), and the query-key products lean towards the identity.
TEST(ImagePipeline, MimeticInitialisationShapesAttention) {
  auto c = ViTConfig::named("nano", 28, 4, 1, 10);
  torch::manual_seed(0);
  ViTForImageClassification model(c);
  auto& layer = model->vit->encoder->layers[1];
  auto& a = layer->attention->attention;
  auto qk_before = torch::mm(a->query->weight.t(), a->key->weight).trace().item<double>();
  model->mimetic_init();
  const double D = static_cast<double>(c.hidden_size);
  auto ov = torch::mm(layer->attention->output->dense->weight, a->value->weight);
  double per_dim = ov.trace().item<double>() / D;
  EXPECT_GT(per_dim, -0.5);
  EXPECT_LT(per_dim, -0.3);
  auto qk = torch::mm(a->query->weight.t(), a->key->weight).trace().item<double>() / D;
  EXPECT_GT(qk, 0.3) << "sum over heads of rank-32 approximations of 0.7 Z + 0.7 I";
  EXPECT_LT(std::abs(qk_before) / D, 0.05) << "random init has no such bias";
}

// Sine-cosine positions: the class token's entry zero, the first quarter of a patch's channels
// sin(row x omega_i), and neighbouring patches closer to each other than distant ones.
TEST(ImagePipeline, SineCosinePositionsAreLocal) {
  auto c = ViTConfig::named("nano", 28, 4, 1, 10);
  ViTForImageClassification model(c);
  model->sincos_position_init();
  auto pos = model->vit->embeddings->position_embeddings[0];  // [1 + 49, 128]
  EXPECT_EQ(pos[0].abs().max().item<double>(), 0.0);
  // Patch 10 sits at row 1, column 3; channel 5 of the first quarter is sin(1 x 10000^(-5/32)).
  EXPECT_NEAR(pos[1 + 10][5].item<double>(), std::sin(std::pow(10000.0, -5.0 / 32.0)), 1e-6);
  auto cosine = [&](int a, int b) { return torch::cosine_similarity(pos[1 + a], pos[1 + b], 0).item<double>(); };
  EXPECT_GT(cosine(24, 25), cosine(24, 27));  // centre vs right neighbour, vs three columns away
  EXPECT_GT(cosine(24, 17), cosine(24, 3));   // one row up, vs three rows up
}

// Patch dropout: training forwards see a random share of the patches (different draws give
// different logits); evaluation sees them all (logits as without dropout).
TEST(ImagePipeline, PatchDropoutOnlyInTraining) {
  auto c = ViTConfig::named("nano", 28, 4, 1, 10);
  torch::manual_seed(0);
  ViTForImageClassification model(c);
  auto px = torch::randn({3, 1, 28, 28});
  model->eval();
  auto full = model->forward(px);
  model->set_patch_keep(0.5);
  EXPECT_TRUE(torch::equal(model->forward(px), full));
  model->train();
  auto a = model->forward(px), b = model->forward(px);
  EXPECT_EQ(a.sizes(), full.sizes());
  EXPECT_FALSE(torch::allclose(a, b)) << "two draws of 25 patches out of 49";
  a.sum().backward();
  EXPECT_TRUE(model->vit->embeddings->position_embeddings.grad().defined());
  EXPECT_THROW(model->set_patch_keep(0.0), c10::Error);
}

TEST(ImagePipeline, MirrorAveragedPredictionIsTheMeanOfBothViews) {
  auto c = ViTConfig::named("nano", 28, 4, 1, 10);
  torch::manual_seed(0);
  ViTForImageClassification model(c);
  model->eval();
  torch::NoGradGuard no_grad;
  auto px = torch::randn({3, 1, 28, 28});
  auto single = class_log_probs(model, px, false);
  EXPECT_TRUE(torch::allclose(single, torch::log_softmax(model->forward(px), 1)));
  auto mirrored = class_log_probs(model, px, true);
  auto mean = (torch::softmax(model->forward(px), 1) + torch::softmax(model->forward(px.flip({3})), 1)) / 2;
  EXPECT_TRUE(torch::allclose(mirrored.exp(), mean, 1e-6, 1e-7));
  // Averaging over both views makes the prediction blind to which way the image faces; a
  // single view is not (the random weights see the two images differently).
  EXPECT_TRUE(torch::allclose(class_log_probs(model, px.flip({3}), true), mirrored, 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(class_log_probs(model, px.flip({3}), false), single, 1e-3, 1e-4));
}

// ---- 2 ranks against one process --------------------------------------------------------------

ViTConfig small_config() {
  ViTConfig c;
  c.image_size = 8, c.patch_size = 4, c.num_channels = 1, c.hidden_size = 32, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.intermediate_size = 64, c.num_labels = 5;
  return c;
}

// Steps of batch 8 over (augmented) images through the loader; with a plugin, each of the
// world's ranks takes its share of the same global batches (the DistributedSampler's split).
std::vector<double> train_losses(std::shared_ptr<booster::Plugin> plugin, int steps) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(7);
  auto images = torch::randint(256, {64, 1, 10, 10}, g, torch::kInt64).to(torch::kByte);
  auto labels = torch::randint(5, {64}, g, torch::kInt64);
  auto source = std::make_shared<TensorImageSource>(images, labels, std::vector<std::string>{}, "memory");
  torch::manual_seed(1);
  ViTForImageClassification model(small_config());
  auto opt = optim::make_optimizer(*model, {.name = "adamw", .lr = 3e-3, .weight_decay = 0.05});
  const int n = plugin ? dist::world_size() : 1;
  auto sampler = std::make_shared<data::DistributedSampler>(
      data::DistributedSampler::Options{.dataset_size = 64, .seed = 9, .drop_last = true});
  LoaderOptions lo;
  lo.transform.image_size = 8;
  lo.transform.channels = 1;
  lo.seed = 4;
  PrefetchLoader loader(source, lo);
  std::optional<booster::Booster> booster;
  booster::BoostedOptimizer* boosted = nullptr;
  booster::Boosted b;
  if (plugin) {
    booster.emplace(plugin);
    b = booster->boost(model.ptr(), opt, nullptr, sampler);
    boosted = b.optimizer.get();
  }
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    loader.submit(sampler->next(8 / n), 0);
    auto batch = loader.take();
    boosted ? boosted->zero_grad() : opt->zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(batch.pixels), batch.labels);
    if (plugin) {
      booster->backward(loss, *boosted);
      booster->clip_grad_norm(*boosted, 0.5);
      boosted->step();
    } else {
      loss.backward();
      torch::nn::utils::clip_grad_norm_(model->parameters(), 0.5);
      opt->step();
    }
    auto l = loss.detach().to(torch::kFloat64).reshape({1});
    if (plugin) dist::all_reduce(l, dist::world_group(), dist::ReduceOp::kAvg);
    losses.push_back(l.item<double>());
  }
  return losses;
}

TEST(ViTMultiRank, DdpAndZero2FollowOneProcess) {
  testing::run_ranks(2, [] {
    auto want = train_losses(nullptr, 5);
    for (const char* name : {"ddp", "zero2"}) {
      auto got = train_losses(booster::make_plugin(name), 5);
      for (size_t s = 0; s < want.size(); ++s)
        EXPECT_NEAR(got[s], want[s], 1e-5 * std::abs(want[s])) << name << " step " << s;
    }
  });
}

}  // namespace
}  // namespace colossal::vit
