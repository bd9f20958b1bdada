// The one training loop (apps/common/train_loop.h) as users meet it in train_recsys and train_sora:
// a NaN stops the run before the optimizer step, colossal verify passes, SIGINT finishes the step
// and leaves a checkpoint that resumes, and data too small for a step or an evaluation is named.
// (Each trainer's own tests check its layouts against one process.)
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "core/common/fs.h"
#include "sora/data/clip_csv.h"
#include "tests/support/multirank.h"

namespace apps_train_loop_test {

struct Result {
  int rc = 0;  // the exit status
  std::string output;
};

std::string dir_of(const std::string& name) {
  return ::testing::TempDir() + "train_loop_" + name + "_" + std::to_string(::getpid());
}

Result run(const std::string& name, const std::string& command, const std::string& env = "") {
  const std::string out = dir_of(name) + ".out";
  const int status = std::system((env + command + " > " + out + " 2>&1").c_str());
  std::ifstream in(out);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
          command + "\n" + std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>())};
}

std::string bin(const std::string& program) { return colossal::testing::binary_dir() + "/" + program; }

const std::string kRecsys = "--held_out_fraction 0.9 --log_interval 1 --load_checkpoint none ";
const std::string kSora = "--frames 4 --height 16 --width 16 --frame_stride 8 --window_step 0 --vae_channels 8 "
                          "--hidden 32 --depth 1 --heads 2 --batch_size 4 --log_interval 1 --load_checkpoint none ";

TEST(TrainLoop, NaNLossStopsRecsysAndSoraBeforeTheOptimizerStep) {
  for (const auto& [name, command] :
       std::vector<std::pair<std::string, std::string>>{
           {"recsys", bin("train_recsys") + " " + kRecsys + "--max_steps 5 --save_interval 1 --save_dir " + dir_of("nan_recsys")},
           {"sora", bin("train_sora") + " " + kSora + "--max_steps 5 --save_interval 1 --save_dir " + dir_of("nan_sora")}}) {
    colossal::fs::remove_all(dir_of("nan_" + name));
    const auto r = run("nan_" + name, command, "COLOSSAL_INJECT_FAULT=nan_loss ");
    EXPECT_EQ(r.rc, 1) << r.output;
    EXPECT_NE(r.output.find("step 2: the loss is NaN; stopped before the optimizer step"), std::string::npos) << r.output;
    // Step 1's checkpoint was written; step 2 never reached the weights, so none holds it.
    const std::string checkpoints = dir_of("nan_" + name) + (name == "sora" ? "/vae" : "") + "/checkpoints";
    EXPECT_TRUE(std::filesystem::exists(checkpoints + "/step-1/model")) << r.output;
    EXPECT_FALSE(std::filesystem::exists(checkpoints + "/step-2")) << r.output;
    EXPECT_EQ(r.output.find("step 2/5"), std::string::npos) << "a NaN step was logged as trained: " << r.output;
  }
}

TEST(TrainLoop, ColossalVerifyPassesForRecsysAndSora) {
  const std::string verify = bin("colossal") + " verify --steps 3 --nproc_per_node 2 -- ";
  for (const auto& [name, flags] : std::vector<std::pair<std::string, std::string>>{
           {"recsys_zero2", bin("train_recsys") + " --plugin zero2 --save_dir " + dir_of("verify_recsys")},
           {"recsys_deepfm", bin("train_recsys") + " --model deepfm --batch_size 256 --save_dir " + dir_of("verify_deepfm")},
           {"sora_zero2", bin("train_sora") + " " + kSora + "--plugin zero2 --save_dir " + dir_of("verify_sora")}}) {
    const auto r = run("verify_" + name, verify + flags);
    EXPECT_EQ(r.rc, 0) << r.output;
    EXPECT_NE(r.output.find("PASS: the layout matches one process"), std::string::npos) << r.output;
    // Recording is all the runs do: no checkpoint is resumed or written.
    EXPECT_EQ(r.output.find("resumed:"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("checkpoint at step"), std::string::npos) << r.output;
  }
}

// Ctrl-C (SIGINT) while training: the step finishes on every rank, a checkpoint is written and
// named, the job exits 130, and the same command resumes from that checkpoint.
TEST(TrainLoop, SigintFinishesTheStepAndLeavesACheckpointThatResumes) {
  const std::string dir = dir_of("sigint");
  colossal::fs::remove_all(dir);
  const std::string out = dir + ".out";
  const std::string command = bin("colossal") + " run --nproc_per_node 2 -- " + bin("train_recsys") +
                              " --batch_size 64 --max_steps 100000 --log_interval 1 --save_dir " + dir;
  const pid_t child = ::fork();
  if (child == 0) {
    ::setpgid(0, 0);
    ::execl("/bin/sh", "sh", "-c", ("exec " + command + " > " + out + " 2>&1").c_str(), nullptr);
    ::_exit(127);
  }
  ASSERT_GT(child, 0);
  auto text = [&] {
    std::ifstream in(out);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (text().find("step 20/") == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_NE(text().find("step 20/"), std::string::npos) << text();
  ::kill(child, SIGINT);  // the launcher, as Ctrl-C in its terminal would
  int status = 0;
  const auto stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (::waitpid(child, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < stop_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (std::chrono::steady_clock::now() >= stop_deadline) {
    ::kill(-child, SIGKILL);
    FAIL() << "the job did not stop within 60 s of SIGINT:\n" << text();
  }
  const std::string log = text();
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 130) << log;
  const auto at = log.find("stopped after step ");
  ASSERT_NE(at, std::string::npos) << log;
  const int64_t step = std::stoll(log.substr(at + 19));
  EXPECT_GE(step, 20);
  EXPECT_NE(log.find("checkpoint " + dir + "/checkpoints/step-" + std::to_string(step)), std::string::npos) << log;
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoints/step-" + std::to_string(step) + "/model")) << log;

  // The same command (on one rank this time, the same global batch) continues from it.
  const auto resumed = run("sigint_resumed", bin("train_recsys") + " --batch_size 64 --max_steps " +
                                                 std::to_string(step + 2) + " --log_interval 1 --save_dir " + dir);
  EXPECT_EQ(resumed.rc, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed: " + dir + "/checkpoints/step-" + std::to_string(step)), std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("step " + std::to_string(step + 1) + "/"), std::string::npos) << resumed.output;
}

// --batch_size per rank (train_vit): a checkpoint from 2 ranks resumed on 1 keeps its 16 samples
// a step through accumulation, and says so.
TEST(TrainLoop, AResumeOnFewerRanksKeepsTheGlobalBatch) {
  const std::string dir = dir_of("global_batch");
  colossal::fs::remove_all(dir);
  const std::string flags = " --batch_size 8 --log_interval 1 --workers 1 --save_dir " + dir;
  const auto two = run("global_batch_two", bin("colossal") + " run --nproc_per_node 2 -- " + bin("train_vit") + flags +
                                               " --max_steps 2 --load_checkpoint none");
  ASSERT_EQ(two.rc, 0) << two.output;
  EXPECT_NE(two.output.find("2 replica(s) x 8 samples x 1 micro-batch(es) = 16 samples per step"), std::string::npos)
      << two.output;
  const auto one = run("global_batch_one", bin("train_vit") + flags + " --max_steps 3");
  ASSERT_EQ(one.rc, 0) << one.output;
  EXPECT_NE(one.output.find("resumed: " + dir + "/checkpoints"), std::string::npos) << one.output;
  EXPECT_NE(one.output.find("the checkpoint trained with 16 samples per step on 2 replica(s); 1 replica(s) x 8 "
                            "samples take 2 micro-batches per step to keep it (--accumulation_steps 1 -> 2)"),
            std::string::npos)
      << one.output;
  EXPECT_NE(one.output.find("1 replica(s) x 8 samples x 2 micro-batch(es) = 16 samples per step"), std::string::npos)
      << one.output;
  EXPECT_NE(one.output.find("step 3/3"), std::string::npos) << one.output;
}

TEST(TrainLoop, DataTooSmallForAStepOrAnEvaluationIsNamed) {
  auto r = run("big_batch", bin("train_recsys") + " --batch_size 2000000000 --save_dir " + dir_of("big_batch"));
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("a step takes 2000000000 samples"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--batch_size 2000000000"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the training data holds 80003"), std::string::npos) << r.output;
  r = run("many_fields", bin("train_recsys") + " --data synthetic --synthetic_fields 100000000");
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("--synthetic_fields: expected in [1, 1024], got 100000000"), std::string::npos) << r.output;

  // One short clip: a window to train on, none held out. The held-out PSNR would be NaN.
  std::ifstream all(colossal::sora::default_clip_csv());
  ASSERT_TRUE(all.good());
  std::string header, line, short_clip;
  std::getline(all, header);
  while (std::getline(all, line))
    if (line.find("realshort.mp4") != std::string::npos) short_clip = line;
  ASSERT_FALSE(short_clip.empty());
  const std::string csv = dir_of("one_clip") + ".csv";
  std::ofstream(csv) << header << "\n" << short_clip << "\n";
  r = run("one_clip", bin("train_sora") + " --data " + csv + " --batch_size 1 --max_steps 2 --save_dir " + dir_of("one_clip"));
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("the evaluation set holds nothing to score (--held_out_fraction 0.1 of " + csv + ")"),
            std::string::npos)
      << r.output;
}

}  // namespace apps_train_loop_test
