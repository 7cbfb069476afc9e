"""Rank 0's terminal output: one line per epoch with loss, accuracy, time split and bytes."""

from __future__ import annotations

from typing import Any

from gnnrun.progress import console


class EpochTable:
    def __init__(self, cfg) -> None:
        self.epochs = cfg.train.epochs
        console.print(
            f"[bold]{'epoch':>7} {'loss':>8} {'val':>7} {'test':>7} {'time s':>7}  "
            f"{'mbc':>6} {'fwd':>6} {'bwd':>6} {'ared':>6} {'MB sent':>8}[/]"
        )

    def __call__(self, record: dict[str, Any]) -> None:
        t = record["time"]
        val = record.get("val_auc", record.get("val_acc"))
        test = record.get("test_auc", record.get("test_acc"))
        fmt = lambda v: f"{v:7.4f}" if v is not None else f"{'-':>7}"  # noqa: E731
        console.print(
            f"{record['epoch'] + 1:>3}/{self.epochs:<3} {record['loss']:8.4f} {fmt(val)} {fmt(test)} "
            f"{record['epoch_s']:7.2f}  {t['mbc']:6.2f} {t['fwd']:6.2f} {t['bwd']:6.2f} {t['ared']:6.2f} "
            f"{sum(record['bytes'].values()) / 1e6:8.2f}",
            highlight=False,
        )
