"""gnnrun: distributed GNN training launcher driven by composable Hydra configs."""

__version__ = "0.1.0"
