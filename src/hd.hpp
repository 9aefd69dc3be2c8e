// FH_HD marks a function that the host compiler and nvcc both compile (host and device code),
// for the arithmetic both backends must share bit for bit (SPEC §3's Philox, §5.0's sampling).
#pragma once

#if defined(__CUDACC__)
#define FH_HD __host__ __device__ __forceinline__
#else
#define FH_HD inline
#endif
