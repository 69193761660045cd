// One (batch row, head) of the packed tensors the attention kernels of stage 08 read and write:
// head h of row b uses columns [h*hs, (h+1)*hs) of each C-wide slice of qkv (B,T,3C) (q, then k
// at +C, v at +2C; leading dimension 3C) and of out (B,T,C) (leading dimension C), and the T
// values of lse (B,NH,T) at row (b, h). Strided views: nothing is copied.
#pragma once

#include <cstddef>

namespace scalelab {

struct AttentionHead {
  std::size_t qkv;  // where q of this head starts in qkv (and dq in dqkv)
  std::size_t out;  // where its output starts in out (and its dout in dout)
  std::size_t lse;  // where its T log-sum-exps start in lse
};

inline AttentionHead attention_head(int b, int h, int T, int C, int NH) {
  const std::size_t hs = static_cast<std::size_t>(C / NH), bT = static_cast<std::size_t>(b) * T;
  return {bT * 3 * C + h * hs, bT * C + h * hs, (static_cast<std::size_t>(b) * NH + h) * T};
}

// Zeroes this head's q, k and v columns of dqkv (dq points at its q column, T rows of 3C): the
// backward kernels write dqkv (=), then accumulate into it.
template <typename F>
void clear_head_dqkv(F* dq, int T, int C, int hs) {
  for (int t = 0; t < T; ++t)
    for (int part = 0; part < 3; ++part) {
      F* row = dq + static_cast<std::size_t>(t) * 3 * C + static_cast<std::size_t>(part) * C;
      for (int i = 0; i < hs; ++i) row[i] = F(0);
    }
}

}  // namespace scalelab
