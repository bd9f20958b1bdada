// train_sora driven as a user drives it: both stages on 2 ranks (DDP, ZeRO-2, ZeRO-3,
// sequence-parallel STDiT) take the steps one process takes (noise and timesteps are keyed to the windows), and
// bad input is named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/common/fs.h"
#include "sora/io/video.h"
#include "tests/support/multirank.h"

namespace sora_train_test {

struct Run {
  int rc = 0;
  std::string output;
  std::map<std::string, std::map<int64_t, double>> loss;  // stage -> step -> loss
  std::map<std::string, std::map<int64_t, double>> eval;  // stage -> step -> psnr / flow loss
};

std::string dir_of(const std::string& name) {
  return ::testing::TempDir() + "train_sora_" + name + "_" + std::to_string(::getpid());
}

Run train_sora(int ranks, const std::string& name, const std::string& flags, bool fresh = true) {
  const std::string bin = colossal::testing::binary_dir();
  const std::string dir = dir_of(name), out = dir + ".out";
  if (fresh) colossal::fs::remove_all(dir);
  const std::string prefix = ranks > 1 ? bin + "/colossal run --nproc_per_node " + std::to_string(ranks) + " -- " : "";
  const std::string cmd = prefix + bin + "/train_sora --save_dir " + dir + " --log_interval 1 " + flags + " > " + out + " 2>&1";
  Run r;
  r.rc = std::system(cmd.c_str());
  std::ifstream so(out);
  r.output = cmd + "\n" + std::string(std::istreambuf_iterator<char>(so), std::istreambuf_iterator<char>());
  for (const char* stage : {"vae", "dit"}) {
    std::ifstream log(dir + "/" + stage + "/log.jsonl");
    std::string line;
    while (std::getline(log, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("event") && j["event"] == "eval") {
        for (const char* m : {"psnr", "flow_loss"})
          if (j.contains(m)) r.eval[stage][j["step"]] = j[m];
      } else if (j.contains("loss")) {
        r.loss[stage][j["step"]] = j["loss"];
      }
    }
  }
  return r;
}

const std::string kTiny = "--frames 4 --height 16 --width 16 --frame_stride 8 --window_step 0 --vae_channels 8 "
                          "--hidden 32 --depth 1 --heads 2 --batch_size 4 --max_steps 4 --load_checkpoint none ";

TEST(TrainSora, BothStagesOnTwoRanksEqualOneProcess) {
  const auto one = train_sora(1, "one", kTiny);
  ASSERT_EQ(one.rc, 0) << one.output;
  ASSERT_EQ(one.loss.at("vae").size(), 4u) << one.output;
  ASSERT_EQ(one.loss.at("dit").size(), 4u) << one.output;
  // DDP, ZeRO-2 and ZeRO-3 (gemini) over 2 ranks; hybrid with sp 2 (all_to_all) shards STDiT's
  // spatial tokens (its VAE stage folds sp into dp: 2 data-parallel ranks).
  for (const std::string plugin :
       {"--plugin ddp", "--plugin zero2", "--plugin gemini", "--plugin hybrid --sp 2 --sp_mode all_to_all"}) {
    const auto two = train_sora(2, "two", kTiny + plugin);
    ASSERT_EQ(two.rc, 0) << two.output;
    for (const char* stage : {"vae", "dit"}) {
      for (const auto& [step, loss] : one.loss.at(stage))
        EXPECT_NEAR(two.loss.at(stage).at(step), loss, 1e-5 * std::abs(loss)) << plugin << ": " << stage << " step " << step;
      for (const auto& [step, value] : one.eval.at(stage))
        EXPECT_NEAR(two.eval.at(stage).at(step), value, 1e-4 * std::abs(value)) << plugin << ": " << stage << " eval at " << step;
    }
  }
  EXPECT_GT(one.eval.at("vae").at(4), one.eval.at("vae").at(0)) << "the VAE's held-out PSNR did not rise";
  EXPECT_NE(one.loss.at("dit").at(4), one.loss.at("dit").at(1));
  // The models were written for generate_video.
  std::ifstream config(dir_of("one") + "/dit/model/config.json");
  ASSERT_TRUE(config.good());
  EXPECT_GT(nlohmann::json::parse(config)["latent_scale"].get<double>(), 0);
  // generate_video writes an .mp4 of the asked length and size, and its contact sheet.
  const std::string bin = colossal::testing::binary_dir(), video = dir_of("one") + "/sample.mp4";
  const std::string gen = bin + "/generate_video --model_dir " + dir_of("one") + " --prompt 'a potted tree' --steps 3 "
                          "--num_frames 8 --resolution 24x32 --out " + video + " > " + video + ".out 2>&1";
  ASSERT_EQ(std::system(gen.c_str()), 0) << gen;
  const auto info = colossal::sora::probe_video(video);
  EXPECT_EQ(info.frames, 8);
  EXPECT_EQ(info.height, 24);
  EXPECT_EQ(info.width, 32);
  EXPECT_EQ(info.codec, "h264");
  EXPECT_TRUE(std::ifstream(dir_of("one") + "/sample_frames.png").good());
  // The DiT stage alone reuses the saved VAE and takes the same steps.
  colossal::fs::remove_all(dir_of("one") + "/dit");
  const auto dit = train_sora(1, "one", kTiny + "--stage dit", /*fresh=*/false);  // "one"'s VAE
  ASSERT_EQ(dit.rc, 0) << dit.output;
  for (const auto& [step, loss] : one.loss.at("dit"))
    EXPECT_NEAR(dit.loss.at("dit").at(step), loss, 1e-5 * std::abs(loss)) << "dit alone, step " << step;
  // Again: the latent cache that run wrote is mapped, no clip is decoded, the steps are the same.
  colossal::fs::remove_all(dir_of("one") + "/dit/checkpoints");
  colossal::fs::remove_all(dir_of("one") + "/dit/log.jsonl");
  const auto cached = train_sora(1, "one", kTiny + "--stage dit", /*fresh=*/false);
  ASSERT_EQ(cached.rc, 0) << cached.output;
  EXPECT_NE(cached.output.find("mapped from " + dir_of("one") + "/dit/latent_cache.safetensors"), std::string::npos)
      << cached.output;
  EXPECT_EQ(cached.output.find("data: "), std::string::npos) << cached.output;
  for (const auto& [step, loss] : one.loss.at("dit"))
    EXPECT_NEAR(cached.loss.at("dit").at(step), loss, 1e-5 * std::abs(loss)) << "dit from the cache, step " << step;
}

TEST(TrainSora, BadInputIsNamed) {
  const std::string bin = colossal::testing::binary_dir();
  auto run = [&](const std::string& flags) {
    const std::string out = dir_of("bad") + ".out";  // beside the save directory, not in its place
    const int rc = std::system((bin + "/train_sora --save_dir " + dir_of("bad") + " " + flags + " > " + out + " 2>&1").c_str());
    std::ifstream in(out);
    return std::make_pair(rc, std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  };
  auto [rc, out] = run("--stage paint");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--stage: expected vae, dit or all, got 'paint'"), std::string::npos) << out;
  std::tie(rc, out) = run("--data /nonexistent/clips.csv");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("cannot read '/nonexistent/clips.csv'"), std::string::npos) << out;
  std::tie(rc, out) = run("--frames 7 --max_steps 1");  // 7 frames do not divide by the VAE's temporal factor 2
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("frames must divide by 2"), std::string::npos) << out;
}

}  // namespace sora_train_test
