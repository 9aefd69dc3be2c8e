// The auxiliary learners' scratch, kept between steps: allocating and faulting in ~1.5 GB of
// buffers every step cost more than half of the aux child's time at the default size. It also
// carries the IQN and attention gradients from their tasks to their Adam steps (after the join).
#include "aux_learners.hpp"

namespace fh::cpu {

AuxWork &aux_work(CpuStep &s) {
    if (!s.aux_work) s.aux_work = std::make_shared<AuxWork>();
    return *s.aux_work;
}

namespace {
size_t bytes(std::initializer_list<const Vec *> vs) {
    size_t n = 0;
    for (const Vec *v : vs) n += v->capacity() * sizeof(float);
    return n;
}
size_t bytes(const IqlWork &w) {
    return bytes({&w.c.pre1, &w.c.h1, &w.c.pre2, &w.c.h2, &w.c.v, &w.dv, &w.dpre1, &w.dpre2});
}
size_t bytes(const IqnCache &c) {
    return bytes({&c.pre_psi, &c.psi, &c.cosf, &c.pre_phi, &c.phi, &c.merged, &c.pre_h, &c.h, &c.z});
}
size_t bytes(const AttnWork &w) {
    const AttnCache &c = w.c;
    return bytes({&c.tok, &c.goal, &c.eo, &c.eg, &c.E, &c.Q, &c.K, &c.V, &c.attn, &c.proj,
                  &c.pool, &c.pre_r, &c.hr, &c.rhat, &w.dr, &w.dpre_r, &w.dpool, &w.de2,
                  &w.dattn, &w.dQ, &w.dK, &w.dV, &w.dE, &w.dEo, &w.dEg});
}
}  // namespace

void aux_adam(CpuStep &s, Buf p, Buf m, Buf v, const Vec &grad) {
    const fh_config &c = s.cfg;
    adam(s.buf[p].data(), s.buf[m].data(), s.buf[v].data(), grad.data(), grad.size(), c.lr_aux,
         c.adam_beta1, c.adam_beta2, c.adam_eps, s.step + 1);
}

size_t aux_work_bytes(const CpuStep &s) {
    if (!s.aux_work) return 0;
    const AuxWork &w = *s.aux_work;
    const IqnWork &q = w.iqn;
    return bytes(w.iql[0]) + bytes(w.iql[1]) + bytes(q.c) + bytes(w.iqn_target) + bytes(w.attn) +
           bytes({&w.iql_grad, &q.dz, &q.dpre_h, &q.dm, &q.dpre_phi, &q.dpre_psi, &w.iqn_tau,
                  &w.iqn_tau_t, &w.iqn_T, &w.iqn_grad, &w.attn_grad});
}

}  // namespace fh::cpu
