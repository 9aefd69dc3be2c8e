"""Prepares the kernel code the emulations run (tests/warp_emu/README.md): copies the headers
from cuda/ into the work folder, replaces each PTX instruction by a call to its emulation
(inc/mma_emu.h; ex2.approx by exp2f), and cuts the kernels out of their .cu files. Each
replacement checks that the text it replaces is still there, so a change to the kernels fails
here rather than testing something else. Usage: prepare.py REPO WORK."""
import re
import sys

repo, work = sys.argv[1], sys.argv[2]


def read(name):
    return open(f"{repo}/cuda/{name}", encoding="utf-8").read()


def write(name, text):
    open(f"{work}/inc/{name}", "w", encoding="utf-8").write(text)


for name in ("iqn_fused.hpp", "tile128.cuh", "device_math.cuh", "attention_tc.cuh",
             "attention_paths.hpp", "attention_bf16.cuh"):
    write(name, read(name))

s = read("attention_tc.cuh")
s, n = re.subn(r'asm\("ex2\.approx\.ftz\.f32 %0, %1;" : "=f"\(y\) : "f"\(x\)\);',
               "y = exp2f(x);", s)
assert n == 1, "attention_tc.cuh: exp2_approx changed"
write("attention_tc.cuh", s)

s = read("attention_paths.hpp")
assert '#include "learners.hpp"' in s
write("attention_paths.hpp", s.replace(
    '#include "learners.hpp"',
    "namespace fh::cuda { enum class AttnKernels { AUTO = 0, TC, TC_SPLIT, GENERAL }; }"))

# The PTX instructions, replaced by calls to their emulations (inc/mma_emu.h).
s = read("mma_tf32.cuh")
s, n = re.subn(r'asm\("cvt\.rn\.tf32\.f32 %0, %1;" : "=r"\(r\) : "f"\(x\)\);',
               "r = emu::to_tf32(x);", s)
assert n == 1, "mma_tf32.cuh: to_tf32 changed"
s, n = re.subn(r'asm volatile\(\s*"mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32'
               r'\.f32 ".*?\);',
               "const uint32_t a[4] = {a0, a1, a2, a3};\n    emu::mma<8>(c, a, b0, b1);", s,
               flags=re.S)
assert n == 1, "mma_tf32.cuh: mma1 changed"
EMU = "#include <cuda_runtime.h>\n\n#include \"mma_emu.h\""
write("mma_tf32.cuh", s.replace("#include <cuda_runtime.h>", EMU))

s = read("mma_bf16.cuh")
s, n = re.subn(r'asm volatile\(\s*"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16'
               r'\.f32 ".*?\);', "emu::mma<16>(c, a, b0, b1);", s, flags=re.S)
assert n == 1, "mma_bf16.cuh: mma changed"
write("mma_bf16.cuh", s.replace("#include <cuda_runtime.h>", EMU))


# The warpgroup products (wgmma.cuh): compiled in (FH_HAVE_WGMMA), the product a call to its
# emulation (inc/wgmma_emu.h), fence, commit, the waits and the operand pins no-ops (the emulation
# completes at once).
s = read("wgmma.cuh")
s, n = re.subn(r"#if defined\(__CUDA_ARCH__\) && defined\(__CUDA_ARCH_FEAT_SM90_ALL\)\n"
               r"#define FH_HAVE_WGMMA 1\n#endif", "#define FH_HAVE_WGMMA 1", s)
assert n == 1, "wgmma.cuh: FH_HAVE_WGMMA's condition changed"
s, n = re.subn(r'asm volatile\(\s*"\{\\n"\s*"wgmma\.mma_async\.sync\.aligned\.m64n32k8'
               r'\.f32\.tf32\.tf32 .*?\);', "emu::wgmma_m64n32k8(d, a0, a1, a2, a3, db);", s,
               flags=re.S)
assert n == 1, "wgmma.cuh: mma_rs changed"
for ptx in ("wgmma.fence.sync.aligned;", "wgmma.commit_group.sync.aligned;",
            "wgmma.wait_group.sync.aligned 0;", "wgmma.wait_group.sync.aligned 1;",
            "fence.proxy.async.shared::cta;"):
    s, n = re.subn(r'asm volatile\("' + re.escape(ptx) + r'\\n" ::: "memory"\);', "", s)
    assert n == 1, f"wgmma.cuh: {ptx} changed"
s, n = re.subn(r'asm volatile\("" : "\+f"\(d\[n\]\[e\]\)::"memory"\);', "(void)d[n][e];", s)
assert n == 1, "wgmma.cuh: pin changed"
assert "asm" not in s, "wgmma.cuh: an instruction without its emulation"
write("wgmma.cuh", s.replace("#include <cuda_runtime.h>",
                             "#include <cuda_runtime.h>\n\n#include \"wgmma_emu.h\""))

s = read("iqn_fused.cuh")
s, n = re.subn(r'asm volatile\("mov\.b32 %0, %1;\\n" : "=r"\(base\) : "r"\((.*?)\)\);',
               r"base = \1;", s)
assert n == 1, "iqn_fused.cuh: the descriptors' base changed"
write("iqn_fused.cuh", s)


def device_code(text):
    """Kernel code for the host: no PDL wait, the block's shared memory from the harness."""
    assert "extern __shared__ float4 sm4[];" in text
    return text.replace("    pdl_enter();\n", "").replace(
        "extern __shared__ float4 sm4[];", "float4 *sm4 = gSmem;")


# The attention kernels: attention_tc.cu's anonymous namespace up to the host code.
s = read("attention_tc.cu")
assert '#include "attention_bf16.cuh"' in s, "attention_tc.cu: bfloat16 instances expected"
i = s.index("namespace {\n") + len("namespace {\n")
j = s.index("template <class GT>\nusing FwdFn")
open(f"{work}/attn_kernels.inc", "w", encoding="utf-8").write(device_code(s[i:j]))

# The online pass: its helpers and kernel up to the block's final reduction (the harness records
# each thread's sums there instead).
s = read("iqn_online.cu")
i = s.index("namespace fh::cuda::iqn {")
j = s.index("    // The block's partial row")
body = device_code(s[i:j])
open(f"{work}/online_body.h", "w", encoding="utf-8").write("""#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include "device_math.cuh"
#include "iqn_fused.cuh"
#include "iqn_fused.hpp"
void sim_record(const float (&acc)[2][4], double loss, double bz);
using std::min;
""" + body + """    sim_record(acc, acc_loss, acc_bz);
}
}  // namespace
}  // namespace fh::cuda::iqn
""")

# The backward through m: its helpers and kernel up to the block's final reduction (the harness
# records each warp's column sums there instead).
s = read("iqn_backward.cu")
i = s.index("namespace fh::cuda::iqn {")
j = s.index("    // The block's partial row: warp rows in shared memory")
open(f"{work}/backward_body.h", "w", encoding="utf-8").write("""#pragma once
#include <algorithm>
#include <cstdint>
#include "device_math.cuh"
#include "iqn_fused.cuh"
#include "iqn_fused.hpp"
void sim_record(const float (&acc)[2][4]);
""" + device_code(s[i:j]) + """    sim_record(acc);
}
}  // namespace
}  // namespace fh::cuda::iqn
""")

# The target pass: its kernel, whole.
s = read("iqn_target.cu")
i = s.index("namespace fh::cuda::iqn {")
j = s.index("template <class E, bool WG>\nvoid launch_target")
open(f"{work}/target_body.h", "w", encoding="utf-8").write("""#pragma once
#include <cstdint>
#include "iqn_fused.cuh"
#include "iqn_fused.hpp"
""" + device_code(s[i:j]) + """}  // namespace
}  // namespace fh::cuda::iqn
""")

# IQN's dWφ kernel: its constants, helpers and kernel, up to its host code.
s = read("iqn_dwphi.cu")
i = s.index("namespace fh::cuda::iqn {")
j = s.index("void dwphi_prepare()")
open(f"{work}/dwphi_body.h", "w", encoding="utf-8").write("""#pragma once
#include <cstdint>
#include "iqn_fused.cuh"
#include "iqn_fused.hpp"
""" + device_code(s[i:j]) + """}  // namespace fh::cuda::iqn
""")
