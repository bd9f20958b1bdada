// train_vit driven as a user drives it (through `colossal run` for 2 ranks) on an image folder
// written here: three classes of striped pictures (horizontal, vertical, diagonal) as PNG and
// JPEG files of varying size.
#include <gtest/gtest.h>

#include <tuple>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <random>
#include <set>
#include <tuple>

#include "tests/support/multirank.h"
#include "vit/pretrained.h"

namespace colossal::vit {
namespace {
namespace fs = std::filesystem;

// Stripes of period 4 in one of three directions, a random phase, colour and noise.
cv::Mat striped(int kind, std::mt19937& rng, int h, int w) {
  std::uniform_int_distribution<int> phase(0, 3), noise(-30, 30), tint(0, 80);
  cv::Mat m(h, w, CV_8UC3);
  const int p = phase(rng), t = tint(rng);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      int coord = kind == 0 ? y : kind == 1 ? x : x + y;
      int v = ((coord + p) / 2) % 2 ? 220 : 30;
      for (int c = 0; c < 3; ++c) m.at<cv::Vec3b>(y, x)[c] = cv::saturate_cast<uchar>(v + noise(rng) + (c == 0 ? t : 0));
    }
  return m;
}

const std::vector<std::string> kClasses = {"diagonal", "horizontal", "vertical"};
int kind_of(const std::string& cls) { return cls == "horizontal" ? 0 : cls == "vertical" ? 1 : 2; }

std::string make_data(const std::string& name, int per_class) {
  auto d = ::testing::TempDir() + "train_vit_" + name + "_" + std::to_string(::getpid());
  fs::remove_all(d);
  std::mt19937 rng(1);
  for (const auto& cls : kClasses) {
    fs::create_directories(d + "/" + cls);
    for (int i = 0; i < per_class; ++i) {
      auto m = striped(kind_of(cls), rng, 16 + (i % 3) * 4, 16 + (i % 2) * 4);
      EXPECT_TRUE(cv::imwrite(d + "/" + cls + "/" + std::to_string(i) + (i % 4 == 3 ? ".jpg" : ".png"), m));
    }
  }
  return d;
}

struct Run {
  int rc = 0;
  std::string output;
  std::vector<nlohmann::json> log;
};

Run train_vit(int ranks, const std::string& flags, const std::string& log_file = "") {
  std::string bin = testing::binary_dir();
  std::string prefix = ranks > 1 ? bin + "/colossal run --nproc_per_node " + std::to_string(ranks) + " -- " : "";
  std::string out = ::testing::TempDir() + "train_vit_out_" + std::to_string(::getpid());
  std::string cmd = prefix + bin + "/train_vit " + flags + (log_file.empty() ? "" : " --log_file " + log_file) +
                    " > " + out + " 2>&1";
  Run r;
  if (!log_file.empty()) fs::remove(log_file);
  r.rc = std::system(cmd.c_str());
  std::ifstream so(out);
  r.output.assign(std::istreambuf_iterator<char>(so), std::istreambuf_iterator<char>());
  r.output = cmd + "\n" + r.output;
  if (!log_file.empty()) {
    std::ifstream in(log_file);
    std::string line;
    while (std::getline(in, line)) r.log.push_back(nlohmann::json::parse(line));
  }
  return r;
}

// Learned positions: these runs are 12-60 steps, and sine-cosine positions (the default, tuned
// for Fashion-MNIST's 14,000 steps) start too slowly for that (vit/README.md).
const char* kSmall =
    " --image_size 16 --patch_size 4 --batch_size 8 --lr 1e-3 --warmup_ratio 0.1 --workers 2 --position_init normal ";

TEST(TrainVit, TrainsEvaluatesAndPredictsOnAnImageFolder) {
  auto data = make_data("folder", 40);
  auto save = data + "_out";
  auto log = data + ".jsonl";
  auto r = train_vit(2, "--data " + data + kSmall + "--epochs 10 --log_interval 5 --eval_flip --save_dir " + save, log);
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("image folder " + data + " (10% of each class held out): 108 training and 12 evaluation"),
            std::string::npos) << r.output;
  // The held-out accuracy from the log's last evaluation: the stripes are easy to tell apart.
  double top1 = -1, top1_flip = -1;
  for (const auto& j : r.log)
    if (j.value("event", "") == "eval") top1 = j["top1"].get<double>(), top1_flip = j["top1_flip"].get<double>();
  EXPECT_GE(top1, 0.9) << r.output;
  EXPECT_GE(top1_flip, 0.9) << r.output;  // --eval_flip: averaged with the mirror images
  EXPECT_NE(r.output.find("result with mirror averaging (--eval_flip): top-1 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("images/s"), std::string::npos);

  std::ifstream csv(save + "/confusion_matrix.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header, "true\\predicted,diagonal,horizontal,vertical");
  auto png = cv::imread(save + "/confusion_matrix.png");
  EXPECT_FALSE(png.empty()) << "the confusion matrix picture does not decode";
  std::ifstream cfg(save + "/model/config.json");
  auto config = nlohmann::json::parse(cfg);
  EXPECT_EQ(config["id2label"]["1"], "horizontal");
  EXPECT_TRUE(fs::exists(save + "/model/preprocessor_config.json"));

  // New pictures of each class, classified by the saved model.
  std::mt19937 rng(99);
  std::string files;
  for (const auto& cls : kClasses) {
    auto path = data + "_" + cls + ".png";
    cv::imwrite(path, striped(kind_of(cls), rng, 16, 16));
    files += " " + path;
  }
  auto p = train_vit(1, "--save_dir " + save + " --top_k 2 --eval_flip --predict" + files);
  ASSERT_EQ(p.rc, 0) << p.output;
  int right = 0;
  for (const auto& cls : kClasses) {
    auto at = p.output.find(data + "_" + cls + ".png: ");
    ASSERT_NE(at, std::string::npos) << p.output;
    right += p.output.compare(at + data.size() + cls.size() + 7, cls.size(), cls) == 0;
  }
  EXPECT_GE(right, 2) << p.output;
  auto missing = train_vit(1, "--save_dir " + save + " --predict " + data + "_none.png");
  EXPECT_NE(missing.rc, 0);
  EXPECT_NE(missing.output.find(data + "_none.png: cannot be read"), std::string::npos) << missing.output;
}

// A checkpoint taken after the first epoch resumes onto the same loss curve.
TEST(TrainVit, ResumeFollowsTheUninterruptedRun) {
  auto data = make_data("resume", 24);
  const std::string flags = "--data " + data + kSmall + "--epochs 2 --log_interval 1 ";
  auto a = train_vit(2, flags + "--save_dir " + data + "_a", data + "_a.jsonl");
  ASSERT_EQ(a.rc, 0) << a.output;
  std::map<int64_t, double> full, resumed;
  int64_t first_epoch_end = -1;
  for (const auto& j : a.log) {
    if (!j.contains("event")) full[j["step"].get<int64_t>()] = j["loss"].get<double>();
    if (j.value("event", "") == "checkpoint" && first_epoch_end < 0) first_epoch_end = j["step"].get<int64_t>();
  }
  ASSERT_GT(first_epoch_end, 0) << a.output;
  // The step checkpoint's model/ opens as a model on its own.
  const std::string step_model = data + "_a/checkpoints/step-" + std::to_string(first_epoch_end) + "/model";
  EXPECT_NO_THROW(vit::load_pretrained(step_model)) << step_model;
  auto b = train_vit(2, flags + "--save_dir " + data + "_b --load_checkpoint " + data + "_a/checkpoints/step-" +
                            std::to_string(first_epoch_end),
                     data + "_b.jsonl");
  ASSERT_EQ(b.rc, 0) << b.output;
  for (const auto& j : b.log)
    if (!j.contains("event")) resumed[j["step"].get<int64_t>()] = j["loss"].get<double>();
  ASSERT_FALSE(resumed.empty());
  EXPECT_EQ(resumed.begin()->first, first_epoch_end + 1);
  for (const auto& [step, loss] : resumed) {
    ASSERT_TRUE(full.count(step)) << step;
    EXPECT_NEAR(loss, full.at(step), 1e-5 * std::abs(full.at(step))) << "step " << step;
  }
}

std::map<int64_t, double> step_losses(const Run& r) {
  std::map<int64_t, double> out;
  for (const auto& j : r.log)
    if (!j.contains("event")) out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  return out;
}

// Tensor parallelism through the same plan mechanism as LLaMA: on 2 ranks with tp 2 (one
// replica, the same batches as one process) the loss curve is the single process's, with DDP
// and with ZeRO-1 over the (single) data-parallel rank; and on a 2D grid of 2 x 2 ranks (the
// embeddings and the classifier whole, the encoder in blocks; a checkpoint of whole tensors).
TEST(TrainVit, HybridTensorParallelFollowsTheSingleProcessCurve) {
  auto data = make_data("hybrid", 24);
  const std::string flags = "--data " + data + kSmall + "--max_steps 6 --log_interval 1 --init normal ";
  auto one = train_vit(1, flags + "--save_dir " + data + "_one", data + "_one.jsonl");
  ASSERT_EQ(one.rc, 0) << one.output;
  auto ref = step_losses(one);
  ASSERT_EQ(ref.size(), 6u) << one.output;
  for (const auto& [ranks, name, extra] : std::vector<std::tuple<int, std::string, std::string>>{
           {2, "tp2", "--plugin hybrid --tp 2"}, {2, "tp2_zero1", "--plugin hybrid --tp 2 --zero_stage 1"},
           {4, "tp4_2d", "--plugin hybrid --tp 4 --tp_mode 2d"}}) {
    auto r = train_vit(ranks, flags + extra + " --save_dir " + data + "_" + name, data + "_" + name + ".jsonl");
    ASSERT_EQ(r.rc, 0) << r.output;
    EXPECT_NE(r.output.find("tp " + std::to_string(ranks)), std::string::npos) << r.output;
    auto got = step_losses(r);
    ASSERT_EQ(got.size(), ref.size()) << r.output;
    for (const auto& [step, loss] : got)
      EXPECT_NEAR(loss, ref.at(step), 1e-5 * std::abs(ref.at(step))) << name << " step " << step;
  }
  // The tensor-parallel runs saved whole tensors: a single process predicts with their models.
  for (const char* name : {"_tp2", "_tp4_2d"}) {
    auto p = train_vit(1, "--save_dir " + data + name + " --predict " + data + "/vertical/0.png");
    EXPECT_EQ(p.rc, 0) << name << "\n" << p.output;
  }
}

// colossal verify on ViT: data parallelism (each rank half the images, the reference all of
// them) and tensor parallelism (1d on 2 ranks, a 2d grid on 4) match one process in loss,
// gradients and parameters.
TEST(TrainVit, ColossalVerifyMatchesOneProcess) {
  auto data = make_data("verify", 24);
  const std::string bin = testing::binary_dir();
  for (const auto& [ranks, layout] : std::vector<std::pair<int, std::string>>{
           {2, "--plugin ddp"}, {2, "--plugin hybrid --tp 2"}, {4, "--plugin hybrid --tp 4 --tp_mode 2d"}}) {
    const std::string out = data + "_verify_output.txt";
    const std::string cmd = bin + "/colossal verify --nproc_per_node " + std::to_string(ranks) + " --steps 2 -- " +
                            bin + "/train_vit --data " +
                            data + kSmall + "--init normal --save_dir " + data + "_verify " + layout + " > " + out +
                            " 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream in(out);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(rc, 0) << cmd << "\n" << text;
    EXPECT_NE(text.find("PASS: the layout matches one process"), std::string::npos) << text;
    EXPECT_EQ(text.find("gradients and 0 parameters"), std::string::npos) << text;
  }
}

// Pipeline stages (2 ranks, one replica: the single process's batches in 4 microbatches): the
// loss curve and the evaluation (run through the stages, counted on the last) are the single
// process's, for 1F1B and zero-bubble, and with a 2d grid in each stage (8 ranks); the stages'
// saved whole model predicts on one process.
TEST(TrainVit, PipelineFollowsTheSingleProcessCurve) {
  auto data = make_data("pipeline", 24);
  const std::string flags = "--data " + data + kSmall + "--max_steps 6 --log_interval 1 --init normal ";
  auto one = train_vit(1, flags + "--save_dir " + data + "_one", data + "_one.jsonl");
  ASSERT_EQ(one.rc, 0) << one.output;
  auto ref = step_losses(one);
  ASSERT_EQ(ref.size(), 6u) << one.output;
  auto last_eval = [](const std::vector<nlohmann::json>& log) {
    nlohmann::json e;
    for (const auto& j : log)
      if (j.value("event", "") == "eval") e = j;
    return e;
  };
  const auto ref_eval = last_eval(one.log);
  ASSERT_TRUE(ref_eval.contains("top1")) << one.output;
  for (const auto& [ranks, name, extra] : std::vector<std::tuple<int, std::string, std::string>>{
           {2, "pp2", "--plugin hybrid --pp 2 --num_microbatches 4"},
           {2, "pp2_zbh1", "--plugin hybrid --pp 2 --pp_schedule zbh1 --num_microbatches 4"},
           {8, "pp2_2d", "--plugin hybrid --pp 2 --tp 4 --tp_mode 2d --num_microbatches 4"}}) {
    auto r = train_vit(ranks, flags + extra + " --save_dir " + data + "_" + name, data + "_" + name + ".jsonl");
    ASSERT_EQ(r.rc, 0) << r.output;
    EXPECT_NE(r.output.find("pp 2"), std::string::npos) << r.output;
    auto got = step_losses(r);
    ASSERT_EQ(got.size(), ref.size()) << r.output;
    for (const auto& [step, loss] : got)
      EXPECT_NEAR(loss, ref.at(step), 1e-5 * std::abs(ref.at(step))) << name << " step " << step;
    const auto e = last_eval(r.log);
    ASSERT_TRUE(e.contains("top1")) << r.output;
    EXPECT_EQ(e["images"].get<double>(), ref_eval["images"].get<double>()) << name;
    EXPECT_EQ(e["top1"].get<double>(), ref_eval["top1"].get<double>()) << name;
    EXPECT_NEAR(e["loss"].get<double>(), ref_eval["loss"].get<double>(), 1e-5 * ref_eval["loss"].get<double>()) << name;
  }
  auto p = train_vit(1, "--save_dir " + data + "_pp2 --predict " + data + "/vertical/0.png");
  EXPECT_EQ(p.rc, 0) << p.output;
}

// --plugin auto on 2 ranks: the search over ViT's layouts (no sequence parallelism, no
// accumulation outside a pipeline) runs, times two candidates, one of them pure data
// parallelism, and the run trains with the winner. Under colossal verify it is refused by name.
// (With --memory_trace: the traced step's modules are the ViT's.)
TEST(TrainVit, PluginAutoChoosesByMeasurementAndTrains) {
  auto data = make_data("auto", 12);
  const std::string report = data + "_auto_report.json", trace = data + "_trace.json";
  auto r = train_vit(2, "--data " + data + kSmall + "--max_steps 2 --log_interval 1 --init normal --plugin auto --auto_trials 2 " +
                            "--save_dir " + data + "_auto --auto_report " + report + " --memory_trace " + trace,
                     data + "_auto.jsonl");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("--plugin auto: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("<- chosen"), std::string::npos) << r.output;
  std::ifstream in(report);
  ASSERT_TRUE(in.good()) << r.output;
  const auto j = nlohmann::json::parse(in);
  ASSERT_TRUE(j["chosen"].is_string()) << j.dump(2);
  int measured = 0, ddp_measured = 0;
  for (const auto& c : j["candidates"]) {
    EXPECT_EQ(c["sp"].get<int>(), 1) << "ViT has no sequence parallelism: " << c.dump();
    EXPECT_EQ(c["dp"].get<int>() * c["tp"].get<int>() * c["pp"].get<int>(), 2) << c.dump();
    if (c.contains("measured_s")) {
      ++measured;
      EXPECT_GT(c["measured_s"].get<double>(), 0) << c.dump();
      if (c["plugin"] == "ddp" && !c["activation_checkpointing"].get<bool>()) ++ddp_measured;
    }
  }
  EXPECT_EQ(measured, 2) << j.dump(2);
  EXPECT_EQ(ddp_measured, 1) << "plain DDP, the baseline, is always among the trials";
  std::ifstream t(trace);
  ASSERT_TRUE(t.good()) << r.output;
  const auto tj = nlohmann::json::parse(t);
  EXPECT_EQ(tj["step"], 2);
  std::set<std::string> modules;
  for (const auto& m : tj["modules"]) modules.insert(m["module"].get<std::string>());
  // The winner is measured, so it may be a pipeline layout: then rank 0's trace holds the first
  // stage's modules, named for the pipeline step they ran in.
  bool pipelined = false;
  for (const auto& ph : tj["phases"]) pipelined = pipelined || ph["phase"] == "pipeline";
  const std::vector<std::string> expected = pipelined
      ? std::vector<std::string>{"embeddings (pipeline)", "layers.0 (pipeline)"}
      : std::vector<std::string>{"embeddings", "layers.0", "head"};
  for (const auto& name : expected) EXPECT_TRUE(modules.count(name)) << name << "\n" << tj.dump();
  const std::string chosen = j["chosen"];
  EXPECT_NE(r.output.find("plugin " + chosen.substr(0, chosen.find(' '))), std::string::npos) << chosen << "\n" << r.output;
  EXPECT_EQ(step_losses(r).size(), 2u) << r.output;

  const std::string bin = testing::binary_dir();
  const std::string out = data + "_auto_verify.txt";
  const std::string cmd = bin + "/colossal verify --nproc_per_node 2 --steps 1 -- " + bin + "/train_vit --data " + data +
                          kSmall + "--plugin auto --save_dir " + data + "_auto_verify > " + out + " 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  std::ifstream vin(out);
  const std::string text((std::istreambuf_iterator<char>(vin)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("--plugin auto chooses its layout by timing"), std::string::npos) << text;
}

TEST(TrainVit, BadImagesStopTheRunOrAreSkippedByFlag) {
  auto data = make_data("bad", 12);
  const std::string bad = data + "/vertical/5.png";
  std::ofstream(bad, std::ios::trunc) << "this is not a PNG";
  auto stop = train_vit(2, "--data " + data + kSmall + "--epochs 1 --save_dir " + data + "_out");
  EXPECT_NE(stop.rc, 0);
  EXPECT_NE(stop.output.find(bad + ": not a decodable image"), std::string::npos) << stop.output;
  EXPECT_NE(stop.output.find("--on_bad_image skip"), std::string::npos) << stop.output;
  auto skip = train_vit(2, "--data " + data + kSmall + "--epochs 2 --on_bad_image skip --save_dir " + data + "_out");
  EXPECT_EQ(skip.rc, 0) << skip.output;
  EXPECT_NE(skip.output.find("skipped: " + bad), std::string::npos) << skip.output;
}

TEST(TrainVit, SettingsErrorsNameTheProblem) {
  auto dir = ::testing::TempDir() + "train_vit_cfg_" + std::to_string(::getpid());
  fs::create_directories(dir);
  std::ofstream(dir + "/c.yaml") << "epochs: 2\nbatchsize: 8\n";
  auto r = train_vit(1, "--config " + dir + "/c.yaml");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("batchsize"), std::string::npos) << r.output;
  r = train_vit(1, "--plugin fsdp");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("unknown plugin 'fsdp' (known: ddp, zero, zero1, zero2, gemini, zero3, hybrid"),
            std::string::npos) << r.output;
  r = train_vit(1, "--plugin zero2 --offload_optim_frac 0.5");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("plugin 'zero2' has no option 'offload_optim_frac' (from flag --offload_optim_frac)"),
            std::string::npos) << r.output;
  r = train_vit(1, "--plugin help");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("gemini: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("offload_optim_frac (float, default 0)"), std::string::npos) << r.output;
  r = train_vit(1, "--data " + dir + "/nothing-here");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("nothing-here' is neither a built-in dataset"), std::string::npos) << r.output;
  r = train_vit(1, "--predict x.png --model_dir " + dir + "/no-model");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("no model at " + dir + "/no-model"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace colossal::vit
