// Libra vertex-cut edge assignment (DistGNN section 5.1, after Xie et al. 2014).
//
// Edges are streamed once, in the given order. Each edge goes to the
// least-loaded part among the parts that already hold both endpoints; when the
// endpoints share none, among the parts of the endpoint with the lower degree
// (`degree` given: DistGNN's released code, so that hubs are the vertices
// replicated; ties take the second endpoint's) or of either endpoint (no
// `degree`: the paper's text); when neither endpoint is placed yet, among all
// parts. A part more than `slack` above the running average load is passed
// over for the globally least-loaded part, which keeps the edge counts balanced
// in any stream order (an infinite slack never does: the released code). Part
// sets are 64-bit masks, so at most 64 parts.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <vector>

namespace {

inline int least_loaded(uint64_t candidates, const std::vector<int64_t>& load) {
  int best = -1;
  int64_t best_load = INT64_MAX;
  while (candidates) {
    const int p = __builtin_ctzll(candidates);
    candidates &= candidates - 1;
    if (load[p] < best_load) {  // strict: ties go to the lowest part id
      best_load = load[p];
      best = p;
    }
  }
  return best;
}

}  // namespace

at::Tensor libra_assign(at::Tensor src, at::Tensor dst, int64_t num_nodes,
                           int64_t num_parts, double slack, c10::optional<at::Tensor> degree) {
  TORCH_CHECK(src.dtype() == at::kLong && dst.dtype() == at::kLong, "libra: int64 ids");
  TORCH_CHECK(src.is_contiguous() && dst.is_contiguous(), "libra: contiguous ids");
  TORCH_CHECK(src.numel() == dst.numel(), "libra: src and dst differ in length");
  TORCH_CHECK(num_parts >= 1 && num_parts <= 64, "libra: 1 to 64 parts");
  const int64_t m = src.numel();
  const int64_t* s = src.data_ptr<int64_t>();
  const int64_t* d = dst.data_ptr<int64_t>();
  const int64_t* deg = nullptr;
  if (degree.has_value()) {
    TORCH_CHECK(degree->dtype() == at::kLong && degree->is_contiguous() && degree->numel() == num_nodes,
                "libra: degree is one int64 per vertex");
    deg = degree->data_ptr<int64_t>();
  }
  auto out = at::empty({m}, at::dtype(at::kChar));
  int8_t* part = out.data_ptr<int8_t>();

  std::vector<uint64_t> held(num_nodes, 0);
  std::vector<int64_t> load(num_parts, 0);
  const uint64_t all = num_parts == 64 ? ~0ULL : ((1ULL << num_parts) - 1);
  for (int64_t e = 0; e < m; ++e) {
    const int64_t u = s[e], v = d[e];
    TORCH_CHECK(u >= 0 && u < num_nodes && v >= 0 && v < num_nodes, "libra: id out of range");
    uint64_t candidates = held[u] & held[v];
    if (!candidates && held[u] && held[v] && deg != nullptr)
      candidates = deg[u] < deg[v] ? held[u] : held[v];
    if (!candidates) candidates = held[u] | held[v];
    if (!candidates) candidates = all;
    int p = least_loaded(candidates, load);
    const double cap = (1.0 + slack) * static_cast<double>(e) / num_parts + 1.0;
    if (static_cast<double>(load[p]) > cap) p = least_loaded(all, load);
    part[e] = static_cast<int8_t>(p);
    ++load[p];
    held[u] |= 1ULL << p;
    held[v] |= 1ULL << p;
  }
  return out;
}

// For a symmetric in-CSR (rows sorted by source), the position of every edge's
// reverse: the edges leaving u, met in CSR order, are u's row in increasing
// source order, so a running cursor per source is a counting sort in one pass.
at::Tensor csr_reverse_edges(at::Tensor indptr, at::Tensor indices) {
  TORCH_CHECK(indptr.dtype() == at::kLong && indptr.is_contiguous(), "indptr: int64");
  TORCH_CHECK(indices.is_contiguous(), "indices: contiguous");
  const int64_t n = indptr.numel() - 1;
  const int64_t m = indices.numel();
  const int64_t* ptr = indptr.data_ptr<int64_t>();
  std::vector<int64_t> cursor(ptr, ptr + n);
  auto out = at::empty({m}, at::dtype(at::kLong));
  int64_t* reverse = out.data_ptr<int64_t>();
  AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "csr_reverse_edges", [&] {
    const index_t* src = indices.data_ptr<index_t>();
    for (int64_t e = 0; e < m; ++e) {
      const int64_t u = src[e];
      TORCH_CHECK(u >= 0 && u < n && cursor[u] < ptr[u + 1], "csr_reverse_edges: graph is not symmetric");
      reverse[e] = cursor[u]++;
    }
  });
  return out;
}

TORCH_LIBRARY_FRAGMENT(gnnrun, m) {
  m.def(
      "libra_assign(Tensor src, Tensor dst, int num_nodes, int num_parts, float slack, "
      "Tensor? degree=None) -> Tensor",
      &libra_assign);
  m.def("csr_reverse_edges(Tensor indptr, Tensor indices) -> Tensor", &csr_reverse_edges);
}
