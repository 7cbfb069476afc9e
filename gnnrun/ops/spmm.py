"""Products of sparse CSR tiles with dense blocks, accumulated in place.

A tile is a torch sparse CSR matrix; `accumulate_product_` adds tile @ dense into
an existing output with one `addmm` (MKL's sparse BLAS on CPU, cuSPARSE on
GPU), so that a product made of several tiles needs no temporary per tile.
`stacked_tiles` cuts a stacked tile CSR (row `j * height + r` is row r of tile
j, the layout of gnnrun.partition.block1d) into its P tiles without copying
their index arrays.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

# "Sparse CSR tensor support is in beta": products are all gnnrun uses of it; torch 2.11
# also says the invariant checks are off "implicitly" even when told so. Installed once at
# import: `catch_warnings` saves and restores the process's filter list, which races
# between the threads that build blocks.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
warnings.filterwarnings("ignore", message="Sparse invariant checks")


def stacked_tiles(
    indptr: np.ndarray,
    indices: np.ndarray,
    values: np.ndarray,
    widths: list[int],
    device: torch.device | None = None,
) -> list[torch.Tensor]:
    """The P tiles of a stacked tile CSR, tile j being `height x widths[j]`."""
    num_tiles = len(widths)
    height = (indptr.shape[0] - 1) // num_tiles
    indptr_t = torch.from_numpy(np.array(indptr, dtype=np.int64))
    indices_t = torch.from_numpy(np.asarray(indices, dtype=np.int64).copy())
    values_t = torch.from_numpy(np.asarray(values, dtype=np.float32).copy())
    tiles = []
    for j, width in enumerate(widths):
        crow = indptr_t[j * height : (j + 1) * height + 1]
        lo, hi = int(crow[0]), int(crow[-1])
        tiles.append(
            csr_tile(crow - lo, indices_t[lo:hi], values_t[lo:hi], (height, width), device)
        )
    return tiles


def csr_tile(
    crow: torch.Tensor,
    col: torch.Tensor,
    values: torch.Tensor,
    size: tuple[int, int],
    device: torch.device | None = None,
) -> torch.Tensor:
    if device is not None and device.type == "cuda":
        crow, col, values = (_to_device(t, device) for t in (crow, col, values))
    return csr_matrix(crow, col, values, size)


def csr_matrix(
    crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, size: tuple[int, int]
) -> torch.Tensor:
    """A torch sparse CSR matrix over index arrays already checked (a Block's, a tile's)."""
    return torch.sparse_csr_tensor(
        crow.contiguous(), col.to(crow.dtype).contiguous(), values, size, check_invariants=False
    )


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    # From pinned memory the copy is asynchronous and skips a staging copy.
    return t.pin_memory().to(device, non_blocking=True)


def accumulate_product_(out: torch.Tensor, tile: torch.Tensor, dense: torch.Tensor) -> None:
    """out += tile @ dense, in place."""
    if tile.values().numel():
        torch.addmm(out, tile, dense, out=out)


def tile_product_reference(tile: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
    """tile @ dense by index_add_ over the entries: slow, obviously right."""
    crow, col, val = tile.crow_indices(), tile.col_indices(), tile.values()
    rows = torch.repeat_interleave(torch.arange(tile.shape[0]), crow.diff())
    out = dense.new_zeros((tile.shape[0], dense.shape[1]))
    return out.index_add_(0, rows, dense[col] * val[:, None])
