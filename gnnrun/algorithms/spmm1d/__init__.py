"""MG-GCN's full-batch GCN on 1D row blocks: `spmm1d`, and its staged, overlapped sparse
product (staged)."""
