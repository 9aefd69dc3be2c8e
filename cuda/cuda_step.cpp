#include "cuda_step.hpp"

#include <algorithm>
#include <vector>

#include "common.hpp"
#include "device_memory.hpp"
#include "memory_plan.hpp"
#include "reduce.cuh"

namespace fh::cuda {

// keep_pre = false (forward-only passes: ddqn, act): the pre-activations are computed in place
// in the activation buffers, which saves their memory and a third of the elementwise traffic;
// the backward needs them only for the online pass.
void alloc_qcache(DeviceMemory &mem, const Dims &d, QCache &c, int M, bool head, bool keep_pre) {
    const size_t MH = (size_t)M * d.H;
    c.M = M;
    c.h1 = mem.floats(MEM_ACT, MH);
    c.h2 = mem.floats(MEM_ACT, MH);
    c.g = mem.floats(MEM_ACT, (size_t)d.NB * M * d.HB);
    c.q = mem.floats(MEM_ACT, (size_t)d.NB * M * d.A);
    if (keep_pre) {
        c.pre1 = mem.floats(MEM_ACT, MH);
        c.pre2 = mem.floats(MEM_ACT, MH);
        c.preg = mem.floats(MEM_ACT, (size_t)d.NB * M * d.HB);
        c.z = mem.floats(MEM_ACT, (size_t)d.NB * M * d.A);
    } else {
        c.pre1 = c.h1;
        c.pre2 = c.h2;
        c.preg = c.g;
        c.z = c.q;
    }
    if (head) {
        c.pre_u = mem.floats(MEM_ACT, M);
        c.u = mem.floats(MEM_ACT, M);
    }
}

CudaStep::CudaStep(const fh_config &c, const Layout &l, DeviceMemory &mem, const BatchBlock &blk)
    : cfg(c), L(l), d(l.dims), dp(c.nccl_comm), in(blk) {
    const size_t B = d.B;
    for (int b = 0; b < NUM_BUFS; ++b)
        buf[b] = mem.floats(b < NUM_PERSISTENT ? MEM_PARAMS : MEM_ACT, L.buf_size[b]);
    grad_q = mem.floats(MEM_PARAMS, L.q.total);
    step = mem.alloc_n<uint64_t>(MEM_PARAMS, 1);
    dm = mem.alloc_n<DevMetrics>(MEM_ACT, 1);

    x2 = mem.floats(MEM_ACT, 2 * B * d.D);
    if (c.math_mode == FH_MATH_BF16) x_bf16 = mem.floats(MEM_ACT, B * d.D);
    r = mem.floats(MEM_ACT, B);
    done_f = mem.floats(MEM_ACT, B);
    relab = mem.floats(MEM_ACT, B);
    action = mem.alloc_n<int32_t>(MEM_ACT, B * d.NB);
    regime = mem.alloc_n<int32_t>(MEM_ACT, B);

    const size_t cols[2] = {d.D, d.H};
    const bool sn[2] = {d.sn1, d.sn2};
    for (int k = 0; k < 2; ++k)
        if (sn[k]) {
            weff[k] = mem.floats(MEM_ACT, (size_t)d.H * cols[k]);
            weff_t[k] = mem.floats(MEM_ACT, (size_t)d.H * cols[k]);
            sn_v[k] = mem.floats(MEM_ACT, cols[k]);
        }
    sn_row = mem.alloc_n<double>(MEM_ACT, power_scratch_doubles(d));

    alloc_qcache(mem, d, next, (int)B, false, false);
    alloc_qcache(mem, d, tgt, (int)(2 * B), false, false);
    alloc_qcache(mem, d, on, (int)B, true, true);
    if (ddqn_branches_packed(d)) {
        pack_next = mem.floats(MEM_ACT, packed_branch_floats(d));
        pack_tgt = mem.floats(MEM_ACT, packed_branch_floats(d));
    }
    a_star = mem.alloc_n<int32_t>(MEM_ACT, B * d.NB);
    y = mem.floats(MEM_ACT, B * d.NB);
    qbar_sa = mem.floats(MEM_ACT, B);

    delta = mem.floats(MEM_ACT, B * d.NB);
    dz = mem.floats(MEM_ACT, (size_t)d.NB * B * d.A);
    dzc = mem.floats(MEM_ACT, (size_t)d.NB * B * d.A);
    cql_dU = mem.floats(MEM_ACT, (size_t)d.NB * d.A * d.HB);
    cql_de = mem.floats(MEM_ACT, (size_t)d.NB * d.A);
    cql_part = mem.alloc_n<double>(MEM_ACT, (size_t)d.NB * colsum_chunks((int)B) * d.A);
    // CQL adds the gradient of all branches in one launch (cql.cu).
    for (uint32_t b = 1; b < d.NB; ++b)
        if (L.q.U[b] - L.q.U[b - 1] != L.q.U[1] - L.q.U[0] ||
            L.q.e[b] - L.q.e[b - 1] != L.q.U[1] - L.q.U[0] ||
            L.q.V[b] - L.q.V[b - 1] != L.q.U[1] - L.q.U[0] ||
            L.q.c[b] - L.q.c[b - 1] != L.q.U[1] - L.q.U[0])
            fail(FH_ERR_INTERNAL, "branch blocks of the Q layout are not equally spaced");
    dpreg = mem.floats(MEM_ACT, (size_t)d.NB * B * d.HB);
    dh2 = mem.floats(MEM_ACT, dh2_floats(d));
    dpre2 = mem.floats(MEM_ACT, B * d.H);
    dpre1 = mem.floats(MEM_ACT, B * d.H);
    td_elt = mem.alloc_n<double>(MEM_ACT, B * d.NB);
    q_elt = mem.alloc_n<double>(MEM_ACT, B * d.NB);
    cql_elt = mem.alloc_n<double>(MEM_ACT, B * d.NB);
    ens_part = mem.alloc_n<double>(MEM_ACT, ensemble_blocks(B));
    conf_part = mem.alloc_n<double>(MEM_ACT, confidence_partial_doubles(d));

    v_hi = mem.floats(MEM_ACT, B);
    v_lo = mem.floats(MEM_ACT, B);
    omega = mem.floats(MEM_ACT, B);
    z_mean = mem.floats(MEM_ACT, B);
    regime_scr = mem.alloc_n<double>(MEM_ACT, regime_scratch_doubles(d));

    iql = std::make_unique<IqlLearner>(d, cfg, L, buf[BUF_IQL], buf[BUF_IQL_M], buf[BUF_IQL_V]);
    iqn = std::make_unique<IqnLearner>(d, cfg, L, buf[BUF_IQN], buf[BUF_IQN_TARGET],
                                       buf[BUF_IQN_M], buf[BUF_IQN_V]);
    attn = std::make_unique<AttentionLearner>(d, cfg, L, buf[BUF_ATTN], buf[BUF_ATTN_M],
                                              buf[BUF_ATTN_V]);
}

CudaStep::~CudaStep() = default;

void CudaStep::reset(const HostBuffers &init) {
    for (int b = 0; b < NUM_BUFS; ++b)
        FH_CUDA(cudaMemcpy(buf[b], init[b].data(), L.buf_size[b] * sizeof(float),
                           cudaMemcpyHostToDevice));
    const size_t B = d.B;
    FH_CUDA(cudaMemset(dm, 0, sizeof(DevMetrics)));
    FH_CUDA(cudaMemset(step, 0, sizeof(uint64_t)));
    FH_CUDA(cudaMemset(v_hi, 0, B * 4));
    FH_CUDA(cudaMemset(v_lo, 0, B * 4));
    FH_CUDA(cudaMemset(z_mean, 0, B * 4));
    const std::vector<float> ones(B, 1.0f);  // ω = 1 until IQL writes it
    FH_CUDA(cudaMemcpy(omega, ones.data(), B * 4, cudaMemcpyHostToDevice));
    FH_CUDA(cudaMemset(grad_q, 0, L.q.total * 4));
    // The memsets may still run on the legacy stream, which the pipeline's non-blocking
    // streams do not wait for.
    FH_CUDA(cudaDeviceSynchronize());
}

QView CudaStep::online_view() const {
    const float *p = buf[BUF_Q];
    return QView{p, d.sn1 ? weff[0] : p + L.q.W1, d.sn2 ? weff[1] : p + L.q.W2};
}

QView CudaStep::target_view() const {
    const float *p = buf[BUF_Q_TARGET];
    return QView{p, d.sn1 ? weff_t[0] : p + L.q.W1, d.sn2 ? weff_t[1] : p + L.q.W2};
}

StepInputs CudaStep::inputs() const {
    return StepInputs{x2, x2 + (size_t)d.B * d.D, r, done_f, qbar_sa, step, x_bf16};
}

}  // namespace fh::cuda
