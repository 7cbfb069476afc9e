"""Weights & Biases, offline (its default here): the run's records read back from the
offline run directory with W&B's own record format (wandb.proto), and its files."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from tests.tracking.conftest import epochs_of

pytestmark = pytest.mark.tracking

# A .wandb file: a 7-byte header (":W&B", a magic number, a version), then records in
# LevelDB's log format: 32 KiB blocks of chunks, each with a 7-byte header (CRC-32,
# length, type: 1 full, 2 first, 3 middle, 4 last). W&B ships the records' protobuf
# classes but no reader of the file in this version.
_BLOCK, _HEADER = 32768, 7


def wandb_records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    records, pending, offset = [], b"", _HEADER
    while offset + _HEADER <= len(data):
        left_in_block = _BLOCK - offset % _BLOCK
        if left_in_block < _HEADER:  # the block's tail is padding
            offset += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[offset : offset + _HEADER])
        chunk = data[offset + _HEADER : offset + _HEADER + length]
        offset += _HEADER + length
        if kind == 0 and length == 0:
            continue
        pending += chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def offline_run(run_dir: Path) -> Path:
    (found,) = (run_dir / "wandb").glob("offline-run-*")
    return found


def test_the_offline_run_holds_every_epoch_the_config_and_the_files(logged_run):
    run = offline_run(logged_run)
    (record_file,) = run.glob("run-*.wandb")
    records = wandb_records(record_file)
    history = [r.history for r in records if r.WhichOneof("record_type") == "history"]
    steps = []
    for row in history:
        values = {
            "/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in row.item
        }
        steps.append(values)
    assert [row["_step"] for row in steps] == [1, 2, 3]
    records_jsonl = epochs_of(logged_run)
    assert [row["loss"] for row in steps] == pytest.approx([r["loss"] for r in records_jsonl])
    assert [row["val_acc"] for row in steps] == pytest.approx([r["val_acc"] for r in records_jsonl])
    assert "hit_rate/0" in steps[0] and "time/fwd" in steps[0]
    (run_record,) = [r.run for r in records if r.WhichOneof("record_type") == "run"][:1]
    assert run_record.project == "gnnrun" and run_record.job_type == "train"
    config = {item.key: json.loads(item.value_json) for item in run_record.config.update}
    assert config["algorithm.name"] == "hec"
    files = {p.name for p in (run / "files").iterdir()}
    assert {"summary.json", "accuracy.png"} <= files
    summary = json.loads((run / "files" / "summary.json").read_text())
    assert summary == json.loads((logged_run / "summary.json").read_text())
