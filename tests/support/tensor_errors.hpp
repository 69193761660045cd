// Per-tensor comparison of two flat parameter (or gradient) buffers of one layout, for the tests
// that run the same model two ways whose arithmetic differs (stage 08's attention kinds).
#pragma once

#include <algorithm>
#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

#include "compare.hpp"
#include "model/params.hpp"

namespace scalelab_test {

// The worst per-tensor relative norm error of got against want, and a line per tensor over tol
// appended to `report`. With skip_key_bias, the key third [C, 2C) of each attn.c_attn.bias (3C
// long) is left out: its gradient is zero in exact arithmetic (a key bias adds q . b_k to every
// score of a query, which the softmax cancels), so both runs hold rounding noise there, and AdamW,
// which divides by the root of the noise's own square, turns any noise into steps of about lr.
// Those entries are checked apart (key_bias_gradient_is_noise in tests/stages/test_attention_model.cpp).
template <typename A>
double worst_tensor_error(const std::string& what, const scalelab::ParamLayout& layout, const A* got, const A* want,
                          double tol, std::string& report, bool skip_key_bias = false) {
  double worst = 0;
  const std::string bias = "attn.c_attn.bias";
  for (const auto& t : layout.tensors()) {
    const bool key_bias = skip_key_bias && t.name.size() > bias.size() &&
                          t.name.compare(t.name.size() - bias.size(), bias.size(), bias) == 0;
    double e = 0;
    if (key_bias) {  // the query and value thirds, as one vector
      const std::size_t C = t.numel / 3;
      std::vector<A> g(got + t.offset, got + t.offset + t.numel), w(want + t.offset, want + t.offset + t.numel);
      g.erase(g.begin() + C, g.begin() + 2 * C);
      w.erase(w.begin() + C, w.begin() + 2 * C);
      e = relative_norm_error(g.data(), w.data(), g.size());
    } else {
      e = relative_norm_error(got + t.offset, want + t.offset, t.numel);
    }
    worst = std::max(worst, e);
    if (!(e <= tol)) {
      std::ostringstream os;
      os << what << " " << t.name << (key_bias ? " (query and value thirds)" : "") << ": relative norm error " << e
         << " > tolerance " << tol << "\n";
      report += os.str();
    }
  }
  return worst;
}

}  // namespace scalelab_test
