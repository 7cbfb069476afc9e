"""Where the files gnnrun ships beside its code are: the Hydra configs and the C++
kernels' sources.

They sit at the top of the repository (configs/, kernels/) and install inside the
package (site-packages/gnnrun/configs, gnnrun/kernels: setup.py maps them there), so
that an installed gnnrun runs from any directory. `shipped` finds them in either place.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def shipped(name: str) -> Path:
    """The directory `name` (configs or kernels): the installed package's copy (a wheel),
    else the one at the top of the checkout this package is imported from (a clone, an
    editable install)."""
    for place in (PACKAGE / name, PACKAGE.parent / name):
        if place.is_dir():
            return place
    raise FileNotFoundError(
        f"gnnrun's {name}/ is neither in {PACKAGE} nor in {PACKAGE.parent}: reinstall gnnrun"
    )


def install_command(extra: str) -> str:
    """The pip command that installs an optional extra's packages (`pip install
    'gnnrun[extra]'` needs gnnrun on an index; from a clone it is not), read from the
    installed metadata: `pip install 'mlflow>=2.10'`."""
    import importlib.metadata
    import re

    try:
        requires = importlib.metadata.requires("gnnrun") or []
    except importlib.metadata.PackageNotFoundError:  # imported from a checkout, not installed
        requires = []
    marker = re.compile(rf"""^(.*?);\s*extra\s*==\s*["']{re.escape(extra)}["']\s*$""")
    packages = [m[1].strip() for r in requires if (m := marker.match(r))]
    if not packages:
        return f"pip install -e '.[{extra}]' in gnnrun's clone"
    return "pip install " + " ".join(f"'{p}'" for p in packages)
