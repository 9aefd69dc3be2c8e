// Where every tensor lives. Each network's parameters are one flat float32 buffer in SPEC §3's
// tensor order, so that EMA, Adam, gradient clipping and checkpoints are flat loops, and both
// executors share one layout. The registry below names every tensor the API can read or write.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config.hpp"

namespace fh {

// Persistent buffers (checkpointed) come first, then per-step outputs.
enum Buf : int {
    BUF_Q = 0, BUF_Q_TARGET, BUF_Q_M, BUF_Q_V,
    BUF_IQL, BUF_IQL_M, BUF_IQL_V,          // [hi | lo], two identical layouts back to back
    BUF_IQN, BUF_IQN_TARGET, BUF_IQN_M, BUF_IQN_V,
    BUF_ATTN, BUF_ATTN_M, BUF_ATTN_V,
    BUF_SN_U,                               // [2, H]: row 0 for W1, row 1 for W2
    BUF_REGIME,                             // [2, R]: running s_k, then the scale rho_k
    NUM_PERSISTENT,
    BUF_D_STATES = NUM_PERSISTENT,          // [B, D]
    BUF_ENS_MEAN,                           // [B]
    BUF_ENS_VAR,                            // [B]
    BUF_CONFIDENCE,                         // [B]
    NUM_BUFS
};

struct QOffsets {
    size_t W1, b1, W2, b2;
    std::vector<size_t> V, c, U, e;  // per branch
    size_t w_u, b_u;
    size_t total;
};
// One IQL net; lo is at +total. total includes padding to 256 bytes (layout.cpp says why).
struct IqlOffsets { size_t W1, b1, W2, b2, w3, b3, total; };
struct IqnOffsets { size_t Wpsi, bpsi, Wphi, bphi, Wm, bm, w_z, b_z, total; };
struct AttnOffsets {
    size_t Wt, bt, Wg, bg, P, Wq, Wk, Wv, bq, bk, bv, Wo, bo, Wr1, br1, w_r2, b_r2, total;
};

struct TensorEntry {
    std::string name;
    uint32_t rows, cols;
    int group;      // fh_group
    Buf buf;
    size_t offset;  // in floats, within buf
    bool writable;
    int spec_id;    // SPEC §3 tensor id, -1 for tensors that are not initial parameters
    uint32_t fan_in;  // 'in' of SPEC §3's init scale; 0 for biases (zero, no draws)
    size_t count() const { return (size_t)rows * cols; }
};

struct Layout {
    Dims dims;
    QOffsets q;
    IqlOffsets iql;
    IqnOffsets iqn;
    AttnOffsets attn;
    size_t buf_size[NUM_BUFS];
    std::vector<TensorEntry> tensors;  // SPEC §3 parameters first, in id order
    const TensorEntry *find(const char *name) const;
};

Layout make_layout(const Dims &d);

}  // namespace fh
