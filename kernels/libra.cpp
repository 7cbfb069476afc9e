// Libra vertex-cut edge assignment (DistGNN section 5.1, after Xie et al. 2014), streamed
// in rounds of parallel streams.
//
// Each edge goes to the least-loaded part among the parts that already hold both
// endpoints; when the endpoints share none, among the parts of the endpoint with the
// lower degree (`degree` given: DistGNN's released code, so that hubs are the vertices
// replicated; ties take the second endpoint's) or of either endpoint (no `degree`: the
// paper's text); when neither endpoint is placed yet, among all parts. A part more than
// `slack` above the running average load is passed over for the globally least-loaded
// part, which keeps the edge counts balanced in any stream order (an infinite slack never
// does: the released code). Part sets are 64-bit masks, so at most 64 parts.
//
// The edges come as rounds of streams (groups): the edges of group g are
// [group_bounds[g], group_bounds[g+1]), round r is the groups [round_groups[r],
// round_groups[r+1]). Within a round every stream starts from the masks and loads of the
// round's start and sees only its own changes; at the round's end all streams' changes
// are merged (masks OR-ed, loads added). So a stream's decisions depend on the round's
// start state and its own edges alone, and streams can run on different processes
// (gnnrun.partition.distributed_libra) with the result of one process. A stream sees the
// loads as the round's start plus `scale` times its own increments (the other streams
// are adding about as much), and ties between parts go to the first one counting from
// part `group_stream[g] mod P`, so that streams do not all pick the same part.
//
// `masks` (one int64 of part bits per vertex) and `load` (one per part) are updated in
// place to the state after the last round.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace {

// The part of least `view` load among `candidates`, ties to the first counting from `first`.
inline int least_loaded(uint64_t candidates, const double* view, int num_parts, int first) {
  int best = -1, best_rank = num_parts;
  double best_load = INFINITY;
  while (candidates) {
    const int p = __builtin_ctzll(candidates);
    candidates &= candidates - 1;
    const int rank = p >= first ? p - first : p - first + num_parts;
    if (view[p] < best_load || (view[p] == best_load && rank < best_rank)) {
      best_load = view[p];
      best_rank = rank;
      best = p;
    }
  }
  return best;
}

}  // namespace

at::Tensor libra_stream(at::Tensor src, at::Tensor dst, at::Tensor group_bounds, at::Tensor group_stream,
                        at::Tensor round_groups, at::Tensor masks, at::Tensor load,
                        c10::optional<at::Tensor> degree, int64_t num_parts, double slack, double scale) {
  for (const at::Tensor* t : {&src, &dst, &group_bounds, &group_stream, &round_groups, &masks, &load})
    TORCH_CHECK(t->dtype() == at::kLong && t->is_contiguous(), "libra: contiguous int64 tensors");
  TORCH_CHECK(src.numel() == dst.numel(), "libra: src and dst differ in length");
  TORCH_CHECK(num_parts >= 1 && num_parts <= 64 && load.numel() == num_parts, "libra: 1 to 64 parts");
  TORCH_CHECK(group_stream.numel() + 1 == group_bounds.numel(), "libra: one stream per group");
  const int64_t n = masks.numel();
  const int64_t m = src.numel();
  const int64_t groups = group_stream.numel();
  const int64_t rounds = round_groups.numel() - 1;
  const int64_t* s = src.data_ptr<int64_t>();
  const int64_t* d = dst.data_ptr<int64_t>();
  const int64_t* gb = group_bounds.data_ptr<int64_t>();
  const int64_t* gs = group_stream.data_ptr<int64_t>();
  const int64_t* rg = round_groups.data_ptr<int64_t>();
  TORCH_CHECK(gb[0] == 0 && gb[groups] == m, "libra: groups must cover the edges");
  TORCH_CHECK(rounds >= 0 && rg[0] == 0 && rg[rounds] == groups, "libra: rounds must cover the groups");
  uint64_t* held = reinterpret_cast<uint64_t*>(masks.data_ptr<int64_t>());
  int64_t* total = load.data_ptr<int64_t>();
  const int64_t* deg = nullptr;
  if (degree.has_value()) {
    TORCH_CHECK(degree->dtype() == at::kLong && degree->is_contiguous() && degree->numel() == n,
                "libra: degree is one int64 per vertex");
    deg = degree->data_ptr<int64_t>();
  }
  auto out = at::empty({m}, at::dtype(at::kChar));
  int8_t* part = out.data_ptr<int8_t>();

  const int P = static_cast<int>(num_parts);
  const uint64_t all = P == 64 ? ~0ULL : ((1ULL << P) - 1);
  std::vector<uint64_t> delta(n, 0);  // a stream's own new bits per vertex
  std::vector<int64_t> touched;       // vertices with delta bits
  std::vector<std::pair<int64_t, uint64_t>> merged;  // the round's new bits, all streams
  std::vector<int64_t> start(P), own(P), added(P);
  std::vector<double> view(P);
  for (int64_t r = 0; r < rounds; ++r) {
    std::copy(total, total + P, start.begin());
    std::fill(added.begin(), added.end(), 0);
    int64_t before = 0;
    for (int p = 0; p < P; ++p) before += start[p];
    merged.clear();
    for (int64_t g = rg[r]; g < rg[r + 1]; ++g) {
      std::fill(own.begin(), own.end(), 0);
      for (int p = 0; p < P; ++p) view[p] = static_cast<double>(start[p]);
      const int first = static_cast<int>(gs[g] % P);
      int64_t count = 0;
      for (int64_t e = gb[g]; e < gb[g + 1]; ++e) {
        const int64_t u = s[e], v = d[e];
        TORCH_CHECK(u >= 0 && u < n && v >= 0 && v < n, "libra: id out of range");
        const uint64_t hu = held[u] | delta[u], hv = held[v] | delta[v];
        uint64_t candidates = hu & hv;
        if (!candidates && hu && hv && deg != nullptr) candidates = deg[u] < deg[v] ? hu : hv;
        if (!candidates) candidates = hu | hv;
        if (!candidates) candidates = all;
        int p = least_loaded(candidates, view.data(), P, first);
        const double cap = (1.0 + slack) * (before + scale * count) / P + 1.0;
        if (view[p] > cap) p = least_loaded(all, view.data(), P, first);
        part[e] = static_cast<int8_t>(p);
        ++own[p];
        view[p] += scale;
        ++count;
        const uint64_t bit = 1ULL << p;
        if (!(hu & bit)) {
          if (!delta[u]) touched.push_back(u);
          delta[u] |= bit;
        }
        if (!(hv & bit) && u != v) {
          if (!delta[v]) touched.push_back(v);
          delta[v] |= bit;
        }
      }
      for (const int64_t x : touched) {
        merged.emplace_back(x, delta[x]);
        delta[x] = 0;
      }
      touched.clear();
      for (int p = 0; p < P; ++p) added[p] += own[p];
    }
    for (const auto& [x, bits] : merged) held[x] |= bits;
    for (int p = 0; p < P; ++p) total[p] += added[p];
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
      "libra_stream(Tensor src, Tensor dst, Tensor group_bounds, Tensor group_stream, "
      "Tensor round_groups, Tensor(a!) masks, Tensor(b!) load, Tensor? degree, int num_parts, "
      "float slack, float scale) -> Tensor",
      &libra_stream);
  m.def("csr_reverse_edges(Tensor indptr, Tensor indices) -> Tensor", &csr_reverse_edges);
}
