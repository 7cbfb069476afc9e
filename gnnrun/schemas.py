"""Every schema a composed config is checked against, stored where the YAML files find them.

The group schemas are declared beside their implementations and stored when
those register (gnnrun.registry): importing the packages registers them. The
root schema and the cluster group's come from gnnrun.config.
"""

from __future__ import annotations


def register_schemas() -> None:
    """Store every schema in Hydra's ConfigStore (before composing any config)."""
    import gnnrun.algorithms  # noqa: F401  (each import registers its entries' schemas)
    import gnnrun.data  # noqa: F401
    import gnnrun.models  # noqa: F401
    import gnnrun.partition  # noqa: F401
    import gnnrun.tasks  # noqa: F401
    import gnnrun.train.optimizer  # noqa: F401
    from gnnrun.config import store_root_schemas
    from gnnrun.tracking.config import store_schema

    store_root_schemas()
    store_schema()
