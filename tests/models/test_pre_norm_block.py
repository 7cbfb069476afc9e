"""`model.block=pre_norm_ffn` (gnnrun.models.gnn.PreNormBlock and the models' messages)
against formulas worked out by hand and a dense re-statement of Platonov et al.'s model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gnnrun.models import build_model
from gnnrun.models.gat import GATMessage
from gnnrun.models.gcn import GCNMessage
from gnnrun.models.registry import ModelConfig
from gnnrun.models.sage import SAGEMessage
from gnnrun.ops.block import Block

# The path 0 - 1 - 2 (both directions) and an isolated vertex 3.
PATH = Block.from_csr(np.array([0, 1, 3, 4, 4]), np.array([1, 0, 2, 1]))


def test_gcn_message_is_the_normalised_sum_with_self_loops_and_no_weights():
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 1.0], [4.0, 4.0]], dtype=torch.float64)
    # Degrees 1, 2, 1, 0; with the self-loops 2, 3, 2, 1.
    r6 = 1 / math.sqrt(6)
    expected = torch.stack(
        [
            x[0] / 2 + x[1] * r6,
            x[0] * r6 + x[1] / 3 + x[2] * r6,
            x[1] * r6 + x[2] / 2,
            x[3],
        ]
    )
    message = GCNMessage(2)
    assert list(message.parameters()) == []
    torch.testing.assert_close(message(PATH, x), expected)


def test_sage_message_is_each_row_beside_its_neighbours_mean():
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 1.0], [4.0, 4.0]])
    expected = torch.tensor(
        [
            [1.0, 0.0, 0.0, 2.0],
            [0.0, 2.0, 2.0, 0.5],
            [3.0, 1.0, 0.0, 2.0],
            [4.0, 4.0, 0.0, 0.0],  # no neighbours: a mean of 0
        ]
    )
    message = SAGEMessage(2, "mean")
    assert message.out_dim == 4
    torch.testing.assert_close(message(PATH, x), expected)


def test_gat_message_attends_with_the_whole_projected_row_and_a_source_bias():
    torch.manual_seed(0)
    message = GATMessage(4, heads=2).double()
    x = torch.randn(4, 4, dtype=torch.float64)
    p = message.linear(x)
    el, er = message.attn_src(p), message.attn_dst(p)  # [4, heads], over all 4 columns
    neighbours = {0: [1, 0], 1: [0, 2, 1], 2: [1, 2], 3: [3]}  # with the self-loops
    expected = torch.zeros(4, 4, dtype=torch.float64)
    for v, us in neighbours.items():
        for h in range(2):
            scores = torch.nn.functional.leaky_relu(el[us, h] + er[v, h], 0.2)
            alpha = torch.softmax(scores, 0)
            expected[v, 2 * h : 2 * h + 2] = alpha @ p[us, 2 * h : 2 * h + 2]
    torch.testing.assert_close(message(PATH, x), expected)


def _platonov(model, x, messages, norm):
    """Their Model.forward, dense and spelled out (eval mode: no dropout)."""
    h = torch.nn.functional.gelu(model.input_linear(x))
    for layer, message in zip(model.layers, messages, strict=True):
        m = message(PATH, norm(h, layer.norm))
        h = h + layer.linear_2(torch.nn.functional.gelu(layer.linear_1(m)))
    return model.output_linear(norm(h, model.output_norm))


def _layer_norm(h, module):
    return torch.nn.functional.layer_norm(h, h.shape[1:], module.weight, module.bias)


@pytest.mark.parametrize("name", ["gcn", "sage", "gat"])
def test_the_stack_is_platonovs_residual_model(name):
    torch.manual_seed(0)
    cfg = ModelConfig(
        name=name,
        hidden=8,
        layers=3,
        heads=2,
        block="pre_norm_ffn",
        norm="layer",
        dropout=0.2,
        activation="gelu",
    )
    cfg.validate()
    model = build_model(cfg, in_dim=5, num_classes=2).double().eval()
    for p in model.parameters():  # LayerNorm starts as the identity: make it count
        torch.nn.init.normal_(p, std=0.5)
    x = torch.randn(4, 5, dtype=torch.float64)
    messages = [layer.message for layer in model.layers]
    expected = _platonov(model, x, messages, _layer_norm)
    torch.testing.assert_close(model([PATH] * 3, x), expected)
    # Nothing around the blocks that the paper's model lacks.
    assert model.skips is None and len(model.norms) == 0
    assert model.input_linear.out_features == model.output_linear.in_features == 8


def test_dropout_comes_before_the_activation_in_training():
    """Their feed-forward network (and input layer) drop out before GELU, which is not
    the same as after it: a layer's output with every element kept but scaled is
    gelu(W x / (1 - p)), not gelu(W x) / (1 - p)."""
    torch.manual_seed(0)
    cfg = ModelConfig(
        name="gcn", hidden=8, layers=1, block="pre_norm_ffn", dropout=0.5, activation="gelu"
    )
    model = build_model(cfg, in_dim=3, num_classes=2).double()
    x = torch.randn(4, 3, dtype=torch.float64)
    dropped = model._input(x)  # training: dropout, then GELU
    pre = model.input_linear(x)
    kept = dropped != 0
    torch.testing.assert_close(dropped[kept], torch.nn.functional.gelu(2 * pre)[kept])


def test_a_wrong_block_or_one_without_a_message_is_one_line():
    with pytest.raises(
        Exception, match="model.block 'post'.*choose one of post_norm, pre_norm_ffn"
    ):
        ModelConfig(name="gcn", block="post").validate()
    with pytest.raises(Exception, match="no message for model.name=rgcn: use model.name gat or"):
        ModelConfig(name="rgcn", block="pre_norm_ffn").validate()
    with pytest.raises(Exception, match="model.jk=cat reads hidden layers"):
        ModelConfig(name="gcn", block="pre_norm_ffn", jk="cat").validate()


def test_the_blocks_feed_forward_network_drops_out_before_the_activation():
    """In training, a block is h + dropout(W2 gelu(dropout(W1 m + b1)) + b2): the same
    masks (drawn in the same order from the same seed) reproduce it only in that order."""
    from gnnrun.ops.dropout import dropout

    cfg = ModelConfig(
        name="gcn", hidden=8, layers=1, block="pre_norm_ffn", dropout=0.5, activation="gelu"
    )
    block = build_model(cfg, in_dim=3, num_classes=2).double().layers[0]
    h = torch.randn(4, 8, dtype=torch.float64)
    torch.manual_seed(5)
    got = block(PATH, h)
    torch.manual_seed(5)
    m = block.message(PATH, block.norm(h))
    inner = torch.nn.functional.gelu(dropout(block.linear_1(m), 0.5))
    torch.testing.assert_close(got, h + dropout(block.linear_2(inner), 0.5))
