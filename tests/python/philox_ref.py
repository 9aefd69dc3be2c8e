"""Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
SC 2011; the Random123 library), written from the paper's constants, plus SPEC §3's uniform.

The arithmetic uses only int64 operations whose intermediate values stay below 2**63 (the
32x32 -> 64 bit product is done in 16-bit limbs), so one implementation serves numpy arrays
(the oracle) and torch tensors on any device (the GPU peer benchmark, CUDA-graph safe).
"""
import numpy as np

PHILOX_M0 = 0xD2511F53  # multipliers of the two S-boxes
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9  # Weyl key increments (golden ratio, sqrt(3) - 1)
PHILOX_W1 = 0xBB67AE85
ROUNDS = 10
MASK32 = 0xFFFFFFFF

# SPEC §3 draw purposes (counter word 3)
PURPOSE_HER = 1
PURPOSE_IQN_ONLINE = 2
PURPOSE_IQN_TARGET = 3
PURPOSE_INIT = 4
PURPOSE_ACT = 5
PURPOSE_SN_U = 6


def _mulhilo(m, x):
    """(hi, lo) 32-bit halves of the 64-bit product m * x, m a Python int < 2**32, x int64
    array of values < 2**32."""
    mh, ml = m >> 16, m & 0xFFFF
    xh, xl = x >> 16, x & 0xFFFF
    mid = ml * xh + mh * xl                       # < 2**33
    t = ml * xl + ((mid & 0xFFFF) << 16)          # < 2**33
    lo = t & MASK32
    hi = (mh * xh + (mid >> 16) + (t >> 32)) & MASK32
    return hi, lo


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """The four output words (int64 arrays of uint32 values) of Philox4x32-10 for counter
    (c0, c1, c2, c3) and key (k0, k1). Counter words are int64 arrays (numpy or torch) or ints;
    the key words are Python ints."""
    k0, k1 = int(k0) & MASK32, int(k1) & MASK32
    for r in range(ROUNDS):
        if r > 0:  # Random123 bumps the key before every round but the first
            k0 = (k0 + PHILOX_W0) & MASK32
            k1 = (k1 + PHILOX_W1) & MASK32
        hi0, lo0 = _mulhilo(PHILOX_M0, c0)
        hi1, lo1 = _mulhilo(PHILOX_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def seed_key(seed):
    """SPEC §3: key = (seed low 32 bits, seed high 32 bits)."""
    seed = int(seed)
    return seed & MASK32, (seed >> 32) & MASK32


def uniform_from_word(x):
    """SPEC §3: (x >> 8) * 2**-24 -- exact in float32. Returns float64 numpy / same-kind torch
    (int64 -> the caller converts)."""
    return (x >> 8) * (2.0 ** -24)


def draw_words(seed, c0, c1, c2, purpose):
    """Philox words for counters built by broadcasting c0, c1, c2 (numpy int64) with purpose."""
    c0, c1, c2 = np.broadcast_arrays(*(np.asarray(c, dtype=np.int64) for c in (c0, c1, c2)))
    c3 = np.full(c0.shape, purpose, dtype=np.int64)
    k0, k1 = seed_key(seed)
    return philox4x32_10(c0.copy(), c1.copy(), c2.copy(), c3, k0, k1)


def uniform(seed, c0, c1, c2, purpose, word=0):
    """float32 uniforms in [0, 1) for the broadcast counters (SPEC §3), from output word
    @p word."""
    w = draw_words(seed, c0, c1, c2, purpose)[word]
    return (w >> 8).astype(np.float32) * np.float32(2.0 ** -24)
