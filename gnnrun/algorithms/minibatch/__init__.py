"""Sampled minibatch training: the distributed `minibatch` (minibatch), where its graph and
rows come from and how blocks are sampled (sources), and DistGNN-MB's `hec` (hec), a
minibatch with a historical embedding cache."""
