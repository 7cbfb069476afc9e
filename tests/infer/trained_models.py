"""A trained model to infer from (a checkpoint of seeded weights in a run directory), and
the reference it must equal: the same model's forward pass over the whole graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir

from gnnrun.cli import CONFIG_DIR
from gnnrun.config import to_objects
from gnnrun.data import prepare_dataset
from gnnrun.models import build_model
from gnnrun.models.hetero import typed_input
from gnnrun.ops.block import Block
from gnnrun.schemas import register_schemas
from gnnrun.tasks import load_for_task, task_of
from gnnrun.train.checkpoint import save_checkpoint
from gnnrun.train.resume import settings_of


def make_config(*overrides: str):
    register_schemas()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return to_objects(compose("config", overrides=list(overrides)))


def checkpointed(tmp_path: Path, *overrides: str, seed: int = 0):
    """(config, run directory): the dataset prepared and a checkpoint of a seeded model saved
    where the config's train.checkpoint_dir says, as a run would leave it."""
    cfg = make_config(*overrides)
    dataset = prepare_dataset(cfg.dataset)
    torch.manual_seed(seed)
    model = build_model(cfg.model, dataset.feat_dim, dataset.num_classes, dataset.hetero)
    with torch.no_grad():  # biases away from zero, so that a lost bias shows
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.normal_()
    save_checkpoint(
        Path(cfg.train.checkpoint_dir),
        {"model": model.state_dict(), "epoch": 3, "history": [], "settings": settings_of(cfg)},
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    return cfg, run_dir


def full_graph_layers(cfg) -> list[torch.Tensor]:
    """Every layer's output of the checkpoint's model (a link run's: its encoder) on the
    whole graph in one process (the reference): each layer whole, with the model's activation after the hidden ones;
    the last equals the model's own forward pass."""
    from gnnrun.infer.run import load_trained_model

    task = task_of(cfg)
    dataset = load_for_task(cfg.dataset, cfg.task)  # a link run's: the message-passing graph
    checkpoint = Path(cfg.train.checkpoint_dir) / "checkpoint.pt"
    width = dataset.num_classes if task.trains_vertices else cfg.model.link_width
    model = task.encoder(
        load_trained_model(cfg, checkpoint, dataset.feat_dim, width, dataset.hetero)
    )
    graph = Block.from_csr(dataset.indptr, dataset.indices, symmetric=not dataset.directed)
    x = torch.from_numpy(np.array(dataset.feat, dtype=np.float32))
    if dataset.hetero is not None:  # the relations, the types, and every vertex's typed input
        every = torch.arange(dataset.num_nodes)
        graph.etypes = torch.from_numpy(dataset.edge_type.astype(np.int64))
        graph.node_types = torch.from_numpy(dataset.hetero.type_of(every.numpy()))
        x = typed_input(
            dataset.hetero,
            every,
            lambda t, ids: torch.from_numpy(np.asarray(dataset.typed_feat[t])[ids.numpy()]),
        )
    outputs = []
    with torch.no_grad():
        h = x if dataset.hetero is None else model.encoder(x)
        for i, layer in enumerate(model.layers):
            if model.around_layers:  # residual, norm, jk, ...: layer-wise, in one process
                earlier = outputs if i == len(model.layers) - 1 and model.jk != "none" else None
                rows = model.transform(i, h) if model.transforms(i) else h
                h = model.propagate(i, graph, rows, earlier)
            else:
                h = layer(graph, h)
                if i < len(model.layers) - 1:
                    h = model.activation(h)
            outputs.append(h)
        torch.testing.assert_close(model([graph] * len(model.layers), x), outputs[-1])
    return outputs
