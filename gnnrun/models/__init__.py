"""GNN models on gnnrun's own aggregation ops: GraphSAGE, GCN, GAT.

Every model runs on a list of Blocks, one per layer, from the input layer to
the output layer. Full-batch training passes the whole graph as every block;
minibatch training passes sampled blocks. The same weights work for both.
"""

from gnnrun.models.gnn import ACTIVATIONS, GNN, Dropout, build_model, conv_widths, layer_widths
from gnnrun.models.registry import LAYERS

# Importing a model's module registers its layer.
from gnnrun.models import gat, gcn, rgcn, sage  # noqa: E402, F401  isort: skip

__all__ = ["ACTIVATIONS", "GNN", "LAYERS", "Dropout", "build_model", "conv_widths", "layer_widths"]
