// generate_video: a clip from a caption with the models train_sora wrote. Noise in the latent
// space is carried to data by the Euler sampler over STDiT's velocity (classifier-free guidance
// against the null caption), decoded by the VAE and written as an H.264 .mp4, with a contact
// sheet (PNG) of its frames beside it.
//
//   build/apps/generate_video --prompt "a white cockatoo looks into the camera" --out out/cockatoo.mp4
#include "apps/sora/generate_video.h"

#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "core/common/check.h"
#include "sora/io/contact_sheet.h"
#include "sora/io/video.h"
#include "sora/pipeline/text_to_video.h"

using namespace colossal::sora;

namespace {

struct GenerateArgs {
  std::string prompt = "a white cockatoo looks into the camera";
  std::string model_dir = "out/sora";  // train_sora's --save_dir (vae/model, dit/model)
  int64_t num_frames = 0;              // 0: the training windows' length
  std::string resolution;              // HxW (default: the training size)
  int64_t steps = 30;
  double cfg_scale = 4;
  uint64_t seed = 0;
  double fps = 0;                      // 0: the model's
  std::string out = "out/sora/sample.mp4";
};

bool parse(int argc, char** argv, GenerateArgs& a, int& exit_code) {
  CLI::App app{"generate_video: a clip from a caption with train_sora's models"};
  app.add_option("--prompt", a.prompt, "the caption")->capture_default_str();
  app.add_option("--model_dir", a.model_dir, "train_sora's --save_dir")->capture_default_str();
  app.add_option("--num_frames", a.num_frames, "frames (0: the training windows' length)")->capture_default_str();
  app.add_option("--resolution", a.resolution, "HxW (default: the training size)");
  app.add_option("--steps", a.steps, "Euler steps")->capture_default_str();
  app.add_option("--cfg_scale", a.cfg_scale, "classifier-free guidance scale (1: none)")->capture_default_str();
  app.add_option("--seed", a.seed, "noise seed")->capture_default_str();
  app.add_option("--fps", a.fps, "frames per second of the .mp4 (0: the model's)")->capture_default_str();
  app.add_option("--out", a.out, "the .mp4 to write (a contact sheet PNG goes beside it)")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {  // as the other apps: a bad flag throws, --help returns
    if (e.get_exit_code() != 0) throw std::invalid_argument(std::string(e.what()) + " (--help lists the flags)");
    exit_code = app.exit(e);
    return false;
  }
  return true;
}

void generate(GenerateArgs& a, colossal::apps::RunSummary& summary) {
  const auto t0 = std::chrono::steady_clock::now();
  TextToVideoOptions o{.frames = a.num_frames, .steps = a.steps, .cfg_scale = a.cfg_scale, .seed = a.seed};
  if (!a.resolution.empty()) {
    const auto x = a.resolution.find('x');
    COLOSSAL_CHECK(x != std::string::npos, "--resolution '", a.resolution, "': expected HxW, e.g. 32x32");
    o.height = std::stoll(a.resolution.substr(0, x));
    o.width = std::stoll(a.resolution.substr(x + 1));
  }
  TextToVideo pipeline(a.model_dir);
  const auto clip = pipeline.generate(a.prompt, o);
  const double fps = a.fps > 0 ? a.fps : pipeline.config()["fps"].get<double>();
  write_video(a.out, clip, {.fps = fps});
  const std::string sheet = a.out.substr(0, a.out.rfind('.')) + "_frames.png";
  write_contact_sheet(sheet, clip, {.columns = 8, .scale = std::max<int>(1, static_cast<int>(128 / clip.size(2)))});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s (%ld frames of %ldx%ld at %.0f fps; %ld steps, cfg %.1f, seed %lu) and %s in %.1f s\n",
              a.out.c_str(), clip.size(0), clip.size(1), clip.size(2), fps, a.steps, a.cfg_scale, a.seed, sheet.c_str(),
              secs);
  summary.outputs["video"] = a.out;
  summary.outputs["contact_sheet"] = sheet;
  summary.metrics["seconds"] = secs;
}

}  // namespace

namespace colossal::sora_app {

colossal::apps::RunSummary generate_video(const std::vector<std::string>& args) {
  return colossal::apps::run_job<GenerateArgs>("generate_video", args, &parse, &generate);
}

}  // namespace colossal::sora_app
