"""A run's config and an epoch's record as the flat names and values trackers take."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any


def flat_params(cfg: Any) -> dict[str, str]:
    """The resolved config as `section.key: value` strings (lists and dicts as JSON)."""
    flat: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        else:
            flat[prefix] = value if isinstance(value, str) else json.dumps(value, default=str)

    walk("", dataclasses.asdict(cfg))
    return flat


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """An epoch's record flattened to named numbers: `time/fwd`, `bytes/halo`, `hit_rate/0`."""
    out: dict[str, float] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, bool):
            out[prefix] = float(value)
        elif isinstance(value, int | float):
            if math.isfinite(value):
                out[prefix] = float(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}/{key}", item)
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                walk(f"{prefix}/{i}", item)

    for key, value in record.items():
        if key not in ("epoch", "rank"):
            walk(key, value)
    return out
