"""Graph operations with native kernels and pure-PyTorch/numpy references."""
