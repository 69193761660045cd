// Stage 08: the chunked and flash attention backwards (double) against central finite differences
// of their own forwards, on the gradcheck sizes (B=2, T=5, C=12, NH=3) with chunks and tiles of 2
// and 3, so that every query row spans several chunks or tiles, the diagonal tiles are masked and
// the last tile is partial. Tolerance as in test_layers_fd.cpp: worst |backward - finite
// difference| <= 1e-6 x the largest gradient (central differences with h = 1e-6 in double are
// accurate to ~1e-9 here). Both are graded in lab 08 (tests/grading/lab08-attention.json): the
// chunked case grades the student's forward (the finite differences are of it; the backward is
// the reference's and reads its lse), the flash case the student's backward.
#include <catch2/catch.hpp>

#include "gradcheck.hpp"
#include "model/layers/attention_chunked.hpp"
#include "model/layers/attention_flash.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {
constexpr int B = 2, T = 5, C = 12, NH = 3, N = B * T;
constexpr double kTol = 1e-6;
}  // namespace

TEST_CASE("attention_chunked_backward matches finite differences of attention_chunked_forward",
          "[graded][fd_attention_chunked]") {
  for (int chunk : {2, 3}) {
    INFO("chunk " << chunk);
    Vec qkv = random_vec(N * 3 * C, 40, 2.0), w = random_vec(N * C, 41);
    Vec out(N * C), lse(B * NH * T), scratch(attention_chunked_scratch_elems(chunk));
    auto objective = [&] {
      attention_chunked_forward(out.data(), lse.data(), scratch.data(), qkv.data(), B, T, C, NH, chunk);
      return dot(out, w);
    };
    objective();
    Vec dqkv(N * 3 * C, 123.0);  // written (=): garbage in must not leak into the gradient
    attention_chunked_backward(dqkv.data(), scratch.data(), w.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH,
                               chunk);
    CHECK_FD(check_fd(qkv, dqkv, objective, kTol), "dqkv");
  }
}

TEST_CASE("attention_flash_backward matches finite differences", "[graded][fd_attention_flash]") {
  struct Tiles {
    int Br, Bc;
  };
  for (const Tiles tl : {Tiles{2, 2}, Tiles{3, 2}, Tiles{2, 3}}) {
    INFO("tiles " << tl.Br << " x " << tl.Bc);
    Vec qkv = random_vec(N * 3 * C, 42, 2.0), w = random_vec(N * C, 43);
    Vec out(N * C), lse(B * NH * T), scratch(attention_flash_scratch_elems(T, tl.Br, tl.Bc));
    auto objective = [&] {
      attention_flash_forward(out.data(), lse.data(), scratch.data(), qkv.data(), B, T, C, NH, tl.Br, tl.Bc);
      return dot(out, w);
    };
    objective();
    Vec dqkv(N * 3 * C, 123.0);
    attention_flash_backward(dqkv.data(), scratch.data(), w.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH,
                             tl.Br, tl.Bc);
    CHECK_FD(check_fd(qkv, dqkv, objective, kTol), "dqkv");
  }
}
