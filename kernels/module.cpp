// The Python bindings of gnnrun's native kernels: one extension module, one entry per kernel.
#include <torch/extension.h>

torch::Tensor libra_assign(torch::Tensor src, torch::Tensor dst, int64_t num_nodes,
                           int64_t num_parts, double slack);
torch::Tensor csr_reverse_edges(torch::Tensor indptr, torch::Tensor indices);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "gnnrun native kernels";
  m.def("libra_assign", &libra_assign, "Libra streaming vertex-cut edge assignment");
  m.def("csr_reverse_edges", &csr_reverse_edges, "position of each edge's reverse in a symmetric CSR");
}
