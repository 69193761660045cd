// Helpers shared by the stage-03 tests: a training text whose bytes fit the tiny config's
// vocabulary (V = 64); with compare.hpp, for the tolerances of the tests that include it.
#pragma once

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "compare.hpp"
#include "core/rng.hpp"

namespace scalelab_test {

// A text file of sums such as "37+5=42;" (bytes '+' 43, '0'-'9' 48-57, ';' 59, '=' 61, all below
// 64), written for the life of the object. It has structure to learn (the digits after '=')
// and is the same on every machine.
class ArithmeticText {
 public:
  explicit ArithmeticText(std::size_t lines = 6000) {
    path_ = (std::filesystem::temp_directory_path() /
             ("scalelab_precision_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++) + ".txt"))
                .string();
    scalelab::Rng rng(2024);
    std::string text;
    for (std::size_t i = 0; i < lines; ++i) {
      const auto a = rng.below(100), b = rng.below(100);
      text += std::to_string(a) + "+" + std::to_string(b) + "=" + std::to_string(a + b) + ";";
    }
    std::ofstream(path_, std::ios::binary) << text;
  }
  ~ArithmeticText() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  ArithmeticText(const ArithmeticText&) = delete;
  ArithmeticText& operator=(const ArithmeticText&) = delete;
  const std::string& path() const { return path_; }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::string path_;
};

}  // namespace scalelab_test
