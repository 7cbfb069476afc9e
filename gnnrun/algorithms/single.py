"""`single`: one process, full-batch or minibatch: the reference for every distributed algorithm."""

from __future__ import annotations

import numpy as np
import torch

from gnnrun.algorithms.minibatch.minibatch import SampledConfig, SampledTraining, step_key
from gnnrun.algorithms.minibatch.sources import LocalGraphSource
from gnnrun.algorithms.registry import ALGORITHMS
from gnnrun.ops.block import Block
from gnnrun.tasks import load_for_task


@ALGORITHMS.register("single", SampledConfig)
class Single(SampledTraining):
    """`algorithm.mode=full`: the whole graph every layer, one step per epoch.
    `algorithm.mode=minibatch`: sampled blocks from the whole graph, as `minibatch` samples."""

    def __init__(self, cfg, comm, timer) -> None:
        super().__init__(cfg, comm, timer)
        if comm.world_size != 1:
            raise ValueError("algorithm=single runs in one process (cluster.nprocs=1)")
        dataset = load_for_task(cfg.dataset, cfg.task)
        self.schema = dataset.hetero
        self.in_dim = dataset.feat_dim
        self.label = torch.from_numpy(np.array(dataset.label, dtype=np.int64)).to(self.device)
        self.train_ids = torch.from_numpy(np.array(dataset.train_idx, dtype=np.int64))
        self.eval_ids = {
            "val": torch.from_numpy(np.array(dataset.val_idx, dtype=np.int64)),
            "test": torch.from_numpy(np.array(dataset.test_idx, dtype=np.int64)),
        }
        self.full = cfg.algorithm.mode == "full"
        if self.full:
            self.graph = Block.from_csr(
                dataset.indptr, dataset.indices, symmetric=not dataset.directed
            )
            self.x = torch.from_numpy(np.array(dataset.feat, dtype=np.float32))
            if self.schema is not None:
                self.graph.etypes = torch.from_numpy(dataset.edge_type.astype(np.int64))
                every = torch.arange(dataset.num_nodes)
                self.graph.node_types = torch.from_numpy(self.schema.type_of(every.numpy()))
                self.x = LocalGraphSource(dataset).features(every)
            # The whole graph and its features live on the rank's device (a GPU's memory
            # must hold them, as PyG's full-batch training needs).
            self.graph, self.x = self.graph.to(self.device), self.x.to(self.device)
        else:
            self.source = LocalGraphSource(dataset)
        self.num_nodes = dataset.num_nodes
        self.set_objective(dataset, None)

    @staticmethod
    def samples(cfg) -> bool:
        return cfg.algorithm.mode != "full"

    def labels_of(self, ids):
        return self.label[ids]

    def embedded_vertices(self) -> torch.Tensor:
        return torch.arange(self.num_nodes)

    def full_logits(self, model: torch.nn.Module) -> torch.Tensor:
        return model([self.graph] * len(model.layers), self.x)

    def begin_epoch(self, epoch: int) -> int:
        if not self.full:
            return super().begin_epoch(epoch)
        self.epoch = epoch
        return 1

    def batch(self, step: int):
        return None if self.full else super().batch(step)

    def loss(self, model, batch, step: int) -> torch.Tensor | None:
        if not self.full:
            return super().loss(model, batch, step)
        logits = self.full_logits(model)
        if getattr(self.objective, "whole_graph_loss", False):
            return self.objective.reconstruction_loss(logits)
        # Every training item is a target in the one step; training edges stay in the
        # graph (full-graph link prediction's convention: leaving them all out would
        # leave no graph).
        key = step_key(self.cfg.train.seed, self.epoch, 0)
        seeds, _, targets = self.objective.step(self.train_ids, key)
        return self.objective.loss(model, logits[seeds], targets.to(self.device))

    @torch.no_grad()
    def evaluate(self, model):
        if not self.full:
            return super().evaluate(model)
        model.eval()
        self._logits = self.full_logits(model)  # one forward pass serves every split
        try:
            return self.objective.evaluate(model, self)
        finally:
            del self._logits

    def outputs_of(self, model, ids):
        if self.full:
            return self._logits[ids]
        return super().outputs_of(model, ids)

    def every_output(self, model):
        if self.full:
            return lambda nodes: self._logits[nodes]
        return super().every_output(model)
