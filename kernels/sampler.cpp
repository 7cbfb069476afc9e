// Uniform neighbour sampling without replacement, and block compaction.
//
// sample_neighbors(indptr, indices, nodes, fanout, seed, layer) -> [offsets, neighbors]
//   Row i of the result lists min(deg(v), fanout) distinct in-neighbours of
//   v = nodes[i] (all of them when fanout < 0 or fanout >= deg), in CSR order,
//   as ids of the graph (int64). The choice for v comes from a counter-based
//   generator keyed by (seed, layer, v) alone, so it does not depend on the
//   thread count, on the other vertices of the batch, or on which process
//   samples v:
//     mix(z)        = splitmix64 finaliser of z + golden
//     key(v)        = mix(mix(mix(seed) + layer) + v)
//     draw(v, i)    = mix(key(v) + i * golden)                  (i = 0, 1, ...)
//     below(r, b)   = ((r >> 32) * b) >> 32                      (uniform in [0, b))
//   and Floyd's algorithm picks k = fanout positions out of d = deg(v):
//     for i in 0..k-1: j = d - k + i; t = below(draw(v, i), j + 1);
//                      add t, or j if t was already taken.
//   The positions are then sorted, so neighbours come in CSR order.
//   gnnrun/ops/sampling.py implements the same in numpy (the test oracle).
//
// compact(dst_nodes, offsets, neighbors) -> [indptr, indices, src_ids]
//   Relabels a sampled layer into a Block: the sources are the destinations
//   first (in order, duplicates kept), then every other neighbour in order of
//   first appearance (destinations in order, each row in order). A concurrent
//   open-addressing table maps an id to the first position at which it occurs
//   (atomic min over the sequence dst_nodes ++ neighbors); the positions that
//   are their id's first occurrence get consecutive local ids (a parallel
//   count and scan), which replace the position in the table; a last pass
//   looks every neighbour up.
//
// Both run on at::get_num_threads() OpenMP threads (torch.set_num_threads).
#include <torch/extension.h>

#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

inline uint64_t mix64(uint64_t z) {
  z += kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

inline uint64_t below(uint64_t r, uint64_t bound) { return ((r >> 32) * bound) >> 32; }

int num_threads_for(int64_t work, int64_t grain) {
  const int64_t nt = at::get_num_threads();
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(nt, work / grain)));
}

// Floyd's sampling of k distinct positions out of [0, d) for one vertex,
// written sorted to `out`. `set` is a scratch open-addressing table (only for
// large k; small k scans `out` itself).
void floyd(uint64_t key, int64_t d, int64_t k, int64_t* out, std::vector<int64_t>& set) {
  const int64_t base = d - k;
  if (k <= 32) {
    for (int64_t i = 0; i < k; ++i) {
      const int64_t j = base + i;
      const int64_t t = static_cast<int64_t>(below(mix64(key + i * kGolden), j + 1));
      bool taken = false;
      for (int64_t q = 0; q < i; ++q) taken |= out[q] == t;
      out[i] = taken ? j : t;
    }
  } else {
    size_t cap = 64;
    while (cap < static_cast<size_t>(2 * k)) cap <<= 1;
    if (set.size() < cap) set.resize(cap);
    std::fill(set.begin(), set.begin() + cap, -1);
    const uint64_t mask = cap - 1;
    auto insert = [&](int64_t x) {  // true when x was new
      uint64_t h = (static_cast<uint64_t>(x) * kGolden) >> 32 & mask;
      while (set[h] != -1) {
        if (set[h] == x) return false;
        h = (h + 1) & mask;
      }
      set[h] = x;
      return true;
    };
    for (int64_t i = 0; i < k; ++i) {
      const int64_t j = base + i;
      const int64_t t = static_cast<int64_t>(below(mix64(key + i * kGolden), j + 1));
      if (insert(t)) {
        out[i] = t;
      } else {
        insert(j);  // j is above every position taken so far: always new
        out[i] = j;
      }
    }
  }
  std::sort(out, out + k);
}

// Fill every row of the result (the offsets are known): copy short rows, sample the others.
template <typename index_t>
void fill_rows(const index_t* idx, const int64_t* ptr, const int64_t* node, int64_t n,
               const int64_t* off, uint64_t seed_key, int64_t* nbr, int threads) {
#pragma omp parallel num_threads(threads)
  {
    std::vector<int64_t> pos;  // chosen positions of one row
    std::vector<int64_t> set;  // Floyd's scratch set for large fanouts
#pragma omp for schedule(dynamic, 256)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = node[i];
      const int64_t start = ptr[v], deg = ptr[v + 1] - start;
      int64_t* out = nbr + off[i];
      const int64_t k = off[i + 1] - off[i];
      if (k == deg) {
        for (int64_t e = 0; e < deg; ++e) out[e] = static_cast<int64_t>(idx[start + e]);
        continue;
      }
      if (static_cast<int64_t>(pos.size()) < k) pos.resize(k);
      floyd(mix64(seed_key + static_cast<uint64_t>(v)), deg, k, pos.data(), set);
      for (int64_t q = 0; q < k; ++q) out[q] = static_cast<int64_t>(idx[start + pos[q]]);
    }
  }
}

}  // namespace

std::vector<torch::Tensor> sample_neighbors(torch::Tensor indptr, torch::Tensor indices,
                                            torch::Tensor nodes, int64_t fanout, int64_t seed,
                                            int64_t layer) {
  TORCH_CHECK(indptr.dim() == 1 && indptr.numel() >= 1, "sample_neighbors: 1-d indptr");
  TORCH_CHECK(indptr.scalar_type() == torch::kInt64, "sample_neighbors: int64 indptr");
  TORCH_CHECK(nodes.dim() == 1 && nodes.scalar_type() == torch::kInt64,
              "sample_neighbors: 1-d int64 nodes");
  TORCH_CHECK(indices.dim() == 1 && (indices.scalar_type() == torch::kInt32 ||
                                     indices.scalar_type() == torch::kInt64),
              "sample_neighbors: 1-d int32 or int64 indices");
  TORCH_CHECK(indptr.device().is_cpu() && indices.device().is_cpu() && nodes.device().is_cpu(),
              "sample_neighbors: CPU tensors only");
  indptr = indptr.contiguous();
  indices = indices.contiguous();
  nodes = nodes.contiguous();
  const int64_t num_graph_nodes = indptr.numel() - 1;
  const int64_t n = nodes.numel();
  const int64_t* ptr = indptr.data_ptr<int64_t>();
  const int64_t* node = nodes.data_ptr<int64_t>();
  TORCH_CHECK(ptr[0] == 0 && ptr[num_graph_nodes] == indices.numel(),
              "sample_neighbors: indptr does not span indices");

  auto offsets_t = torch::empty({n + 1}, torch::dtype(torch::kInt64));
  int64_t* off = offsets_t.data_ptr<int64_t>();
  off[0] = 0;
  int64_t bad = 0;
  const int count_threads = num_threads_for(n, 4096);
#pragma omp parallel for num_threads(count_threads) schedule(static) reduction(+ : bad)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = node[i];
    if (v < 0 || v >= num_graph_nodes) {
      ++bad;
      off[i + 1] = 0;
      continue;
    }
    const int64_t deg = ptr[v + 1] - ptr[v];
    off[i + 1] = (fanout < 0 || deg <= fanout) ? deg : fanout;
    if (off[i + 1] < deg && deg > (int64_t{1} << 32)) ++bad;  // below() needs 32-bit bounds
  }
  TORCH_CHECK(bad == 0, "sample_neighbors: node id outside [0, ", num_graph_nodes,
              "), or a degree above 2^32 to sample from");
  for (int64_t i = 0; i < n; ++i) off[i + 1] += off[i];
  const int64_t total = off[n];

  auto neighbors_t = torch::empty({total}, torch::dtype(torch::kInt64));
  int64_t* nbr = neighbors_t.data_ptr<int64_t>();
  const uint64_t seed_key = mix64(mix64(static_cast<uint64_t>(seed)) + static_cast<uint64_t>(layer));
  const int fill_threads = num_threads_for(total, 8192);

  if (indices.scalar_type() == torch::kInt32) {
    fill_rows(indices.data_ptr<int32_t>(), ptr, node, n, off, seed_key, nbr, fill_threads);
  } else {
    fill_rows(indices.data_ptr<int64_t>(), ptr, node, n, off, seed_key, nbr, fill_threads);
  }
  return {offsets_t, neighbors_t};
}

namespace {

struct Slot {
  int64_t key;  // -1: empty
  int64_t val;  // first position of key, then ~(its local id)
};

inline uint64_t slot_hash(int64_t key, int shift) {
  return (static_cast<uint64_t>(key) * kGolden) >> shift;  // the top bits of a Fibonacci hash
}

// The slot of `key`, inserting it when absent (lock-free: CAS on the key).
inline uint64_t insert(Slot* table, uint64_t mask, int shift, int64_t key) {
  uint64_t h = slot_hash(key, shift);
  while (true) {
    int64_t k = __atomic_load_n(&table[h].key, __ATOMIC_RELAXED);
    if (k == key) return h;
    if (k == -1) {
      if (__atomic_compare_exchange_n(&table[h].key, &k, key, false, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED) ||
          k == key)
        return h;
    }
    h = (h + 1) & mask;
  }
}

inline uint64_t find(const Slot* table, uint64_t mask, int shift, int64_t key) {
  uint64_t h = slot_hash(key, shift);
  while (table[h].key != key) h = (h + 1) & mask;
  return h;
}

inline void atomic_min(int64_t* target, int64_t value) {
  int64_t cur = __atomic_load_n(target, __ATOMIC_RELAXED);
  while (value < cur && !__atomic_compare_exchange_n(target, &cur, value, true, __ATOMIC_RELAXED,
                                                     __ATOMIC_RELAXED)) {
  }
}

}  // namespace

std::vector<torch::Tensor> compact(torch::Tensor dst_nodes, torch::Tensor offsets,
                                   torch::Tensor neighbors) {
  TORCH_CHECK(dst_nodes.dim() == 1 && dst_nodes.scalar_type() == torch::kInt64,
              "compact: 1-d int64 dst_nodes");
  TORCH_CHECK(offsets.dim() == 1 && offsets.scalar_type() == torch::kInt64,
              "compact: 1-d int64 offsets");
  TORCH_CHECK(neighbors.dim() == 1 && neighbors.scalar_type() == torch::kInt64,
              "compact: 1-d int64 neighbors");
  TORCH_CHECK(dst_nodes.device().is_cpu() && offsets.device().is_cpu() &&
                  neighbors.device().is_cpu(),
              "compact: CPU tensors only");
  dst_nodes = dst_nodes.contiguous();
  offsets = offsets.contiguous();
  neighbors = neighbors.contiguous();
  const int64_t n_dst = dst_nodes.numel();
  const int64_t n_edges = neighbors.numel();
  TORCH_CHECK(offsets.numel() == n_dst + 1, "compact: offsets must have len(dst_nodes) + 1 entries");
  TORCH_CHECK(offsets.data_ptr<int64_t>()[0] == 0 &&
                  offsets.data_ptr<int64_t>()[n_dst] == n_edges,
              "compact: offsets do not span neighbors");
  const int64_t total = n_dst + n_edges;
  const int64_t* dst = dst_nodes.data_ptr<int64_t>();
  const int64_t* nbr = neighbors.data_ptr<int64_t>();
  auto key_at = [&](int64_t p) { return p < n_dst ? dst[p] : nbr[p - n_dst]; };

  uint64_t cap = 16;
  int bits = 4;
  while (cap < static_cast<uint64_t>(total + total / 2)) cap <<= 1, ++bits;
  const uint64_t mask = cap - 1;
  const int shift = 64 - bits;
  // Raw storage from torch's allocator: no serial zeroing of a std::vector.
  auto table_t = torch::empty({static_cast<int64_t>(2 * cap)}, torch::dtype(torch::kInt64));
  Slot* table = reinterpret_cast<Slot*>(table_t.data_ptr<int64_t>());

  auto indices_t = torch::empty({n_edges}, torch::dtype(torch::kInt64));
  int64_t* out = indices_t.data_ptr<int64_t>();

  const int nt = num_threads_for(total, 16384);
  std::vector<int64_t> chunk_count(nt + 1, 0);
  int64_t bad = 0;
  torch::Tensor src_ids_t;
  int64_t* src_ids = nullptr;

#pragma omp parallel num_threads(nt) reduction(+ : bad)
  {
#pragma omp for schedule(static)
    for (int64_t h = 0; h < static_cast<int64_t>(cap); ++h) {
      table[h].key = -1;
      table[h].val = std::numeric_limits<int64_t>::max();
    }
    // 1. every id -> the first position it occurs at.
#pragma omp for schedule(static)
    for (int64_t p = 0; p < total; ++p) {
      const int64_t key = key_at(p);
      if (key < 0) {
        ++bad;
        continue;
      }
      atomic_min(&table[insert(table, mask, shift, key)].val, p);
    }
    // 2. count the first occurrences among the neighbours, per thread chunk.
    const int t = omp_get_thread_num(), team = omp_get_num_threads();  // team <= nt
    const int64_t lo = n_edges * t / team, hi = n_edges * (t + 1) / team;
    int64_t fresh = 0;
    if (bad == 0) {  // (this thread's view; a bad id is reported after the region)
      for (int64_t e = lo; e < hi; ++e) {
        const int64_t key = nbr[e];
        if (key >= 0) fresh += table[find(table, mask, shift, key)].val == n_dst + e;
      }
    }
    chunk_count[t + 1] = fresh;
#pragma omp barrier
#pragma omp single
    {
      for (int i = 0; i < team; ++i) chunk_count[i + 1] += chunk_count[i];
      src_ids_t = torch::empty({n_dst + chunk_count[team]}, torch::dtype(torch::kInt64));
      src_ids = src_ids_t.data_ptr<int64_t>();
    }  // implicit barrier
    // 3. local ids: destinations keep their position, new neighbours follow in order.
    //    A slot's val becomes ~local (negative), never equal to another position.
#pragma omp for schedule(static)
    for (int64_t p = 0; p < n_dst; ++p) {
      src_ids[p] = dst[p];
      if (dst[p] < 0) continue;
      int64_t* val = &table[find(table, mask, shift, dst[p])].val;
      if (__atomic_load_n(val, __ATOMIC_RELAXED) == p) __atomic_store_n(val, ~p, __ATOMIC_RELAXED);
    }  // no barrier needed: the destination and neighbour owners are different slots
    int64_t next = n_dst + chunk_count[t];
    for (int64_t e = lo; e < hi && bad == 0; ++e) {
      const int64_t key = nbr[e];
      if (key < 0) continue;
      int64_t* val = &table[find(table, mask, shift, key)].val;
      if (__atomic_load_n(val, __ATOMIC_RELAXED) == n_dst + e) {
        src_ids[next] = key;
        __atomic_store_n(val, ~next, __ATOMIC_RELAXED);
        ++next;
      }
    }
#pragma omp barrier
    // 4. every neighbour's local id.
#pragma omp for schedule(static)
    for (int64_t e = 0; e < n_edges; ++e) {
      const int64_t key = nbr[e];
      out[e] = key < 0 ? -1 : ~__atomic_load_n(&table[find(table, mask, shift, key)].val, __ATOMIC_RELAXED);
    }
  }
  TORCH_CHECK(bad == 0, "compact: negative id");
  return {offsets, indices_t, src_ids_t};
}

TORCH_LIBRARY_FRAGMENT(gnnrun, m) {
  m.def(
      "sample_neighbors(Tensor indptr, Tensor indices, Tensor nodes, int fanout, int seed, "
      "int layer) -> Tensor[]",
      &sample_neighbors);
  m.def("compact(Tensor dst_nodes, Tensor offsets, Tensor neighbors) -> Tensor[]", &compact);
}
