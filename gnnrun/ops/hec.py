"""The Historical Embedding Cache (DistGNN-MB, section 3.2): one per GNN layer and rank.

A fixed number of cache lines (`capacity`, the paper's cs) holds embeddings of
this rank's halo vertices, pushed by their owners. Lines are tagged by the
vertex's original id (VID_o). Every line has a stamp: the training step from
which its embedding is usable; at step `now` a line is valid while
`now - stamp <= lifespan` (ls). Older lines are purged: a search misses them
and they are replaced first. A store overwrites a vertex's own line, else
takes the line of smallest (stamp, line): empty, expired, then the oldest
(oldest cache line first).

The three operations (HECSearch, HECLoad, HECStore) run over a whole
minibatch, natively (kernels/hec.cpp) or in the PyTorch reference below, the
test oracle, the fallback without a compiler and the path of a cache on a GPU. Both implement the contract
written at the top of kernels/hec.cpp.
"""

from __future__ import annotations

import torch

from gnnrun.ops.native import native_op

EMPTY = torch.iinfo(torch.int64).min  # the stamp of a line never written


class HistoricalEmbeddingCache:
    """Cache lines for the embeddings of `tags` (the halo vertices' original ids).

    Only vertices in `tags` can be stored: they are the rank's halo vertices,
    the only ones any owner pushes to it. A capacity above their number is
    never used, so at most `len(tags)` lines are allocated.
    """

    def __init__(self, tags: torch.Tensor, capacity: int, width: int, native: bool = True) -> None:
        self.tags = torch.unique(tags.to(torch.int64))  # sorted: a tag's slot is its position
        lines = min(capacity, self.tags.numel())
        self.capacity = capacity
        # On the tags' device: a GPU rank's cache lives in the GPU's memory.
        device = self.tags.device
        self.slot_line = torch.full((self.tags.numel(),), -1, dtype=torch.int64, device=device)
        self.line_slot = torch.full((lines,), -1, dtype=torch.int64, device=device)
        self.line_stamp = torch.full((lines,), EMPTY, dtype=torch.int64, device=device)
        self.data = torch.zeros(lines, width, device=device)
        self.native = native

    @property
    def num_lines(self) -> int:
        return int(self.line_slot.numel())

    def slots(self, tags: torch.Tensor) -> torch.Tensor:
        """Positions of `tags` among the cacheable ones; a tag outside them is an error."""
        slots = torch.searchsorted(self.tags, tags)
        inside = slots < self.tags.numel()
        found = torch.zeros_like(inside)
        found[inside] = self.tags[slots[inside]] == tags[inside]
        if not bool(found.all()):
            missing = tags[~found][:5].tolist()
            raise ValueError(f"HistoricalEmbeddingCache: tags {missing} are not halo vertices here")
        return slots

    def search(self, tags: torch.Tensor, now: int, lifespan: int) -> torch.Tensor:
        """HECSearch: the valid line of each tag at step `now`, or -1."""
        slots = self.slots(tags)
        op = self._op("hec_search")
        if op is None:
            return search_reference(self.slot_line, self.line_stamp, slots, now, lifespan)
        return op(self.slot_line, self.line_stamp, slots, now, lifespan)

    def load(self, lines: torch.Tensor) -> torch.Tensor:
        """HECLoad: the embeddings of these lines (all valid), one row each."""
        op = self._op("hec_load")
        return self.data.index_select(0, lines) if op is None else op(self.data, lines)

    def store(self, tags: torch.Tensor, rows: torch.Tensor, now: int) -> int:
        """HECStore: write `rows` for `tags`, usable from step `now`; returns the rows kept."""
        slots = self.slots(tags)
        rows = rows.to(self.data.dtype)
        op = self._op("hec_store")
        state = (self.slot_line, self.line_slot, self.line_stamp, self.data)
        if op is None:
            return store_reference(*state, slots, rows, now)
        return int(op(*state, slots, rows.contiguous(), now))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            "slot_line": self.slot_line,
            "line_slot": self.line_slot,
            "line_stamp": self.line_stamp,
            "data": self.data,
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name, value in state.items():
            current = getattr(self, name)
            if current.shape != value.shape:
                raise ValueError(
                    f"cache state {name} has shape {tuple(value.shape)}, expected {tuple(current.shape)}"
                )
            current.copy_(value)

    def _op(self, name: str):
        """The native kernel (CPU caches), or None: the reference, on any device."""
        return native_op(name, "hec") if self.native and self.data.device.type == "cpu" else None


def search_reference(
    slot_line: torch.Tensor, line_stamp: torch.Tensor, slots: torch.Tensor, now: int, lifespan: int
) -> torch.Tensor:
    lines = slot_line[slots]
    present = lines >= 0
    valid = present.clone()
    valid[present] = now - line_stamp[lines[present]] <= lifespan
    return torch.where(valid, lines, torch.full_like(lines, -1))


def store_reference(
    slot_line: torch.Tensor,
    line_slot: torch.Tensor,
    line_stamp: torch.Tensor,
    data: torch.Tensor,
    slots: torch.Tensor,
    rows: torch.Tensor,
    now: int,
) -> int:
    num_lines = line_slot.numel()
    if num_lines == 0 or slots.numel() == 0:
        return 0
    # The last occurrence of each slot, in input order.
    position = torch.arange(slots.numel(), device=slots.device)
    last = torch.full((int(slots.max()) + 1,), -1, dtype=torch.int64, device=slots.device)
    last.scatter_reduce_(0, slots, position, "amax")
    kept = torch.sort(last[last >= 0]).values
    kept_slots = slots[kept]
    lines = slot_line[kept_slots]
    resident = lines >= 0
    data[lines[resident]] = rows[kept[resident]]
    line_stamp[lines[resident]] = now
    fresh = kept[~resident]
    room = num_lines - int(resident.sum())
    fresh = fresh[max(0, fresh.numel() - room) :]
    if fresh.numel():
        # Victims: smallest (stamp, line), skipping the lines just written.
        keys = line_stamp.clone()
        keys[lines[resident]] = torch.iinfo(torch.int64).max
        order = torch.sort(keys, stable=True).indices  # ties: lower line first
        victims = order[: fresh.numel()]
        previous = line_slot[victims]
        slot_line[previous[previous >= 0]] = -1
        line_slot[victims] = slots[fresh]
        slot_line[slots[fresh]] = victims
        line_stamp[victims] = now
        data[victims] = rows[fresh]
    return int(resident.sum()) + fresh.numel()
