// Stage 08's attention kernels against the naive attention (attention.hpp), which keeps the T x T
// probabilities: the chunked (online softmax per query) and flash (Br x Bc tiles through BLAS)
// forwards and backwards must compute the same function, on shapes where T is not a multiple of
// the chunk or tile and with chunks and tiles from 1 to past T.
//
// Tolerances, as the worst |got - want| over a tensor divided by max(1, the tensor's largest |want|)
// (the inputs are O(1), so rounding errors are O(eps) in absolute terms even where the exact value
// is 0: at T = 1, dq = dk = 0 exactly, computed as dp - D from two different sums; every other
// tensor here has a largest |want| between 1.3 and 22, so the floor changes nothing for them):
//   double 1e-12: both sides compute the same sums in another order (the chunked and flash ones
//     also rescale by exp(m_old - m_new)); each result sums at most T = 130 terms, so rounding is
//     ~1e-16 x a small multiple of that. Measured worst: 1.4e-15 forward, 4.9e-15 backward.
//   float 1e-5 forward, 3e-5 backward: the same reorderings in float (eps 6e-8) plus fast_exp
//     (within 1 ulp) of differently rounded arguments; a score of ~10 rounded 1 ulp apart (~1e-6)
//     moves exp by ~1e-6 relative. Backward also recomputes p = exp(s - lse) from a rounded lse
//     and forms dp - D from differently ordered sums, which loses a few bits more. Measured
//     worst: 6.3e-7 (out) and 1.5e-7 (lse) forward, 3.2e-6 (dk) backward: 10x and more below.
// Everything else (the causal mask, the layout of dqkv, a wrong rescale) fails by O(1).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/attention_chunked.hpp"
#include "model/layers/attention_flash.hpp"
#include "model/layers/attention_kind.hpp"

using namespace scalelab;

namespace {

struct Shape {
  int B, T, C, NH;
};
// NH from 1 to 4, head sizes 4, 5 and 8, T = 1, 5, 63, 64, 65, 130 (below, at and past 64).
const Shape kShapes[] = {{1, 1, 8, 1}, {2, 5, 12, 3}, {1, 63, 16, 2}, {2, 64, 16, 4}, {1, 65, 15, 3}, {1, 130, 32, 4}};
const int kChunks[] = {1, 7, 16, 64};
struct Tiles {
  int Br, Bc;
};
// Square tiles, and oblong ones, where a query row can see none of a key tile (Br > Bc).
const Tiles kTiles[] = {{1, 1}, {7, 7}, {16, 16}, {64, 64}, {7, 16}, {16, 7}, {64, 1}, {1, 64}};

template <typename F>
constexpr double kForwardTol = sizeof(F) == sizeof(double) ? 1e-12 : 1e-5;
template <typename F>
constexpr double kBackwardTol = sizeof(F) == sizeof(double) ? 1e-12 : 3e-5;

std::string describe(const Shape& s) {
  std::ostringstream os;
  os << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH;
  return os.str();
}

// The worst element of got - want, relative to max(1, the largest |want|) (so that elements near
// zero do not dominate; the floor: see the tolerances above), with where it is and both values.
struct WorstError {
  double rel = 0;
  std::size_t index = 0;
  double got = 0, want = 0, largest = 0;
  std::string message(const std::string& what, double tol) const {
    std::ostringstream os;
    os.precision(17);
    os << what << ": worst |got - want| / max(1, max|want|) = " << rel << " at element " << index << " (got " << got
       << ", want " << want << "; max|want| " << largest << "); tolerance " << tol;
    return os.str();
  }
};

template <typename A, typename B>
WorstError worst_error(const std::vector<A>& got, const std::vector<B>& want) {
  WorstError w;
  for (const B x : want) w.largest = std::max(w.largest, std::fabs(static_cast<double>(x)));
  const double denom = std::max(w.largest, 1.0);
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]), x = static_cast<double>(want[i]);
    const double rel = std::fabs(g - x) / denom;
    if (rel > w.rel || std::isnan(rel)) {  // NaN is the worst of all and must be reported
      w.rel = std::isnan(rel) ? INFINITY : rel;
      w.index = i;
      w.got = g;
      w.want = x;
    }
  }
  return w;
}

#define CHECK_CLOSE(got, want, tol, what)         \
  do {                                            \
    const WorstError _w = worst_error(got, want); \
    INFO(_w.message(what, tol));                  \
    CHECK(_w.rel <= (tol));                       \
  } while (0)

// Random values of about this size; scale 2 gives scores s = q.k / sqrt(hs) with a spread of ~4,
// so softmax rows span many orders of magnitude and the running maximum changes often.
template <typename F>
std::vector<F> random_vec(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<F> v(n);
  for (auto& x : v) x = static_cast<F>(scale * rng.normal());
  return v;
}

// The log-sum-exp of every query's scaled scores, in double from the given (possibly float)
// qkv: lse[b,h,t] = log sum_{u<=t} exp(q_t . k_u / sqrt(hs)), computed the textbook way.
template <typename F>
std::vector<double> oracle_lse(const std::vector<F>& qkv, const Shape& s) {
  const int hs = s.C / s.NH, C3 = 3 * s.C;
  std::vector<double> lse(static_cast<std::size_t>(s.B) * s.NH * s.T), sc(s.T);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        const F* qt = qkv.data() + (static_cast<std::size_t>(b) * s.T + t) * C3 + h * hs;
        double mx = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          const F* ku = qkv.data() + (static_cast<std::size_t>(b) * s.T + u) * C3 + s.C + h * hs;
          double dot = 0;
          for (int i = 0; i < hs; ++i) dot += static_cast<double>(qt[i]) * static_cast<double>(ku[i]);
          sc[u] = dot / std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, sc[u]);
        }
        double sum = 0;
        for (int u = 0; u <= t; ++u) sum += std::exp(sc[u] - mx);
        lse[(static_cast<std::size_t>(b) * s.NH + h) * s.T + t] = mx + std::log(sum);
      }
  return lse;
}

// The naive attention's out and dqkv for the given inputs.
template <typename F>
struct Naive {
  std::vector<F> out, dqkv;
};
template <typename F>
Naive<F> run_naive(const std::vector<F>& qkv, const std::vector<F>& dout, const Shape& s) {
  const std::size_t BT = static_cast<std::size_t>(s.B) * s.T;
  Naive<F> n{std::vector<F>(BT * s.C), std::vector<F>(BT * 3 * s.C)};
  std::vector<F> att(static_cast<std::size_t>(s.B) * s.NH * s.T * s.T), scratch(static_cast<std::size_t>(s.T) * s.T);
  attention_forward(n.out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  attention_backward(n.dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH);
  return n;
}

// The q, k or v part (0, 1, 2) of a (B,T,3C) tensor, as (B,T,C).
template <typename F>
std::vector<F> part(const std::vector<F>& x, int which, int C) {
  const std::size_t rows = x.size() / (3 * static_cast<std::size_t>(C));
  std::vector<F> p(rows * C);
  for (std::size_t r = 0; r < rows; ++r)
    for (int c = 0; c < C; ++c) p[r * C + c] = x[r * 3 * C + which * C + c];
  return p;
}

// What a check compares with the naive attention: the forward's out and lse, or the backward's
// dq, dk and dv (from the same kernel's forward, whose out and lse the backward reads).
enum class Pass { kForward, kBackward };

template <typename F>
void check_against_naive(Pass pass, const std::vector<F>& out, const std::vector<F>& lse, const std::vector<F>& dqkv,
                         const std::vector<F>& qkv, const Naive<F>& naive, const Shape& s) {
  if (pass == Pass::kForward) {
    CHECK_CLOSE(out, naive.out, kForwardTol<F>, "out vs naive attention_forward");
    CHECK_CLOSE(lse, oracle_lse(qkv, s), kForwardTol<F>, "lse vs log-sum-exp of the scores in double");
    return;
  }
  const char* names[] = {"dq vs naive attention_backward", "dk vs naive attention_backward",
                         "dv vs naive attention_backward"};
  for (int which = 0; which < 3; ++which)
    CHECK_CLOSE(part(dqkv, which, s.C), part(naive.dqkv, which, s.C), kBackwardTol<F>, names[which]);
}

template <typename F>
constexpr F kNaN = std::numeric_limits<F>::quiet_NaN();

template <typename F>
void check_chunked(const Shape& s, Pass pass) {
  const std::size_t BT = static_cast<std::size_t>(s.B) * s.T;
  const auto qkv = random_vec<F>(BT * 3 * s.C, 100 + s.T, 2.0);
  const auto dout = random_vec<F>(BT * s.C, 200 + s.T);
  const Naive<F> naive = run_naive(qkv, dout, s);
  for (int chunk : kChunks) {
    INFO(describe(s) << ", chunk " << chunk << ", " << (sizeof(F) == 4 ? "float" : "double"));
    // Outputs and scratch start as NaN: forward and backward must write (=) every element before
    // they read it (a += into an output, or an accumulator in it never set to 0, stays NaN).
    std::vector<F> out(BT * s.C, kNaN<F>), lse(static_cast<std::size_t>(s.B) * s.NH * s.T, kNaN<F>);
    std::vector<F> dqkv(BT * 3 * s.C, kNaN<F>), scratch(attention_chunked_scratch_elems(chunk), kNaN<F>);
    attention_chunked_forward(out.data(), lse.data(), scratch.data(), qkv.data(), s.B, s.T, s.C, s.NH, chunk);
    if (pass == Pass::kBackward)
      attention_chunked_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T,
                                 s.C, s.NH, chunk);
    check_against_naive(pass, out, lse, dqkv, qkv, naive, s);
  }
}

template <typename F>
void check_flash(const Shape& s, Pass pass) {
  const std::size_t BT = static_cast<std::size_t>(s.B) * s.T;
  const auto qkv = random_vec<F>(BT * 3 * s.C, 100 + s.T, 2.0);
  const auto dout = random_vec<F>(BT * s.C, 200 + s.T);
  const Naive<F> naive = run_naive(qkv, dout, s);
  for (const Tiles& tl : kTiles) {
    INFO(describe(s) << ", tiles " << tl.Br << " x " << tl.Bc << ", " << (sizeof(F) == 4 ? "float" : "double"));
    std::vector<F> out(BT * s.C, kNaN<F>), lse(static_cast<std::size_t>(s.B) * s.NH * s.T, kNaN<F>);
    std::vector<F> dqkv(BT * 3 * s.C, kNaN<F>), scratch(attention_flash_scratch_elems(s.T, tl.Br, tl.Bc), kNaN<F>);
    attention_flash_forward(out.data(), lse.data(), scratch.data(), qkv.data(), s.B, s.T, s.C, s.NH, tl.Br, tl.Bc);
    if (pass == Pass::kBackward)
      attention_flash_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T,
                               s.C, s.NH, tl.Br, tl.Bc);
    check_against_naive(pass, out, lse, dqkv, qkv, naive, s);
  }
}

// Both kernels' checks on every shape, in double and in float.
enum class Kernel { kChunked, kFlash };
void check_every_shape(Kernel kernel, Pass pass) {
  for (const Shape& s : kShapes) {
    if (kernel == Kernel::kChunked) {
      check_chunked<double>(s, pass);
      check_chunked<float>(s, pass);
    } else {
      check_flash<double>(s, pass);
      check_flash<float>(s, pass);
    }
  }
}

}  // namespace

// Lab 08 grades the student's chunked forward and flash backward (tests/grading/lab08-attention.json);
// the chunked backward and the flash forward they are paired with are the reference's.
TEST_CASE("attention_chunked_forward matches naive attention: out and lse", "[graded][attention_chunked_forward]") {
  check_every_shape(Kernel::kChunked, Pass::kForward);
}

// Scores far outside exp's range in float (about +-88): every query's scores climb by 3 per key
// up to 117, then drop to -150. The running maximum must follow the climb (exp(s - m) <= 1 in
// every chunk: without it exp(174) overflows) and keep its largest value when a chunk's maximum
// falls (rescaling by exp(m_old - m_new) with m_new the later chunk's own maximum would be
// exp(267)). The naive attention subtracts each row's maximum, so it has none of these problems.
TEST_CASE("attention_chunked_forward keeps a running maximum: scores of +-150 in float",
          "[graded][attention_chunked_forward]") {
  const Shape s{1, 65, 8, 2};
  const int hs = s.C / s.NH, C3 = 3 * s.C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  std::vector<float> qkv = random_vec<float>(static_cast<std::size_t>(s.T) * C3, 7);  // v stays random
  for (int u = 0; u < s.T; ++u) {
    const float w = u < 40 ? 3.0f * static_cast<float>(u) : -150.0f;  // the score of key u, for every query
    for (int c = 0; c < s.C; ++c) {
      qkv[static_cast<std::size_t>(u) * C3 + c] = 1.0f;                                        // q
      qkv[static_cast<std::size_t>(u) * C3 + s.C + c] = w / (scale * static_cast<float>(hs));  // k
    }
  }
  const auto dout = random_vec<float>(static_cast<std::size_t>(s.T) * s.C, 8);
  const Naive<float> naive = run_naive(qkv, dout, s);
  for (int chunk : kChunks) {
    INFO(describe(s) << ", chunk " << chunk << ", float, scores from -150 to 117");
    std::vector<float> out(static_cast<std::size_t>(s.T) * s.C, kNaN<float>), lse(s.NH * s.T, kNaN<float>),
        scratch(attention_chunked_scratch_elems(chunk), kNaN<float>);
    attention_chunked_forward(out.data(), lse.data(), scratch.data(), qkv.data(), s.B, s.T, s.C, s.NH, chunk);
    check_against_naive(Pass::kForward, out, lse, {}, qkv, naive, s);
  }
}

TEST_CASE("attention_chunked_backward matches naive attention: dq, dk, dv", "[attention][attention_chunked]") {
  check_every_shape(Kernel::kChunked, Pass::kBackward);
}

TEST_CASE("attention_flash_forward matches naive attention: out and lse", "[attention][attention_flash]") {
  check_every_shape(Kernel::kFlash, Pass::kForward);
}

TEST_CASE("attention_flash_backward matches naive attention: dq, dk, dv", "[graded][attention_flash_backward]") {
  check_every_shape(Kernel::kFlash, Pass::kBackward);
}

namespace {

// One variant's out, lse and dqkv in double, by name: "chunked" with chunk = a, or "flash" with
// tiles a x b.
struct Result {
  std::vector<double> out, lse, dqkv;
};
Result run_variant(const std::string& kind, int a, int b, const std::vector<double>& qkv,
                   const std::vector<double>& dout, const Shape& s) {
  const std::size_t BT = static_cast<std::size_t>(s.B) * s.T;
  Result r{std::vector<double>(BT * s.C), std::vector<double>(static_cast<std::size_t>(s.B) * s.NH * s.T),
           std::vector<double>(BT * 3 * s.C)};
  if (kind == "chunked") {
    std::vector<double> scratch(attention_chunked_scratch_elems(a));
    attention_chunked_forward(r.out.data(), r.lse.data(), scratch.data(), qkv.data(), s.B, s.T, s.C, s.NH, a);
    attention_chunked_backward(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(), s.B,
                               s.T, s.C, s.NH, a);
  } else {
    std::vector<double> scratch(attention_flash_scratch_elems(s.T, a, b));
    attention_flash_forward(r.out.data(), r.lse.data(), scratch.data(), qkv.data(), s.B, s.T, s.C, s.NH, a, b);
    attention_flash_backward(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(), s.B,
                             s.T, s.C, s.NH, a, b);
  }
  return r;
}

// A kernel pair by name: "chunked" with chunk = a, or "flash" with tiles a x b.
struct Variant {
  const char* kind;
  int a, b;
};

// Replace q, k and v of every position from t_cut on. Queries before t_cut must not see it: their
// out, lse and dq are exactly (bitwise) what they were, since masked entries enter only as exact
// zeros. Positions from t_cut on must change (else the test would prove nothing).
void check_causal(std::initializer_list<Variant> variants) {
  const Shape s{2, 37, 12, 3};
  const int t_cut = 20, C3 = 3 * s.C;
  const std::size_t BT = static_cast<std::size_t>(s.B) * s.T;
  const auto qkv = random_vec<double>(BT * C3, 300, 2.0);
  const auto dout = random_vec<double>(BT * s.C, 301);
  auto future = random_vec<double>(BT * C3, 302, 2.0);
  std::vector<double> changed = qkv;
  for (int b = 0; b < s.B; ++b)
    for (int t = t_cut; t < s.T; ++t)
      for (int c = 0; c < C3; ++c) {
        const std::size_t i = (static_cast<std::size_t>(b) * s.T + t) * C3 + c;
        changed[i] = future[i];
      }
  for (const Variant v : variants) {
    INFO(v.kind << " " << v.a << (v.b ? " x " + std::to_string(v.b) : std::string()) << ", t_cut " << t_cut);
    const Result before = run_variant(v.kind, v.a, v.b, qkv, dout, s);
    const Result after = run_variant(v.kind, v.a, v.b, changed, dout, s);
    for (int b = 0; b < s.B; ++b) {
      for (int t = 0; t < s.T; ++t) {
        const std::size_t row = static_cast<std::size_t>(b) * s.T + t;
        bool out_same = true, dq_same = true;
        for (int c = 0; c < s.C; ++c) {
          out_same = out_same && before.out[row * s.C + c] == after.out[row * s.C + c];
          dq_same = dq_same && before.dqkv[row * C3 + c] == after.dqkv[row * C3 + c];
        }
        if (t < t_cut) {
          INFO("batch " << b << ", query " << t << " (before t_cut): out and dq must not change");
          CHECK(out_same);
          CHECK(dq_same);
        } else {
          INFO("batch " << b << ", query " << t << " (from t_cut on): out must change");
          CHECK_FALSE(out_same);
        }
        for (int h = 0; h < s.NH; ++h) {
          const std::size_t i = (static_cast<std::size_t>(b) * s.NH + h) * s.T + t;
          INFO("lse of batch " << b << ", head " << h << ", query " << t << ": " << before.lse[i] << " then "
                               << after.lse[i]);
          CHECK((before.lse[i] == after.lse[i]) == (t < t_cut));
        }
      }
    }
  }
}

}  // namespace

// The chunked forward's out and lse (and the reference backward's dq, which reads them).
TEST_CASE("chunked attention is causal: the future does not reach earlier queries",
          "[graded][attention_chunked_causal]") {
  check_causal({Variant{"chunked", 7, 0}, Variant{"chunked", 16, 0}});
}

// The flash backward's dq (out and lse come from the reference flash forward).
TEST_CASE("flash attention is causal: the future does not reach earlier queries", "[graded][attention_flash_causal]") {
  check_causal({Variant{"flash", 16, 16}, Variant{"flash", 7, 16}, Variant{"flash", 16, 7}});
}

TEST_CASE("--attention parses naive, chunked and flash and rejects anything else", "[attention][attention_kind]") {
  for (const char* name : {"naive", "chunked", "flash"}) {
    INFO(name);
    CHECK(std::string(attention_kind_name(parse_attention_kind(name))) == name);
  }
  CHECK(parse_attention_kind("naive") == AttentionKind::kNaive);
  CHECK(parse_attention_kind("chunked") == AttentionKind::kChunked);
  CHECK(parse_attention_kind("flash") == AttentionKind::kFlash);
  for (const char* bad : {"", "Flash", "dense", "flash2", " naive"}) {
    std::string message;
    try {
      parse_attention_kind(bad);
    } catch (const ConfigError& e) {
      message = e.what();
    }
    INFO("'" << bad << "' gave the message: " << (message.empty() ? "(no ConfigError thrown)" : message));
    REQUIRE_FALSE(message.empty());
    CHECK(message.find("--attention") != std::string::npos);
    const std::string quoted = std::string("'").append(bad).append("'");  // the value the user gave
    CHECK(message.find(quoted) != std::string::npos);
    for (const char* accepted : {"naive", "chunked", "flash"}) CHECK(message.find(accepted) != std::string::npos);
  }
}

TEST_CASE("attention_activation_elems: B*NH*T*T probabilities for naive, B*NH*T lse otherwise",
          "[attention][attention_memory]") {
  struct Case {
    std::int64_t B, NH, T;
  };
  // The last is past 2^31 elements for naive (64*16*8192^2 = 68,719,476,736): no int overflow.
  for (const Case c : {Case{1, 1, 1}, Case{2, 3, 5}, Case{4, 12, 1024}, Case{64, 16, 8192}}) {
    INFO("B=" << c.B << " NH=" << c.NH << " T=" << c.T);
    CHECK(attention_activation_elems(AttentionKind::kNaive, c.B, c.NH, c.T) == c.B * c.NH * c.T * c.T);
    CHECK(attention_activation_elems(AttentionKind::kChunked, c.B, c.NH, c.T) == c.B * c.NH * c.T);
    CHECK(attention_activation_elems(AttentionKind::kFlash, c.B, c.NH, c.T) == c.B * c.NH * c.T);
  }
  CHECK(attention_activation_elems(AttentionKind::kNaive, 64, 16, 8192) == 68719476736LL);
  CHECK(attention_activation_elems(AttentionKind::kFlash, 64, 16, 8192) == 8388608LL);
}
