"""bench/vs_deepspeed/samples.py: zhost's batches from a token file, reproduced in Python (host/data/data.hpp,
"The sample mapping"), so that the peer sees the same token windows in the same order on the same ranks.

Sample i of step s (0-based; zhost's step k reads s = k - 1) is the seq_len+1 tokens starting at
XXH3_64(int64 s, int64 i; little-endian, seeded with the config's seed) mod (corpus tokens - seq_len); rank r
of W with micro-batch m takes samples (k*W + r)*m + j, j < m, at micro-step k. tokens = window[:T],
targets = window[1:]. The token file is raw uint16 ids (data.token_dtype's default).
"""
import struct

import numpy as np
import torch
import xxhash


def first_index(micro_step, rank, world, micro_batch):
    return (micro_step * world + rank) * micro_batch


class TokenFile:
    def __init__(self, path, seq_len, seed):
        self.ids = np.fromfile(path, dtype=np.uint16).astype(np.int64)
        self.seq_len, self.seed = seq_len, seed
        if len(self.ids) <= seq_len:
            raise ValueError(f"{path}: {len(self.ids)} tokens, fewer than seq_len + 1 = {seq_len + 1}")

    def start(self, step, index):
        h = xxhash.xxh3_64_intdigest(struct.pack("<qq", step, index), seed=self.seed)
        return h % (len(self.ids) - self.seq_len)

    def batch(self, step, first, count):
        """Samples [first, first + count) of step `step` (0-based): tokens, targets as int64 [count, T]."""
        rows = [self.ids[s:s + self.seq_len + 1] for s in (self.start(step, first + j) for j in range(count))]
        window = torch.from_numpy(np.stack(rows))
        return window[:, :-1].contiguous(), window[:, 1:].contiguous()
