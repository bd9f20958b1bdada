#include "apps/sora/generate_video.h"

int main(int argc, char** argv) {
  return colossal::apps::run_main("generate_video", argc, argv, &colossal::sora_app::generate_video);
}
