"""Where `gnnrun.algorithms.minibatch.sources` was until 2026-11-27, kept for programs
that import it from here (CHANGELOG.md): new code takes these names from
`gnnrun.algorithms`."""

import warnings

from gnnrun.algorithms.minibatch.sources import *  # noqa: F403
from gnnrun.algorithms.minibatch.sources import LocalGraphSource, make_minibatch  # noqa: F401

warnings.warn(
    "gnnrun.algorithms.sources is now gnnrun.algorithms.minibatch.sources; import "
    "LocalGraphSource, make_minibatch and sample_minibatch from gnnrun.algorithms",
    DeprecationWarning,
    stacklevel=2,
)
