// A watchdog's expiry caught in a test instead of ending the process: the message it would have
// printed, and whether it came. The handler runs on the watchdog's thread, hence the lock.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "comm/watchdog.hpp"

namespace scalelab_test {

class ExpiryCapture {
 public:
  scalelab::Watchdog::OnExpire handler() {
    return [this](const std::string& text) {
      std::lock_guard<std::mutex> lock(mutex_);
      message_ = text;
      fired_ = true;
    };
  }
  bool fired() const { return fired_; }
  // Polls for up to 2 s (10 times the tests' 0.2 s limit).
  void wait() const {
    for (int i = 0; i < 100 && !fired_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string message() {
    std::lock_guard<std::mutex> lock(mutex_);
    return message_;
  }

 private:
  std::mutex mutex_;
  std::string message_;
  std::atomic<bool> fired_{false};
};

}  // namespace scalelab_test
