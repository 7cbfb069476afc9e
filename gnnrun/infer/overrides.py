"""The config of an inference: the training run's overrides, then the user's.

`gnnrun predict run=DIR ...` composes the config the run in DIR was trained
with (Hydra saved its command-line overrides in DIR/.hydra/overrides.yaml), then
applies the overrides given now. A key given now replaces the run's value of
that key and of every key under it (`dataset=custom` drops the run's
`dataset.*`), so that the model runs on another graph or more ranks.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gnnrun.errors import GnnrunError

OVERRIDES = Path(".hydra") / "overrides.yaml"


def run_overrides(run_dir: Path) -> list[str]:
    """The overrides the run in `run_dir` was composed with."""
    path = Path(run_dir) / OVERRIDES
    if not Path(run_dir).is_dir():
        what = "a file, not a directory" if Path(run_dir).exists() else "no such directory"
        raise GnnrunError(f"run={run_dir}: {what}; give a run directory of `gnnrun train`")
    if not path.is_file():
        raise GnnrunError(
            f"run={run_dir} is not the directory of a `gnnrun train` run ({OVERRIDES} missing): "
            "give the directory the run printed at its end (for a sweep, one point's directory)"
        )
    try:
        overrides = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise GnnrunError(f"{path} cannot be read ({exc}): it is damaged") from None
    if overrides is None:
        return []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise GnnrunError(f"{path} is not a list of overrides: it is damaged")
    return [o for o in overrides if not override_key(o).startswith("hydra")]


def override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def merge_overrides(run: list[str], given: list[str]) -> list[str]:
    """The run's overrides without those the given ones replace, then the given ones."""
    keys = {override_key(o) for o in given}

    def replaced(override: str) -> bool:
        key = override_key(override)
        return any(key == k or key.startswith(f"{k}.") for k in keys)

    return [o for o in run if not replaced(o)] + given
