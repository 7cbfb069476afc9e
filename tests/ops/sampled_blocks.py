"""Multi-layer sampling straight on the kernels, for the tests of sampling and of models:
the hops `gnnrun.algorithms.minibatch.sources.sample_minibatch` chains for training, on a
bare CSR and with the choice of native kernels or their references."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gnnrun.ops.block import Block
from gnnrun.ops.sampling import compact, sample_neighbors


def sample_blocks(
    indptr, indices, seeds, fanouts: Sequence[int], seed: int, *, native: bool | None = None
) -> list[Block]:
    """Sample a multi-layer computation graph around `seeds`; blocks from input to output layer.

    `fanouts[0]` is the number of neighbours each seed gets (PyG order, see
    gnnrun.ops.sampling); `blocks[-1].src_ids[:len(seeds)]` are the seeds. Seeds
    should be distinct: a repeated seed stays a repeated destination.
    """
    indices = torch.as_tensor(indices)
    if indices.dtype not in (torch.int32, torch.int64):
        indices = indices.to(torch.int64)
    ptr, idx = torch.as_tensor(indptr).to(torch.int64), indices.contiguous()
    dst = torch.as_tensor(seeds).to(torch.int64).contiguous()
    blocks = []
    for layer, fanout in enumerate(fanouts):
        offsets, neighbors = sample_neighbors(ptr, idx, dst, fanout, seed, layer, native=native)
        block_ptr, block_idx, src_ids = compact(dst, offsets, neighbors, native=native)
        blocks.append(Block(block_ptr, block_idx, int(src_ids.numel()), src_ids))
        dst = src_ids
    blocks.reverse()
    return blocks
