#include "core/amp/loss_scaler.h"

#include <algorithm>

#include "core/common/check.h"

namespace colossal::amp {

void DynamicLossScaler::Options::validate() const {
  COLOSSAL_CHECK(initial_scale > 0, "[amp] initial_scale: expected > 0, got ", initial_scale);
  COLOSSAL_CHECK(growth_factor > 1, "[amp] growth_factor: expected > 1, got ", growth_factor);
  COLOSSAL_CHECK(backoff_factor > 0 && backoff_factor < 1,
                 "[amp] backoff_factor: expected in (0, 1), got ", backoff_factor);
  COLOSSAL_CHECK(growth_interval >= 1, "[amp] growth_interval: expected >= 1, got ",
                 growth_interval);
  COLOSSAL_CHECK(hysteresis >= 1, "[amp] hysteresis: expected >= 1, got ", hysteresis);
  COLOSSAL_CHECK(min_scale > 0 && min_scale <= max_scale,
                 "[amp] expected 0 < min_scale <= max_scale, got ", min_scale, " and ", max_scale);
}

void DynamicLossScaler::Options::read(const ConfigNode& c) {
  c.read("initial_scale", initial_scale);
  c.read("growth_factor", growth_factor);
  c.read("growth_interval", growth_interval);
  c.read("backoff_factor", backoff_factor);
  c.read("hysteresis", hysteresis);
  c.read("min_scale", min_scale);
  c.read("max_scale", max_scale);
}

DynamicLossScaler::DynamicLossScaler(Options options)
    : options_(options), scale_(options.initial_scale), hysteresis_left_(options.hysteresis) {
  options_.validate();
}

bool DynamicLossScaler::update(bool found_overflow) {
  if (found_overflow) {
    good_steps_ = 0;
    if (--hysteresis_left_ <= 0) {
      scale_ = std::max(options_.min_scale, scale_ * options_.backoff_factor);
      hysteresis_left_ = options_.hysteresis;
    }
    return false;
  }
  if (++good_steps_ >= options_.growth_interval) {
    scale_ = std::min(options_.max_scale, scale_ * options_.growth_factor);
    good_steps_ = 0;
    hysteresis_left_ = options_.hysteresis;
  }
  return true;
}

std::map<std::string, double> DynamicLossScaler::state_dict() const {
  return {{"scale", scale_},
          {"good_steps", static_cast<double>(good_steps_)},
          {"hysteresis_left", static_cast<double>(hysteresis_left_)}};
}

void DynamicLossScaler::load_state_dict(const std::map<std::string, double>& state) {
  for (const char* key : {"scale", "good_steps", "hysteresis_left"}) {
    COLOSSAL_CHECK(state.count(key), "[amp] loss scaler state: missing '", key, "'");
  }
  scale_ = state.at("scale");
  good_steps_ = static_cast<int64_t>(state.at("good_steps"));
  hysteresis_left_ = static_cast<int64_t>(state.at("hysteresis_left"));
}

}  // namespace colossal::amp
