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
//   first appearance (destinations in order, each row in order); `indptr` is
//   `offsets`. While the largest id is small (below 2^24, or 8 x the input
//   size) a dense id -> local id array does it in one branch-free pass on one
//   thread (compact_dense); otherwise ids are split between the threads by a
//   hash, each thread keeping its own ids in its own part of an open-addressing
//   table (no atomics; see the comment above compact()).
//
// Both run on at::get_num_threads() OpenMP threads (torch.set_num_threads);
// small inputs run on one. Scratch buffers (the dense map, the hash table,
// per-thread lists) are kept per calling thread between calls, sized by the
// largest call (the dense map: 4 bytes per id up to the largest id seen).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <ATen/Parallel.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
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
// written sorted to `out`. Small k keeps `out` sorted as it goes (insertion);
// large k tracks the picks in `set`, a scratch open-addressing table, and sorts.
void floyd(uint64_t key, int64_t d, int64_t k, int64_t* out, std::vector<int64_t>& set) {
  const int64_t base = d - k;
  if (k <= 32) {  // keep out[0, i) sorted: j, above every pick so far, goes last
    for (int64_t i = 0; i < k; ++i) {
      const int64_t j = base + i;
      const int64_t t = static_cast<int64_t>(below(mix64(key + i * kGolden), j + 1));
      int64_t q = i;
      while (q > 0 && out[q - 1] > t) --q;
      if (q > 0 && out[q - 1] == t) {
        out[i] = j;
      } else {
        for (int64_t r = i; r > q; --r) out[r] = out[r - 1];
        out[q] = t;
      }
    }
    return;
  }
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
  std::sort(out, out + k);
}

// Fill every row of the result (offsets, row starts and degrees are known):
// copy short rows, sample the others. Rows go in blocks of kBlock: first the
// positions of every row of the block are drawn and their entries of
// `indices` prefetched (rows are scattered over a large array, and a sampled
// row's picks over many cache lines), then the block is gathered.
constexpr int64_t kAhead = 8;
constexpr int64_t kBlock = 32;

template <typename index_t>
void fill_rows(const index_t* idx, const int64_t* start, const int64_t* degree, const int64_t* node,
               const int64_t* off, int64_t n, uint64_t seed_key, int64_t* nbr, int threads) {
  const int64_t num_blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel num_threads(threads)
  {
    std::vector<int64_t> pos;  // chosen positions of the block's sampled rows
    std::vector<int64_t> set;  // Floyd's scratch set for large fanouts
#pragma omp for schedule(dynamic, 8)
    for (int64_t b = 0; b < num_blocks; ++b) {
      const int64_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
      int64_t need = 0;
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t k = off[i + 1] - off[i];
        if (k != degree[i]) need += k;
      }
      if (static_cast<int64_t>(pos.size()) < need) pos.resize(need);
      int64_t* cursor = pos.data();
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t k = off[i + 1] - off[i];
        const index_t* row = idx + start[i];
        if (k == degree[i]) {
          const int64_t lines = std::min<int64_t>(k, 8 * 64 / sizeof(index_t));
          for (int64_t q = 0; q < lines; q += 64 / sizeof(index_t)) __builtin_prefetch(row + q);
          continue;
        }
        floyd(mix64(seed_key + static_cast<uint64_t>(node[i])), degree[i], k, cursor, set);
        for (int64_t q = 0; q < k; ++q) __builtin_prefetch(row + cursor[q]);
        cursor += k;
      }
      cursor = pos.data();
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t k = off[i + 1] - off[i];
        const index_t* row = idx + start[i];
        int64_t* out = nbr + off[i];
        if (k == degree[i]) {
          for (int64_t e = 0; e < k; ++e) out[e] = static_cast<int64_t>(row[e]);
          continue;
        }
        for (int64_t q = 0; q < k; ++q) out[q] = static_cast<int64_t>(row[cursor[q]]);
        cursor += k;
      }
    }
  }
}

}  // namespace

std::vector<at::Tensor> sample_neighbors(at::Tensor indptr, at::Tensor indices,
                                            at::Tensor nodes, int64_t fanout, int64_t seed,
                                            int64_t layer) {
  TORCH_CHECK(indptr.dim() == 1 && indptr.numel() >= 1, "sample_neighbors: 1-d indptr");
  TORCH_CHECK(indptr.scalar_type() == at::kLong, "sample_neighbors: int64 indptr");
  TORCH_CHECK(nodes.dim() == 1 && nodes.scalar_type() == at::kLong,
              "sample_neighbors: 1-d int64 nodes");
  TORCH_CHECK(indices.dim() == 1 && (indices.scalar_type() == at::kInt ||
                                     indices.scalar_type() == at::kLong),
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

  auto offsets_t = at::empty({n + 1}, at::dtype(at::kLong));
  int64_t* off = offsets_t.data_ptr<int64_t>();
  off[0] = 0;
  // Scratch kept per calling thread: fresh large buffers cost page faults and zeroing.
  static thread_local std::vector<int64_t> start_buf, degree_buf;
  if (start_buf.size() < static_cast<size_t>(n)) start_buf.resize(n), degree_buf.resize(n);
  int64_t* start = start_buf.data();
  int64_t* degree = degree_buf.data();
  int64_t bad = 0;
  const int count_threads = num_threads_for(n, 4096);
#pragma omp parallel for num_threads(count_threads) schedule(static) reduction(+ : bad)
  for (int64_t i = 0; i < n; ++i) {
    if (i + 2 * kAhead < n) {
      const int64_t ahead = node[i + 2 * kAhead];
      if (ahead >= 0 && ahead < num_graph_nodes) __builtin_prefetch(ptr + ahead);
    }
    const int64_t v = node[i];
    if (v < 0 || v >= num_graph_nodes) {
      ++bad;
      start[i] = degree[i] = off[i + 1] = 0;
      continue;
    }
    const int64_t deg = ptr[v + 1] - ptr[v];
    start[i] = ptr[v];
    degree[i] = deg;
    off[i + 1] = (fanout < 0 || deg <= fanout) ? deg : fanout;
    if (off[i + 1] < deg && deg > (int64_t{1} << 32)) ++bad;  // below() needs 32-bit bounds
  }
  TORCH_CHECK(bad == 0, "sample_neighbors: node id outside [0, ", num_graph_nodes,
              "), or a degree above 2^32 to sample from");
  for (int64_t i = 0; i < n; ++i) off[i + 1] += off[i];
  const int64_t total = off[n];

  auto neighbors_t = at::empty({total}, at::dtype(at::kLong));
  int64_t* nbr = neighbors_t.data_ptr<int64_t>();
  const uint64_t seed_key = mix64(mix64(static_cast<uint64_t>(seed)) + static_cast<uint64_t>(layer));
  const int fill_threads = num_threads_for(total, 8192);
  if (indices.scalar_type() == at::kInt) {  // (AT_DISPATCH would put the pragmas in a macro)
    fill_rows(indices.data_ptr<int32_t>(), start, degree, node, off, n, seed_key, nbr,
              fill_threads);
  } else {
    fill_rows(indices.data_ptr<int64_t>(), start, degree, node, off, n, seed_key, nbr,
              fill_threads);
  }
  return {offsets_t, neighbors_t};
}

namespace {

struct Slot {
  int64_t key;  // -1: empty
  int64_t val;  // ~(local id) of a destination, or the owner's rank of a new neighbour
};

inline uint64_t fmix64(uint64_t k) {  // murmur3's finaliser
  k ^= k >> 33;
  k *= 0xFF51AFD7ED558CCDULL;
  k ^= k >> 33;
  k *= 0xC4CEB9FE1A85EC53ULL;
  return k ^ (k >> 33);
}

inline int owner_of(uint64_t h, int team) {
  return static_cast<int>(((h >> 32) * static_cast<uint64_t>(team)) >> 32);
}

// The slot of `key` in one thread's region (only that thread touches it).
inline Slot* upsert(Slot* slots, uint64_t mask, uint64_t h, int64_t key, bool& fresh) {
  uint64_t i = h & mask;
  while (true) {
    Slot& s = slots[i];
    if (s.key == key) {
      fresh = false;
      return &s;
    }
    if (s.key == -1) {
      s.key = key;
      fresh = true;
      return &s;
    }
    i = (i + 1) & mask;
  }
}

// A thread's lists, a cache line apart from the next thread's (their ends move
// with every push_back).
struct alignas(64) Lists {
  std::vector<int64_t> res, first, local;
};

// Calls visit(j, key, hash) for the j in [lo, hi), in order, whose key thread
// t owns. Keys go in batches: a branch-free pass hashes a batch and lists the
// owned ones (an owner test per key would be a coin-flip branch on two
// threads), records every key's owner in owner_out (when given), and counts
// negative keys in `bad` (they belong to nobody); then the owned keys are
// visited with the home slot of the one kDist places ahead prefetched: the
// table is larger than the caches.
constexpr int64_t kDist = 32;
constexpr int kNobody = 255;

template <typename Visit>
inline void scan_owned(const int64_t* keys, int64_t lo, int64_t hi, const Slot* slots,
                       uint64_t mask, int team, int t, uint8_t* owner_out, int64_t& bad,
                       Visit&& visit) {
  constexpr int64_t kBatch = 512;
  int64_t at[kBatch];
  uint64_t hash[kBatch];
  for (int64_t b = lo; b < hi; b += kBatch) {
    const int64_t end = std::min(hi, b + kBatch);
    int64_t m = 0;
    for (int64_t j = b; j < end; ++j) {
      const int64_t key = keys[j];
      const uint64_t h = fmix64(static_cast<uint64_t>(key));
      const int u = key < 0 ? kNobody : owner_of(h, team);
      bad += key < 0;
      if (owner_out != nullptr) owner_out[j] = static_cast<uint8_t>(u);
      at[m] = j;
      hash[m] = h;
      m += u == t;
    }
    for (int64_t i = 0; i < std::min(m, kDist); ++i) __builtin_prefetch(slots + (hash[i] & mask));
    for (int64_t i = 0; i < m; ++i) {
      if (i + kDist < m) __builtin_prefetch(slots + (hash[i + kDist] & mask));
      if (!visit(at[i], keys[at[i]], hash[i])) return;
    }
  }
}

}  // namespace

// Compaction through a dense id -> local id array (int32, -1 = unseen), used
// when the ids are small enough for one: one branch-free pass, one random
// access per id into a few MB, no hashing or probing. The array is restored to
// all -1 afterwards (only the entries touched), so it is kept between calls.
// Single-threaded: on two threads it is still faster than the hash-partitioned
// compaction, whose merge and read-back passes cost what the split saves.
at::Tensor compact_dense(const int64_t* dst, int64_t n_dst, const int64_t* nbr,
                            int64_t n_edges, int64_t max_id, int64_t* out) {
  static thread_local std::vector<int32_t> dense;
  static thread_local std::vector<int64_t> fresh;
  if (dense.size() < static_cast<size_t>(max_id + 1)) dense.resize(max_id + 1, -1);
  if (fresh.size() < static_cast<size_t>(n_edges)) fresh.resize(n_edges);
  int32_t* map = dense.data();
  int64_t* added = fresh.data();
  for (int64_t p = 0; p < n_dst; ++p) {
    if (p + kDist < n_dst) __builtin_prefetch(map + dst[p + kDist]);
    int32_t& slot = map[dst[p]];
    if (slot < 0) slot = static_cast<int32_t>(p);  // a repeated destination keeps its first place
  }
  int64_t next = n_dst, count = 0;
  for (int64_t e = 0; e < n_edges; ++e) {
    if (e + kDist < n_edges) __builtin_prefetch(map + nbr[e + kDist]);
    const int64_t key = nbr[e];
    const int32_t seen = map[key];
    const bool is_new = seen < 0;
    const int32_t id = is_new ? static_cast<int32_t>(next) : seen;
    map[key] = id;
    added[count] = key;
    count += is_new;
    next += is_new;
    out[e] = id;
  }
  auto src_ids_t = at::empty({n_dst + count}, at::dtype(at::kLong));
  int64_t* src_ids = src_ids_t.data_ptr<int64_t>();
  std::copy(dst, dst + n_dst, src_ids);
  std::copy(added, added + count, src_ids + n_dst);
  for (int64_t p = 0; p < n_dst + count; ++p) map[src_ids[p]] = -1;
  return src_ids_t;
}

// Compaction, parallel without atomics. Every id belongs to one thread (by a
// hash of it), which alone keeps it in its region of the table. Each thread
// scans the whole sequence dst_nodes ++ neighbors, in order, and handles its
// own ids only: a destination's slot holds ~position (its local id); a
// neighbour new to the table gets the next rank among this thread's new
// neighbours, and every neighbour occurrence appends its slot value to the
// thread's `res` list (in position order). The local id of a new neighbour is
// num_dst + the number of new neighbours, of all threads, before it (a merge
// of the threads' sorted lists of first positions); each thread rewrites its
// `res` into local ids. A last pass, split by position, reads each
// neighbour's local id from its owner's `res` (owners recorded during the
// scan, cursors per chunk). Each id costs one random access to the table,
// whatever the thread count; the rest is sequential.
std::vector<at::Tensor> compact(at::Tensor dst_nodes, at::Tensor offsets,
                                   at::Tensor neighbors) {
  TORCH_CHECK(dst_nodes.dim() == 1 && dst_nodes.scalar_type() == at::kLong,
              "compact: 1-d int64 dst_nodes");
  TORCH_CHECK(offsets.dim() == 1 && offsets.scalar_type() == at::kLong,
              "compact: 1-d int64 offsets");
  TORCH_CHECK(neighbors.dim() == 1 && neighbors.scalar_type() == at::kLong,
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
  int64_t lowest = 0, highest = -1;
  for (int64_t p = 0; p < n_dst; ++p) {
    lowest = std::min(lowest, dst[p]);
    highest = std::max(highest, dst[p]);
  }
  for (int64_t e = 0; e < n_edges; ++e) {
    lowest = std::min(lowest, nbr[e]);
    highest = std::max(highest, nbr[e]);
  }
  TORCH_CHECK(lowest >= 0, "compact: negative id");
  // A dense map of 4 bytes per id while that stays modest (at most 64 MB, or
  // 32 bytes per input id, about what a hash table takes).
  if (total < (int64_t{1} << 31) && highest < std::max<int64_t>(int64_t{1} << 24, 8 * total)) {
    auto indices_t = at::empty({n_edges}, at::dtype(at::kLong));
    auto src_ids_t =
        compact_dense(dst, n_dst, nbr, n_edges, highest, indices_t.data_ptr<int64_t>());
    return {offsets, indices_t, src_ids_t};
  }
  const int nt = std::min(num_threads_for(total, 32768), 255);

  auto indices_t = at::empty({n_edges}, at::dtype(at::kLong));
  int64_t* out = indices_t.data_ptr<int64_t>();
  at::Tensor src_ids_t;
  // Scratch kept per calling thread (fresh buffers of this size cost page faults
  // and zeroing on every call): the table, per-thread lists, owners of positions.
  struct Scratch {
    std::unique_ptr<Slot[], void (*)(Slot*)> table{nullptr, [](Slot* p) { std::free(p); }};
    size_t table_size = 0;
    std::vector<Lists> lists;  // one per thread
    std::vector<uint8_t> owner;
  };
  static thread_local Scratch calling_thread_scratch;
  Scratch& scratch = calling_thread_scratch;  // (named inside the parallel region, the
                                              // thread_local would be each worker's own)
  if (scratch.lists.size() < static_cast<size_t>(nt)) scratch.lists.resize(nt);
  if (nt > 1 && scratch.owner.size() < static_cast<size_t>(n_edges)) scratch.owner.resize(n_edges);
  uint8_t* owner = scratch.owner.data();
  Lists* lists = scratch.lists.data();

  // A region holds at most 3/4 of its slots; if hashing gave one thread more
  // ids than that (small or adversarial inputs), start again with more room.
  for (int64_t room = (total + total / 2) / nt + 64;; room *= 2) {
    uint64_t cap = 64;
    while (cap < static_cast<uint64_t>(room)) cap <<= 1;
    const uint64_t mask = cap - 1;
    const int64_t limit = static_cast<int64_t>(cap - cap / 4);
    if (scratch.table_size < cap * nt) {
      // Random probes into a table of many MB: ask for 2 MB pages (fewer TLB misses).
      constexpr size_t kHuge = size_t{2} << 20;
      const size_t bytes = (cap * nt * sizeof(Slot) + kHuge - 1) / kHuge * kHuge;
      scratch.table.reset();
      void* memory = std::aligned_alloc(kHuge, bytes);
      TORCH_CHECK(memory != nullptr, "compact: out of memory");
#ifdef MADV_HUGEPAGE
      madvise(memory, bytes, MADV_HUGEPAGE);  // advice only: fine if refused
#endif
      scratch.table.reset(static_cast<Slot*>(memory));
      scratch.table_size = bytes / sizeof(Slot);
    }
    Slot* table = scratch.table.get();
    std::vector<int64_t> cursor(static_cast<size_t>(nt) * nt, 0);  // [owner][chunk]
    int overflow = 0;
    int64_t bad = 0;
    int64_t* src_ids = nullptr;

#pragma omp parallel num_threads(nt) reduction(+ : bad)
    {
      const int t = omp_get_thread_num(), team = omp_get_num_threads();  // team <= nt
      Slot* slots = table + cap * t;
      for (uint64_t i = 0; i < cap; ++i) slots[i].key = -1;
      std::vector<int64_t>& my_res = lists[t].res;
      std::vector<int64_t>& my_first = lists[t].first;
      my_res.clear();
      my_first.clear();
      my_res.reserve(n_edges / team + n_edges / (4 * team) + 16);
      bool fresh;
      int64_t owned = 0;  // ids in this region
      scan_owned(dst, 0, n_dst, slots, mask, team, t, nullptr, bad,
                 [&](int64_t p, int64_t key, uint64_t h) {
                   Slot* slot = upsert(slots, mask, h, key, fresh);
                   if (!fresh) return true;  // a repeated destination maps to its first place
                   slot->val = ~p;
                   if (++owned <= limit) return true;
                   __atomic_store_n(&overflow, 1, __ATOMIC_RELAXED);
                   return false;
                 });
      for (int s = 0; s < team && !__atomic_load_n(&overflow, __ATOMIC_RELAXED); ++s) {
        cursor[static_cast<size_t>(t) * team + s] = static_cast<int64_t>(my_res.size());
        const int64_t lo = n_edges * s / team, hi = n_edges * (s + 1) / team;
        // record the owners of the chunk this thread writes in the final pass
        uint8_t* owners = s == t && team > 1 ? owner : nullptr;
        scan_owned(nbr, lo, hi, slots, mask, team, t, owners, bad,
                   [&](int64_t e, int64_t key, uint64_t h) {
                     Slot* slot = upsert(slots, mask, h, key, fresh);
                     if (fresh) {
                       slot->val = static_cast<int64_t>(my_first.size());
                       my_first.push_back(e);
                       if (++owned > limit) {
                         __atomic_store_n(&overflow, 1, __ATOMIC_RELAXED);
                         return false;
                       }
                     }
                     my_res.push_back(slot->val);
                     return true;
                   });
      }
#pragma omp barrier
      if (!__atomic_load_n(&overflow, __ATOMIC_RELAXED)) {
#pragma omp single
        {
          int64_t fresh_total = 0;
          for (int u = 0; u < team; ++u) fresh_total += static_cast<int64_t>(lists[u].first.size());
          src_ids_t = at::empty({n_dst + fresh_total}, at::dtype(at::kLong));
          src_ids = src_ids_t.data_ptr<int64_t>();
        }  // implicit barrier
        if (team == 1) {  // ranks are local ids - num_dst: write the result directly
          for (size_t i = 0; i < my_first.size(); ++i) src_ids[n_dst + i] = nbr[my_first[i]];
          for (size_t j = 0; j < my_res.size(); ++j) {
            const int64_t v = my_res[j];
            out[j] = v < 0 ? ~v : n_dst + v;
          }
        } else {
          // Local ids of this thread's new neighbours: merge-count against the others.
          std::vector<int64_t>& local = lists[t].local;
          local.resize(my_first.size());
          if (team == 2) {  // a branch-free merge walk (the positions of two lists differ)
            const int64_t* mine = my_first.data();
            const int64_t* other = lists[1 - t].first.data();
            const size_t na = my_first.size(), nb = lists[1 - t].first.size();
            size_t i = 0, j = 0;
            while (i < na && j < nb) {
              const bool take = mine[i] < other[j];
              local[i] = n_dst + static_cast<int64_t>(i + j);  // final once mine[i] is taken
              i += take;
              j += !take;
            }
            for (; i < na; ++i) local[i] = n_dst + static_cast<int64_t>(i + nb);
          }
          std::vector<size_t> at(team, 0);
          for (size_t i = 0; i < my_first.size() && team > 2; ++i) {
            const int64_t e = my_first[i];
            int64_t before = static_cast<int64_t>(i);
            for (int u = 0; u < team; ++u) {
              if (u == t) continue;
              const std::vector<int64_t>& other = lists[u].first;
              while (at[u] < other.size() && other[at[u]] < e) ++at[u];
              before += static_cast<int64_t>(at[u]);
            }
            local[i] = n_dst + before;
          }
          const size_t m = my_res.size();
          int64_t* r = my_res.data();
          for (size_t j = 0; j < m; ++j) {
            if (j + kDist < m && r[j + kDist] >= 0) __builtin_prefetch(local.data() + r[j + kDist]);
            r[j] = r[j] < 0 ? ~r[j] : local[r[j]];
          }
        }
#pragma omp for schedule(static)
        for (int64_t p = 0; p < n_dst; ++p) src_ids[p] = dst[p];
        // implicit barrier: every thread's res holds local ids
        if (team > 1) {
          // Read every neighbour's id back from its owner. Ids grow with first
          // positions, so the new neighbours of this chunk are exactly the
          // occurrences of the next unused id: this chunk writes its own,
          // contiguous, range of src_ids.
          const int64_t lo = n_edges * t / team, hi = n_edges * (t + 1) / team;
          std::vector<const int64_t*> cur(team);
          int64_t next = n_dst;
          for (int u = 0; u < team; ++u) {
            cur[u] = lists[u].res.data() + cursor[static_cast<size_t>(u) * team + t];
            const std::vector<int64_t>& f = lists[u].first;
            next += std::lower_bound(f.begin(), f.end(), lo) - f.begin();
          }
          for (int64_t e = lo; e < hi; ++e) {
            const int64_t key = nbr[e];
            if (key < 0) {
              out[e] = -1;
              continue;
            }
            const int64_t id = *cur[owner[e]]++;
            out[e] = id;
            if (id == next) src_ids[next++] = key;
          }
        }
      }
    }
    TORCH_CHECK(bad == 0, "compact: negative id");
    if (!overflow) break;
  }
  return {offsets, indices_t, src_ids_t};
}

TORCH_LIBRARY_FRAGMENT(gnnrun, m) {
  m.def(
      "sample_neighbors(Tensor indptr, Tensor indices, Tensor nodes, int fanout, int seed, "
      "int layer) -> Tensor[]",
      &sample_neighbors);
  m.def("compact(Tensor dst_nodes, Tensor offsets, Tensor neighbors) -> Tensor[]", &compact);
}
