"""Keep the learner's peak RSS close to its live memory.

glibc raises its mmap threshold dynamically each time a large block is freed, after which
activation-sized tensors come from the heap and are not returned between steps, so every phase of a
step (generation, reference forward, backward) stacks on the previous one's freed pages. A fixed
threshold keeps large tensors in mmap'd blocks that go back to the OS when freed. No-op off glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3


def use_fixed_mmap_threshold(threshold_bytes: int = 128 * 1024) -> bool:
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold_bytes))
    except (OSError, AttributeError):
        return False
