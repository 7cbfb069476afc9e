"""The input of a model on a heterogeneous graph: per-type features, or learned embeddings.

A minibatch of a heterogeneous graph (gnnrun.data.hetero) has input vertices of
several types whose features differ in width, and some types have none. Its
input is a `TypedInput`: each vertex's type and id within the type, and the
feature rows of the featured types' vertices. `TypedInputEncoder` turns it into
one row per vertex, all of the same width, for the layers:

- a featured type's rows are mapped by a linear projection of its own
  (`model.input_projection`), or passed as they are when it is off (every
  featured type must then have the same width);
- a featureless type's vertex gets a learned embedding row (as RGCN on MAG
  uses). Embeddings are `torch.nn.Embedding(sparse=True)`: a step's gradient
  holds only the rows its minibatch read, and the optimiser updates only those
  (gnnrun.train.optimizer). Every rank holds the whole table; each step,
  gnnrun.train.trainer sends every rank's gradient rows to the others and combines
  them, so that the copies stay equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnnrun.data.hetero import HeteroSchema


@dataclass
class TypedInput:
    """The input vertices of a heterogeneous minibatch, in the order of the first block's
    sources."""

    types: torch.Tensor  # int64 [n]: each vertex's type index
    typed_ids: torch.Tensor  # int64 [n]: its id within its type
    feat: dict[int, torch.Tensor]  # featured type -> rows of its vertices, in order

    def to(self, device: torch.device, non_blocking: bool = False) -> TypedInput:
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=non_blocking)

        return TypedInput(
            move(self.types), move(self.typed_ids), {t: move(f) for t, f in self.feat.items()}
        )


def typed_input(schema: HeteroSchema, nodes: torch.Tensor, rows_of) -> TypedInput:
    """The TypedInput of global vertices `nodes`; `rows_of(t, typed_ids)` gives the feature
    rows of type t's vertices (every featured type is asked, in type order, even for no
    vertices: a distributed source exchanges per type)."""
    types, typed_ids = schema.to_typed(nodes.numpy())
    types, typed_ids = torch.from_numpy(types), torch.from_numpy(typed_ids)
    feat = {}
    for t, dim in enumerate(schema.feat_dims):
        if dim:
            feat[t] = rows_of(t, typed_ids[types == t])
    return TypedInput(types, typed_ids, feat)


class TypedInputEncoder(torch.nn.Module):
    """TypedInput -> [n, width]: per-type projections and embeddings (module docstring)."""

    def __init__(self, schema: HeteroSchema, width: int, project: bool) -> None:
        super().__init__()
        self.width = width
        self.maps = torch.nn.ModuleDict()
        for t, (count, dim) in enumerate(zip(schema.type_counts, schema.feat_dims, strict=True)):
            if dim == 0:
                embedding = torch.nn.Embedding(count, width, sparse=True)
                torch.nn.init.normal_(embedding.weight, std=width**-0.5)
                self.maps[str(t)] = embedding
            elif project:
                self.maps[str(t)] = torch.nn.Linear(dim, width)
            elif dim != width:
                raise ValueError(
                    f"type {schema.node_types[t]!r} has {dim} features, not {width}: without "
                    "model.input_projection every featured type needs the same width"
                )

    @staticmethod
    def width_for(schema: HeteroSchema, hidden: int, project: bool) -> int:
        """The encoder's output width: the hidden width, or the features' own without
        projections (the hidden width when no type has features)."""
        if project:
            return hidden
        widths = {d for d in schema.feat_dims if d}
        if len(widths) > 1:
            raise ValueError(
                f"the vertex types have features of widths {sorted(widths)}: keep "
                "model.input_projection=true to project each to model.hidden"
            )
        return widths.pop() if widths else hidden

    def forward(self, x: TypedInput) -> torch.Tensor:
        rows, positions = [], []
        for t in torch.unique(x.types).tolist():
            where = torch.nonzero(x.types == t).squeeze(1)
            embed = self.maps[str(t)] if str(t) in self.maps else None  # noqa: SIM401  (ModuleDict has no get)
            if isinstance(embed, torch.nn.Embedding):
                rows.append(embed(x.typed_ids[where]))
            else:
                feat = x.feat[t].float()
                rows.append(feat if embed is None else embed(feat))
            positions.append(where)
        if not rows:
            return torch.zeros(0, self.width, device=x.types.device)
        order = torch.cat(positions)
        if len(rows) == 1:  # one type: the rows are already in order
            return rows[0]
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), device=order.device)
        return torch.cat(rows)[inverse]
