"""The torch releases gnnrun is tested on, what differs between them, and the device a
rank computes on.

pyproject.toml declares the same range (a test holds the two together); a torch
outside it is refused when a command starts, in one line, rather than failing
somewhere inside a rank with a traceback.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.torch_version import TorchVersion

from gnnrun.errors import GnnrunError

# The oldest release tested (a CUDA 13 build on an H100) and the first one not tested.
OLDEST = "2.11"
FIRST_UNTESTED = "2.15"


def supported_range() -> str:
    return f">={OLDEST},<{FIRST_UNTESTED}"


def check_torch_version(version: str | None = None) -> None:
    """Refuse a torch outside the tested range, naming both."""
    installed = TorchVersion(version or torch.__version__)
    if not OLDEST <= installed < FIRST_UNTESTED:
        raise GnnrunError(
            f"torch {installed} is installed; gnnrun supports torch{supported_range()}: "
            f"install a torch in that range (see the README's install section)"
        )


def dataclass_accepts(cls: type, field: str) -> bool:
    """Whether dataclass `cls` takes `field` (an argument added in a later torch release)."""
    return any(f.name == field for f in dataclasses.fields(cls))


def compute_device(cfg) -> torch.device:
    """Where this rank computes: its GPU (the launcher made it the current one, one rank per
    GPU) for cluster.device=cuda, else the CPU."""
    if cfg.cluster.device == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
