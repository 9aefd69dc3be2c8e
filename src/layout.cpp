#include "layout.hpp"

#include <cstring>

namespace fh {

namespace {

struct Builder {
    Layout &L;
    int next_id = 0;

    // A parameter of SPEC §3: the next tensor id, appended to buf.
    size_t param(const std::string &name, uint32_t rows, uint32_t cols, int group, Buf buf,
                 bool is_bias) {
        size_t off = L.buf_size[buf];
        L.tensors.push_back({name, rows, cols, group, buf, off, true, next_id++,
                             is_bias ? 0u : cols});
        L.buf_size[buf] += (size_t)rows * cols;
        return off;
    }
    size_t weight(const std::string &n, uint32_t r, uint32_t c, int g, Buf b) {
        return param(n, r, c, g, b, false);
    }
    size_t bias(const std::string &n, uint32_t len, int g, Buf b) {
        return param(n, 1, len, g, b, true);
    }
    void extra(const std::string &name, uint32_t rows, uint32_t cols, int group, Buf buf,
               size_t offset, bool writable) {
        L.tensors.push_back({name, rows, cols, group, buf, offset, writable, -1, 0});
    }
};

}  // namespace

Layout make_layout(const Dims &d) {
    Layout L{};
    L.dims = d;
    Builder b{L};

    // Q net (SPEC §3 ids 0..)
    QOffsets &q = L.q;
    q.W1 = b.weight("q.W1", d.H, d.D, FH_GROUP_Q, BUF_Q);
    q.b1 = b.bias("q.b1", d.H, FH_GROUP_Q, BUF_Q);
    q.W2 = b.weight("q.W2", d.H, d.H, FH_GROUP_Q, BUF_Q);
    q.b2 = b.bias("q.b2", d.H, FH_GROUP_Q, BUF_Q);
    for (uint32_t k = 0; k < d.NB; ++k) {
        std::string s = std::to_string(k);
        q.V.push_back(b.weight("q.V." + s, d.HB, d.H, FH_GROUP_Q, BUF_Q));
        q.c.push_back(b.bias("q.c." + s, d.HB, FH_GROUP_Q, BUF_Q));
        q.U.push_back(b.weight("q.U." + s, d.A, d.HB, FH_GROUP_Q, BUF_Q));
        q.e.push_back(b.bias("q.e." + s, d.A, FH_GROUP_Q, BUF_Q));
    }
    q.w_u = b.weight("q.w_u", 1, d.H, FH_GROUP_Q, BUF_Q);
    q.b_u = b.bias("q.b_u", 1, FH_GROUP_Q, BUF_Q);
    q.total = L.buf_size[BUF_Q];

    // IQL: hi then lo in one buffer with identical layouts.
    for (int net = 0; net < 2; ++net) {
        const char *p = net == 0 ? "iql_hi." : "iql_lo.";
        int g = net == 0 ? FH_GROUP_IQL_HI : FH_GROUP_IQL_LO;
        std::string s(p);
        IqlOffsets o;
        o.W1 = b.weight(s + "W1", d.Hi, d.D, g, BUF_IQL);
        o.b1 = b.bias(s + "b1", d.Hi, g, BUF_IQL);
        o.W2 = b.weight(s + "W2", d.Hi, d.Hi, g, BUF_IQL);
        o.b2 = b.bias(s + "b2", d.Hi, g, BUF_IQL);
        o.w3 = b.weight(s + "w3", 1, d.Hi, g, BUF_IQL);
        o.b3 = b.bias(s + "b3", 1, g, BUF_IQL);
        // Each net is padded to a multiple of 64 floats (256 bytes), so the lo net's tensors
        // are exactly as aligned as the hi net's: the grouped GEMM reads its operand pointers
        // from device memory, where cuBLAS cannot check their alignment, and faults on a
        // pointer that is not 16-byte aligned.
        L.buf_size[BUF_IQL] = (L.buf_size[BUF_IQL] + 63) / 64 * 64;
        if (net == 0) {
            L.iql = o;
            L.iql.total = L.buf_size[BUF_IQL];
        }
    }

    IqnOffsets &n = L.iqn;
    n.Wpsi = b.weight("iqn.Wpsi", d.Hq, d.D, FH_GROUP_IQN, BUF_IQN);
    n.bpsi = b.bias("iqn.bpsi", d.Hq, FH_GROUP_IQN, BUF_IQN);
    n.Wphi = b.weight("iqn.Wphi", d.Hq, d.C, FH_GROUP_IQN, BUF_IQN);
    n.bphi = b.bias("iqn.bphi", d.Hq, FH_GROUP_IQN, BUF_IQN);
    n.Wm = b.weight("iqn.Wm", d.Hq, d.Hq, FH_GROUP_IQN, BUF_IQN);
    n.bm = b.bias("iqn.bm", d.Hq, FH_GROUP_IQN, BUF_IQN);
    n.w_z = b.weight("iqn.w_z", 1, d.Hq, FH_GROUP_IQN, BUF_IQN);
    n.b_z = b.bias("iqn.b_z", 1, FH_GROUP_IQN, BUF_IQN);
    n.total = L.buf_size[BUF_IQN];

    AttnOffsets &a = L.attn;
    const int ga = FH_GROUP_ATTN;
    a.Wt = b.weight("attn.Wt", d.d, d.td, ga, BUF_ATTN);
    a.bt = b.bias("attn.bt", d.d, ga, BUF_ATTN);
    a.Wg = a.bg = (size_t)-1;
    if (d.G > 0) {
        a.Wg = b.weight("attn.Wg", d.d, d.G, ga, BUF_ATTN);
        a.bg = b.bias("attn.bg", d.d, ga, BUF_ATTN);
    }
    a.P = b.weight("attn.P", d.T, d.d, ga, BUF_ATTN);
    a.Wq = b.weight("attn.Wq", d.d, d.d, ga, BUF_ATTN);
    a.Wk = b.weight("attn.Wk", d.d, d.d, ga, BUF_ATTN);
    a.Wv = b.weight("attn.Wv", d.d, d.d, ga, BUF_ATTN);
    a.bq = b.bias("attn.bq", d.d, ga, BUF_ATTN);
    a.bk = b.bias("attn.bk", d.d, ga, BUF_ATTN);
    a.bv = b.bias("attn.bv", d.d, ga, BUF_ATTN);
    a.Wo = b.weight("attn.Wo", d.d, d.d, ga, BUF_ATTN);
    a.bo = b.bias("attn.bo", d.d, ga, BUF_ATTN);
    a.Wr1 = b.weight("attn.Wr1", d.hh, d.d, ga, BUF_ATTN);
    a.br1 = b.bias("attn.br1", d.hh, ga, BUF_ATTN);
    a.w_r2 = b.weight("attn.w_r2", 1, d.hh, ga, BUF_ATTN);
    a.b_r2 = b.bias("attn.b_r2", 1, ga, BUF_ATTN);
    a.total = L.buf_size[BUF_ATTN];

    // Targets mirror the online layouts; Adam moments too (not named).
    L.buf_size[BUF_Q_TARGET] = L.buf_size[BUF_Q_M] = L.buf_size[BUF_Q_V] = q.total;
    L.buf_size[BUF_IQL_M] = L.buf_size[BUF_IQL_V] = L.buf_size[BUF_IQL];
    L.buf_size[BUF_IQN_TARGET] = L.buf_size[BUF_IQN_M] = L.buf_size[BUF_IQN_V] = n.total;
    L.buf_size[BUF_ATTN_M] = L.buf_size[BUF_ATTN_V] = a.total;
    L.buf_size[BUF_SN_U] = 2 * (size_t)d.H;
    L.buf_size[BUF_REGIME] = 2 * (size_t)d.R;
    L.buf_size[BUF_D_STATES] = (size_t)d.B * d.D;
    L.buf_size[BUF_ENS_MEAN] = L.buf_size[BUF_ENS_VAR] = L.buf_size[BUF_CONFIDENCE] = d.B;

    size_t nparams = L.tensors.size();
    for (size_t i = 0; i < nparams; ++i) {
        TensorEntry t = L.tensors[i];
        bool is_q = t.buf == BUF_Q, is_iqn = t.buf == BUF_IQN;
        if (!is_q && !is_iqn) continue;
        b.extra("target." + t.name, t.rows, t.cols, is_q ? FH_GROUP_Q_TARGET : FH_GROUP_IQN_TARGET,
                is_q ? BUF_Q_TARGET : BUF_IQN_TARGET, t.offset, true);
    }
    if (d.sn1) b.extra("sn.u.W1", 1, d.H, FH_GROUP_STATE, BUF_SN_U, 0, true);
    if (d.sn2) b.extra("sn.u.W2", 1, d.H, FH_GROUP_STATE, BUF_SN_U, d.H, true);
    // With one regime, scaling is off and rho ≡ 1: the state is readable but not writable.
    b.extra("regime.s", 1, d.R, FH_GROUP_STATE, BUF_REGIME, 0, d.R > 1);
    b.extra("regime.scale", 1, d.R, FH_GROUP_STATE, BUF_REGIME, d.R, d.R > 1);
    b.extra("d_states", d.B, d.D, FH_GROUP_OUTPUT, BUF_D_STATES, 0, false);
    b.extra("ensemble_mean", 1, d.B, FH_GROUP_OUTPUT, BUF_ENS_MEAN, 0, false);
    b.extra("ensemble_var", 1, d.B, FH_GROUP_OUTPUT, BUF_ENS_VAR, 0, false);
    b.extra("confidence", 1, d.B, FH_GROUP_OUTPUT, BUF_CONFIDENCE, 0, false);
    return L;
}

const TensorEntry *Layout::find(const char *name) const {
    for (const TensorEntry &t : tensors)
        if (t.name == name) return &t;
    return nullptr;
}

}  // namespace fh
