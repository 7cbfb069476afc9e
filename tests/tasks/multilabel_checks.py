"""What the multi-label tests run on each real rank, and in one process."""

from __future__ import annotations

import numpy as np
import torch
from hydra import compose, initialize_config_dir

from gnnrun.algorithms.minibatch.minibatch import DistributedMinibatch, step_key
from gnnrun.algorithms.minibatch.sources import LocalGraphSource, make_minibatch
from gnnrun.algorithms.single import Single
from gnnrun.cli import CONFIG_DIR
from gnnrun.comm import Communicator
from gnnrun.config import to_objects
from gnnrun.data import load_prepared
from gnnrun.models import build_model
from gnnrun.partition import find_partition, partition_dataset
from gnnrun.schemas import register_schemas
from gnnrun.tasks import prepare_for_task
from gnnrun.timers import PhaseTimer
from gnnrun.train.optimizer import build_optimizer
from gnnrun.train.trainer import train_epoch


def prepared(*overrides: str):
    """The config, its dataset prepared and (for partitioned algorithms) partitioned."""
    register_schemas()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = to_objects(compose("config", overrides=list(overrides)))
    dataset = prepare_for_task(cfg.dataset, cfg.task)
    if cfg.algorithm.name != "single" and find_partition(dataset, cfg.partitioner) is None:
        partition_dataset(dataset, cfg.partitioner)
    return cfg


def trained_figures(cfg, epochs: int) -> dict[str, float]:
    """Train `single` for `epochs` in this process; the last evaluation's figures."""
    comm = Communicator()
    algorithm = Single(cfg, comm, PhaseTimer())
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, algorithm.in_dim, algorithm.num_classes)
    optimizer = build_optimizer(model, cfg.optimizer)
    for epoch in range(epochs):
        train_epoch(algorithm, model, optimizer, epoch)
    return algorithm.task.metrics(algorithm.evaluate(model), comm)


def minibatch_steps_against_one_process(rank: int, world: int, cfg) -> dict:
    """Every step of one epoch on this rank: the owners' blocks, features and label rows
    equal one process's for the same seeds and key, and so does the loss of one model
    (dropout off) on them. Returns the steps and the seeds whose inputs were remote."""
    comm = Communicator()
    algorithm = DistributedMinibatch(cfg, comm, PhaseTimer())
    dataset = load_prepared(cfg.dataset)
    local = LocalGraphSource(dataset)
    labels = torch.from_numpy(np.asarray(dataset.label, dtype=np.int64))
    torch.manual_seed(0)
    model = build_model(cfg.model, algorithm.in_dim, algorithm.num_classes).eval()
    owner = torch.from_numpy(np.asarray(algorithm.source.owner))
    steps = algorithm.begin_epoch(0)
    losses, remote = [], 0
    for step in range(steps):
        batch = algorithm.batch(step)
        items = algorithm.step_items(algorithm.order, step)
        key = step_key(cfg.train.seed, 0, step)
        blocks, x = make_minibatch(local, items, algorithm.fanouts, key)
        for mine, theirs in zip(batch.blocks, blocks, strict=True):
            assert torch.equal(mine.indptr, theirs.indptr)
            assert torch.equal(mine.indices, theirs.indices)
            assert torch.equal(mine.src_ids, theirs.src_ids)
        assert torch.equal(batch.x, x)
        assert torch.equal(batch.targets, labels[items]) and batch.targets.shape[1] == 12
        with torch.no_grad():
            mine = algorithm.loss(model, batch, step)
            theirs = algorithm.task.vertex_loss(model(blocks, x), labels[items])
        assert mine is not None and torch.equal(mine, theirs)
        losses.append(float(mine))
        remote += int((owner[blocks[0].src_ids] != rank).sum())
    return {"steps": steps, "losses": losses, "remote_inputs": remote}
