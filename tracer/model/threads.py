"""Threads of event rows numbered by (pid, tid): the key that per-thread sweeps group by."""

from __future__ import annotations

import numpy as np


def thread_numbers(pids: np.ndarray, tids: np.ndarray) -> np.ndarray:
    """Each (pid, tid) pair's rank among the distinct pairs in (pid, tid) order: what
    ``np.unique(pairs, axis=0, return_inverse=True)`` gives, without its slow row-wise sort (3 s on
    1.7M rows), from three 1-D uniques."""
    _, pid_rank = np.unique(pids, return_inverse=True)
    tid_values, tid_rank = np.unique(tids, return_inverse=True)
    pair_key = pid_rank.reshape(-1).astype(np.int64) * len(tid_values) + tid_rank.reshape(-1)
    _, thread = np.unique(pair_key, return_inverse=True)
    return thread.reshape(-1)
