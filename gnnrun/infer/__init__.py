"""Layer-wise inference from a trained checkpoint: `gnnrun predict` and `gnnrun embed`.

A sampled or partitioned model is evaluated exactly on the whole graph the way
DGL's examples do by hand: layer 1 for every vertex, then layer 2 from those,
and so on, each vertex with its full in-neighbourhood. On P ranks the graph is
an edge-cut partition (gnnrun.partition.book): each rank computes its own
vertices, `predict.chunk_vertices` at a time (gnnrun.infer.graph builds a
chunk's block), reading the rows of in-neighbours that other ranks own from
a halo filled once per layer (gnnrun.infer.halo). Each layer's output goes to a
memory-mapped file, written atomically, so memory follows the chunk rather
than the graph, and an interrupted run resumes at the first layer not every
rank finished (gnnrun.infer.run). The output is one shard per rank with the
original vertex ids and a manifest (gnnrun.infer.output).

The result equals the model's full-graph forward pass: every layer sees the
same neighbourhoods and the graph's degrees, whatever algorithm trained it.
"""

from gnnrun.infer.output import read_output

__all__ = ["read_output"]
