#include <cstdio>
#include "model/gpt.hpp"
int main() {
  scalelab::MemoryTracker mt;
  scalelab::GPT g(scalelab::gpt_config_by_name("tiny"), &mt);
  g.init_weights(1);
  std::vector<int> x(2*16, 3), y(2*16, 5);
  float l = g.forward(x.data(), y.data(), 2, 16);
  g.backward();
  std::printf("%f\n%s", l, mt.report().c_str());
}
