// TEMPORARY: the auxiliary learners of SPEC §5.5 (IQL, IQN, attention, CQL, ensemble) are not
// implemented yet on the CPU; until they land these tasks do nothing, their losses read 0, the
// advantage weights stay 1 and the ensemble variance 0. Delete this file when they land.
#include "cpu_step.hpp"

namespace fh::cpu {
void iql(CpuStep &) {}
void iqn(CpuStep &) {}
void attention(CpuStep &) {}
void cql(CpuStep &) {}
void ensemble(CpuStep &) {}
}  // namespace fh::cpu
