#include "core/common/interrupt.h"

#include <mutex>

namespace colossal {
namespace {
std::mutex& check_mutex() {
  static std::mutex m;
  return m;
}
std::function<bool()>& installed_check() {
  static std::function<bool()> check;
  return check;
}
}  // namespace

void set_interrupt_check(std::function<bool()> check) {
  std::lock_guard<std::mutex> lock(check_mutex());
  installed_check() = std::move(check);
}

bool interrupt_requested() {
  std::function<bool()> check;
  {
    std::lock_guard<std::mutex> lock(check_mutex());
    check = installed_check();
  }
  return check && check();
}


}  // namespace colossal
