"""The optimiser of a model with sparse embedding tables: only the rows a step read move."""

from __future__ import annotations

import torch

from gnnrun.data.hetero import HeteroSchema
from gnnrun.models import build_model
from gnnrun.models.hetero import TypedInput
from gnnrun.models.rgcn import RGCNConfig
from gnnrun.ops.block import Block
from gnnrun.train.optimizer import EmbeddingsApart, OptimizerConfig, build_optimizer

SCHEMA = HeteroSchema(["paper", "author"], [4, 6], [3, 0], [("author", "writes", "paper")], "paper")


def test_only_the_embedding_rows_a_step_read_are_updated():
    torch.manual_seed(0)
    cfg = RGCNConfig(name="rgcn", hidden=8, layers=1)
    model = build_model(cfg, 0, 3, SCHEMA)
    optimizer = build_optimizer(model, OptimizerConfig(name="adam", lr=0.1))
    assert isinstance(optimizer, EmbeddingsApart)
    table = model.encoder.maps["1"].weight
    before = table.detach().clone()
    # Paper 0 (destination) reads authors 2 and 5.
    block = Block.from_csr([0, 2], [1, 2], num_src=3)
    block.etypes = torch.zeros(2, dtype=torch.int64)
    x = TypedInput(torch.tensor([0, 1, 1]), torch.tensor([0, 2, 5]), {0: torch.randn(1, 3)})
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model([block], x), torch.tensor([1])).backward()
    optimizer.step()
    moved = torch.nonzero((table.detach() != before).any(dim=1)).squeeze(1).tolist()
    assert moved == [2, 5]
    state = optimizer.state_dict()
    assert set(state) == {"dense", "sparse"} and state["sparse"]["state"]
    optimizer.load_state_dict(state)
