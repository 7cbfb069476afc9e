"""What the partitioned full-batch algorithms (DistGNN's, SAR's, spmm1d) share: a rank's
own part opened at start-up with its rows, labels and split ids; one step per epoch; a
loss that is this rank's share of the one global loss, gradients summed over ranks; and
an epoch's loss summed over ranks at its end."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from gnnrun.algorithms.base import Algorithm, open_own_part
from gnnrun.data.dataset import GraphDataset
from gnnrun.partition.book import Part, PartitionBook


class FullBatch(Algorithm):
    splits_batch = True
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    gradient_reduction = "sum"  # each rank's loss is its share of the one global loss

    def open_part(self, cfg, comm) -> tuple[GraphDataset, PartitionBook, Part]:
        """Check the config, open this rank's part and take from it what every full-batch
        algorithm keeps: `x` and `label` (on the rank's device), `train_ids` and
        `eval_ids` (local ids per split), `num_train` (training vertices in the graph)."""
        self.check_config(cfg)
        dataset, book = open_own_part(cfg, comm, self.partition_kind)
        part = book.load_part(comm.rank)
        self.in_dim = dataset.feat_dim
        self.num_classes = self.task.out_dim(cfg.model, dataset)
        self.x = torch.from_numpy(np.array(part["feat"], dtype=np.float32)).to(self.device)
        self.label = torch.from_numpy(np.array(part["label"], dtype=np.int64)).to(self.device)
        self.train_ids = torch.from_numpy(np.array(part["train_idx"], dtype=np.int64))
        self.eval_ids = {
            "val": torch.from_numpy(np.array(part["val_idx"], dtype=np.int64)),
            "test": torch.from_numpy(np.array(part["test_idx"], dtype=np.int64)),
        }
        self.num_train = len(dataset.train_idx)
        return dataset, book, part

    def logits(self, model: torch.nn.Module) -> torch.Tensor:
        """The model's outputs for this rank's vertices, in its local order."""
        raise NotImplementedError

    def begin_epoch(self, epoch: int) -> int:
        return 1

    def loss(self, model, batch, step: int) -> torch.Tensor:
        logits = self.logits(model)
        ids = self.train_ids.to(self.device)
        own = self.task.vertex_loss(logits[ids], self.label[ids], reduction="sum")
        return own / self.num_train

    def epoch_figures(self) -> dict[str, Any]:
        """The algorithm's own figures of the epoch that ends (called before the loss is
        summed over ranks, so that it may first finish exchanges still in flight)."""
        return {}

    def end_epoch(self, losses: list[float]) -> dict[str, Any]:
        figures = self.epoch_figures()
        total = self.comm.all_reduce_sum(torch.tensor(losses, dtype=torch.float64).sum())
        return {"loss": float(total), **figures}
