// Stage 06's two layers alone: a column-parallel layer (C -> H, the weight split by output rows)
// followed by a row-parallel one (H -> C, split by input columns), as c_fc and mlp.c_proj sit
// in a block, on t = 1..4 ranks, with and without sequence parallelism, against the whole
// layers computed in double on every rank from the same numbers.
//
// What the model's tests cannot see: every buffer a layer writes is the test's own vector and
// runs on past its end with guard values, which must stay. A loop one row too far (the bias
// loop of row_parallel_forward to i <= rows, say) writes there; inside the model the extra row
// lands in the next tensor of the activation arena, is overwritten later, and no number, and no
// sanitizer (one allocation), ever shows it.
//
// Tolerance: float products of at most H = 24 terms against double, then summed over t ranks:
// |a - b| <= 1e-5 |b| + 1e-6 max|b|. A missing sum, a bias added t times or a slice taken from
// the wrong rank is off by O(1).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "compare.hpp"
#include "dist/tp_linear.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {
constexpr int kN = 12;  // token rows: divisible by t = 1..4 (sequence parallelism)
constexpr int kC = 10;  // the model's width: the column layer's input, the row layer's output
constexpr int kH = 24;  // the hidden width: split H/t per rank for t = 1..4
constexpr std::size_t kGuards = 8;
constexpr float kGuard = -7.25f;

// n values in [-1, 1), different for each `salt`, the same on every rank.
std::vector<float> values(std::size_t n, int salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * static_cast<float>(i) + 1.3f * salt);
  return v;
}

// A vector the layer writes into: n elements of `start`, then the guards.
std::vector<float> guarded(std::size_t n, float start = 0.0f) {
  std::vector<float> v(n + kGuards, kGuard);
  std::fill(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n), start);
  return v;
}

// out (rows, cols) = a (rows, k) @ b^T, b (cols, k), in double, then plus bias (cols) if given.
std::vector<double> product(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>* bias,
                            int rows, int k, int cols) {
  std::vector<double> out(static_cast<std::size_t>(rows) * cols);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      double s = bias ? (*bias)[j] : 0.0;
      for (int p = 0; p < k; ++p) s += a[i * k + p] * b[j * k + p];
      out[i * cols + j] = s;
    }
  return out;
}
std::vector<double> transpose(const std::vector<double>& a, int rows, int cols) {
  std::vector<double> t(a.size());
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) t[j * rows + i] = a[i * cols + j];
  return t;
}
std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Columns [c0, c0 + n) of a (rows, cols) matrix, rows [r0, r1), as floats.
std::vector<float> block(const std::vector<double>& a, int cols, int r0, int r1, int c0, int n) {
  std::vector<float> out;
  for (int i = r0; i < r1; ++i)
    for (int j = c0; j < c0 + n; ++j) out.push_back(static_cast<float>(a[i * cols + j]));
  return out;
}
std::vector<float> column_sums(const std::vector<double>& a, int cols, int r0, int r1) {
  std::vector<double> s(cols, 0.0);
  for (int i = r0; i < r1; ++i)
    for (int j = 0; j < cols; ++j) s[j] += a[i * cols + j];
  return {s.begin(), s.end()};
}

// The first n elements of `got` against `want` (tolerance above), and got's guards untouched.
void check(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  CHECK_MATCH(compare_close(what, got.data(), want.data(), want.size(), 1e-5, 1e-6 * max_abs(want)));
  CHECK_MATCH(compare_guards(what, got, want.size(), kGuard));
}
}  // namespace

TEST_CASE("the column- and row-parallel layers alone equal the whole layers, and write nothing past their rows",
          "[graded][tp_linear]") {
  Communicator& world = test_world();
  const int t = world.size(), r = world.rank(), Hl = kH / t;
  // The whole layers' numbers, the same on every rank: x (N, C); W1 (H, C), b1 (H) of the
  // column-parallel layer; W2 (C, H), b2 (C) of the row-parallel one; dy (N, C) from above.
  const std::vector<float> x = values(kN * kC, 1), W1 = values(kH * kC, 2), b1 = values(kH, 3), W2 = values(kC * kH, 4),
                           b2 = values(kC, 5), dy = values(kN * kC, 6);
  // The whole layers in double: h = x W1^T + b1, y = h W2^T + b2, and their backward.
  const std::vector<double> xd = widen(x), W1d = widen(W1), b1d = widen(b1), W2d = widen(W2), b2d = widen(b2),
                            dyd = widen(dy);
  const std::vector<double> h = product(xd, W1d, &b1d, kN, kC, kH), y = product(h, W2d, &b2d, kN, kH, kC);
  const std::vector<double> dh = product(dyd, transpose(W2d, kC, kH), nullptr, kN, kC, kH);  // dy W2
  const std::vector<double> dx = product(dh, transpose(W1d, kH, kC), nullptr, kN, kH, kC);   // dh W1
  const std::vector<double> dW2 = product(transpose(dyd, kN, kC), transpose(h, kN, kH), nullptr, kC, kN, kH);
  const std::vector<double> dW1 = product(transpose(dh, kN, kH), transpose(xd, kN, kC), nullptr, kH, kN, kC);

  // This rank's slices: W1's rows [r Hl, (r+1) Hl) and b1's; W2's columns of the same range.
  const std::vector<float> W1_r(W1.begin() + r * Hl * kC, W1.begin() + (r + 1) * Hl * kC),
      b1_r(b1.begin() + r * Hl, b1.begin() + (r + 1) * Hl);
  std::vector<float> W2_r;
  for (int i = 0; i < kC; ++i)
    W2_r.insert(W2_r.end(), W2.begin() + i * kH + r * Hl, W2.begin() + i * kH + (r + 1) * Hl);

  for (const bool sp : {false, true}) {
    if (sp && t == 1) continue;  // sequence parallelism splits a group of at least 2
    INFO(where(world) << ", t " << t << (sp ? ", with" : ", without") << " sequence parallelism");
    TpGroup tp;
    tp.comm = &world;
    tp.sequence_parallel = sp;
    // The rows this rank holds outside the pair: all N, or its N/t under sequence parallelism.
    const int rows = static_cast<int>(tp.local_rows(kN)), r0 = static_cast<int>(tp.first_row(kN));
    const std::vector<float> x_mine(x.begin() + r0 * kC, x.begin() + (r0 + rows) * kC),
        dy_mine(dy.begin() + r0 * kC, dy.begin() + (r0 + rows) * kC);

    // Forward: h_r = f(x) W1_r^T + b1_r (N, Hl), then y = g(h_r W2_r^T) + b2 (this rank's rows).
    std::vector<float> x_full = guarded(kN * kC), h_r = guarded(kN * Hl);
    column_parallel_forward(tp, h_r.data(), x_full.data(), x_mine.data(), W1_r.data(), b1_r.data(), kN, kC, Hl);
    check("column_parallel_forward: x_full, the whole input", x_full, x);
    check("column_parallel_forward: out, this rank's features of h", h_r, block(h, kH, 0, kN, r * Hl, Hl));
    std::vector<float> y_partial = guarded(kN * kC), y_mine = guarded(rows * kC);
    row_parallel_forward(tp, y_mine.data(), y_partial.data(), h_r.data(), W2_r.data(), b2.data(), kN, Hl, kC);
    check("row_parallel_forward: y, this rank's rows of the whole output", y_mine, block(y, kC, r0, r0 + rows, 0, kC));
    CHECK_MATCH(compare_guards("row_parallel_forward: y_partial", y_partial, kN * kC, kGuard));

    // Backward, into gradients that start at 0.5 (backward adds to them).
    std::vector<float> dh_r = guarded(kN * Hl), dy_full = guarded(kN * kC), dW2_r = guarded(kC * Hl, 0.5f),
                       db2 = guarded(kC, 0.5f);
    row_parallel_backward(tp, dh_r.data(), dy_full.data(), dW2_r.data(), db2.data(), dy_mine.data(), h_r.data(),
                          W2_r.data(), kN, Hl, kC);
    check("row_parallel_backward: dx, this rank's features of dh", dh_r, block(dh, kH, 0, kN, r * Hl, Hl));
    check("row_parallel_backward: dy_full, the whole dy", dy_full, dy);
    std::vector<float> want_dW2 = block(dW2, kH, 0, kC, r * Hl, Hl), want_db2 = column_sums(dyd, kC, r0, r0 + rows);
    for (float& v : want_dW2) v += 0.5f;
    for (float& v : want_db2) v += 0.5f;
    check("row_parallel_backward: dweight, 0.5 plus this rank's columns of dW2", dW2_r, want_dW2);
    check("row_parallel_backward: dbias, 0.5 plus the column sums of this rank's rows of dy", db2, want_db2);

    std::vector<float> dx_mine = guarded(rows * kC), dx_full = guarded(kN * kC), dW1_r = guarded(Hl * kC, 0.5f),
                       db1_r = guarded(Hl, 0.5f);
    column_parallel_backward(tp, dx_mine.data(), dx_full.data(), dW1_r.data(), db1_r.data(), dh_r.data(), x_full.data(),
                             W1_r.data(), kN, kC, Hl);
    check("column_parallel_backward: dx, this rank's rows of the sum over ranks", dx_mine,
          block(dx, kC, r0, r0 + rows, 0, kC));
    CHECK_MATCH(compare_guards("column_parallel_backward: dx_full", dx_full, kN * kC, kGuard));
    const std::vector<float> db1 = column_sums(dh, kH, 0, kN);
    std::vector<float> want_dW1 = block(dW1, kC, r * Hl, (r + 1) * Hl, 0, kC),
                       want_db1(db1.begin() + r * Hl, db1.begin() + (r + 1) * Hl);
    for (float& v : want_dW1) v += 0.5f;
    for (float& v : want_db1) v += 0.5f;
    check("column_parallel_backward: dweight, 0.5 plus this rank's rows of dW1", dW1_r, want_dW1);
    check("column_parallel_backward: dbias, 0.5 plus this rank's features' column sums of dh", db1_r, want_db1);
  }
}
