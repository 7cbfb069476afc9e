// Sum / mean aggregation over a bipartite in-CSR (DistGNN section 4), and its transpose.
//
// out[v] = sum over e in row v of x[indices[e]] (mean: divided by the row's
// length; an empty row gives 0). The same sweep also serves the scaled sum
// (a factor per source row: mean's gradient) and GCN's normalised propagation
// (a factor per source, a self term, a factor per row: see finish_row).
// float32 rows of 16 to 256 columns are summed in registers, one sweep, and
// stored once (aggregate_rows_in_registers), and so are bfloat16 rows of that
// width, in float32, rounded to bfloat16 when stored: half the bytes to gather,
// and the float32 run's result rounded once; other rows wider
// than 512 bytes go in column tiles, one sweep each (aggregate_kernel); x rows
// of the edges ahead are prefetched. Destination rows are shared among the threads
// with a dynamic schedule (power-law rows differ in length by orders of
// magnitude); each thread owns its output rows, so there are no write races.
//
// Cache blocking (section 4.2): when the source rows that the graph gathers do
// not fit in the last-level cache and rows are long enough to reuse them, the
// sources are cut into blocks of `block_rows` vertices and the CSR is swept once
// per block, so that every x row a block touches is fetched from memory once
// and then served from cache to all threads. Instead of building one CSR per
// block, a per-row cursor remembers where the previous sweep stopped: with rows
// sorted by source id (as gnnrun's datasets store them), the edges of a row that
// fall into block b are the run starting at the cursor. The last sweep takes
// everything left, so the result is exact for unsorted rows too (they only lose
// locality).
//
// Large x and outputs live in transparent huge pages (see empty_maybe_huge):
// x is copied there first when the graph gathers each source row often enough
// (kMinEdgesPerSourceToStage), which costs one streaming pass and saves a TLB
// miss on almost every gathered row; the output avoids a 4 KiB page fault per
// 4 KiB. Sampled minibatch blocks (1-2 edges per source row) skip the copy.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>
#include <torch/library.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <vector>

namespace gnnrun {
namespace {

constexpr int64_t kRowChunk = 64;         // destination rows per dynamic-schedule chunk
// Software prefetch of the x rows of edges ahead, into L2 (not L1: a whole row
// per edge exhausts L1's fill buffers; into L2 it measured 1.3x faster at width
// 128 on a 2-core Xeon, AVX-512 build). The distance is in bytes of rows ahead,
// 4 to 32 edges: 32 for a full 512-byte column tile.
constexpr int64_t kPrefetchBytes = 16 << 10;
constexpr int64_t kTileBytes = 512;        // columns per sweep (see aggregate_kernel)
// Blocking pays when a sweep does at least this many edges per destination row
// on average (each sweep re-reads and re-writes the partial output rows).
constexpr double kMinEdgesPerRowPerSweep = 12.0;

int64_t cache_bytes(int level, int64_t fallback) {
  for (int index = 0; index < 8; ++index) {
    char path[96];
    std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", index);
    FILE* f = std::fopen(path, "r");
    if (!f) break;
    int found = 0;
    const bool ok = std::fscanf(f, "%d", &found) == 1;
    std::fclose(f);
    if (!ok || found != level) continue;
    std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
    f = std::fopen(path, "r");
    if (!f) break;
    long long size = 0;
    char unit = 'K';
    const int got = std::fscanf(f, "%lld%c", &size, &unit);
    std::fclose(f);
    if (got >= 1 && size > 0) {
      if (unit == 'M') return size << 20;
      if (unit == 'K') return size << 10;
      return size;
    }
  }
  return fallback;
}

// Random row gathers from a large x miss the TLB on almost every edge with 4 KiB
// pages (1M x 128 floats span 131k pages); with 2 MiB pages the whole of x fits
// in the TLB's reach, which measured about 1.7x faster here. Tensors above this
// size are therefore staged into (and outputs allocated in) transparent huge
// pages, unless THP is off or torch already allocates huge pages
// (THP_MEM_ALLOC_ENABLE=1).
constexpr int64_t kHugePageBytes = int64_t(2) << 20;
constexpr int64_t kHugeMinBytes = int64_t(32) << 20;
// Staging x pays only when every x row is gathered several times: on a sampled
// 3-layer minibatch (1.2-1.5 edges per source row) the copy doubled the forward
// time (104 -> 56 ms, 63 -> 25 ms without it), and uniformly random blocks with
// 2-16 edges per source row were no faster staged; the full 25-edge-per-row
// graph still gains from it.
constexpr int64_t kMinEdgesPerSourceToStage = 8;

bool huge_pages_usable() {
  static const bool usable = [] {
    const char* env = std::getenv("THP_MEM_ALLOC_ENABLE");
    if (env && std::strcmp(env, "0") != 0 && *env) return false;  // torch does it already
    FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char buf[128] = {0};
    const size_t got = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    return got > 0 && std::strstr(buf, "[never]") == nullptr;
  }();
  return usable;
}

// An uninitialised tensor, in transparent huge pages when it is large enough. Where
// another CPU allocator than torch's default is installed (gnnrun's block cache, which
// asks for huge pages and keeps freed blocks for reuse), it comes from that one.
at::Tensor empty_maybe_huge(at::IntArrayRef sizes, const at::TensorOptions& options) {
  if (c10::GetCPUAllocator() != c10::GetDefaultCPUAllocator()) return at::empty(sizes, options);
  int64_t numel = 1;
  for (const int64_t s : sizes) numel *= s;
  const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(options.dtype().toScalarType()));
  if (bytes < kHugeMinBytes || !huge_pages_usable()) return at::empty(sizes, options);
  const size_t length = static_cast<size_t>((bytes + kHugePageBytes - 1) / kHugePageBytes + 1) *
                        static_cast<size_t>(kHugePageBytes);
  void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return at::empty(sizes, options);
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(base) + kHugePageBytes - 1) &
                            ~static_cast<uintptr_t>(kHugePageBytes - 1);
  madvise(reinterpret_cast<void*>(aligned), length - (aligned - reinterpret_cast<uintptr_t>(base)),
          MADV_HUGEPAGE);
  return at::from_blob(
      reinterpret_cast<void*>(aligned), sizes, [base, length](void*) { munmap(base, length); },
      options);
}

int64_t last_level_cache_bytes() {
  static const int64_t bytes = std::max(cache_bytes(3, 0), cache_bytes(2, 1 << 20));
  return bytes;
}

template <typename scalar_t>
inline void prefetch_row(const scalar_t* row, int64_t row_bytes) {
  const char* p = reinterpret_cast<const char*>(row);
  const int64_t lines = (row_bytes + 63) / 64;  // at most one column tile: 8 lines
  for (int64_t l = 0; l < lines; ++l) __builtin_prefetch(p + 64 * l, 0, 2);
}

// acc[0:W] += sum over e in [e, end) of scale[u] * x[u * stride : u * stride + W],
// u = idx[e] (scale may be null). Edges go four at a time so each accumulator
// element is loaded and stored once per four rows. Prefetches reach up to
// `prefetch_end` (past the row's end: the next rows of this thread's chunk start
// where this row stops).
template <typename scalar_t, typename index_t, bool kScaled>
inline void accumulate(scalar_t* __restrict acc, const index_t* __restrict idx, int64_t e,
                       const int64_t end, const scalar_t* __restrict x,
                       const scalar_t* __restrict scale, const int64_t W, const int64_t stride,
                       const int64_t prefetch_end) {
  const int64_t row_bytes = W * static_cast<int64_t>(sizeof(scalar_t));
  const int64_t distance =
      std::clamp<int64_t>(kPrefetchBytes / std::max<int64_t>(row_bytes, 1), 4, 32);
  for (; e + 4 <= end; e += 4) {
    if (e + distance + 4 <= prefetch_end) {
      for (int64_t k = 0; k < 4; ++k)
        prefetch_row(x + static_cast<int64_t>(idx[e + distance + k]) * stride, row_bytes);
    }
    const int64_t u0 = idx[e], u1 = idx[e + 1], u2 = idx[e + 2], u3 = idx[e + 3];
    const scalar_t* __restrict a = x + u0 * stride;
    const scalar_t* __restrict b = x + u1 * stride;
    const scalar_t* __restrict c = x + u2 * stride;
    const scalar_t* __restrict d = x + u3 * stride;
    if constexpr (kScaled) {
      const scalar_t sa = scale[u0], sb = scale[u1], sc = scale[u2], sd = scale[u3];
#pragma omp simd
      for (int64_t f = 0; f < W; ++f) acc[f] += (sa * a[f] + sb * b[f]) + (sc * c[f] + sd * d[f]);
    } else {
#pragma omp simd
      for (int64_t f = 0; f < W; ++f) acc[f] += (a[f] + b[f]) + (c[f] + d[f]);
    }
  }
  for (; e < end; ++e) {
    if (e + distance < prefetch_end)
      prefetch_row(x + static_cast<int64_t>(idx[e + distance]) * stride, row_bytes);
    const int64_t u = idx[e];
    const scalar_t* __restrict a = x + u * stride;
    if constexpr (kScaled) {
      const scalar_t s = scale[u];
#pragma omp simd
      for (int64_t f = 0; f < W; ++f) acc[f] += s * a[f];
    } else {
#pragma omp simd
      for (int64_t f = 0; f < W; ++f) acc[f] += a[f];
    }
  }
}

// What becomes of an output row once its edges are summed: first the self term
// (GCN's self loop) scale[v] * x[v] for rows that have a source row, then the
// row's factor, 1 / in-degree (mean) or post[v].
template <typename scalar_t>
struct RowFinish {
  bool mean = false;
  const scalar_t* post = nullptr;  // [n_dst] or null
  bool self_loop = false;
};

template <typename scalar_t, bool kScaled>
inline void finish_row(scalar_t* __restrict o, const int64_t v, const int64_t degree,
                       const scalar_t* __restrict x, const scalar_t* __restrict scale,
                       const int64_t W, const int64_t stride, const int64_t n_src,
                       const RowFinish<scalar_t>& finish) {
  if (finish.self_loop && v < n_src) {
    const scalar_t* __restrict own = x + v * stride;
    const scalar_t w = kScaled ? scale[v] : scalar_t(1);
#pragma omp simd
    for (int64_t f = 0; f < W; ++f) o[f] += w * own[f];
  }
  scalar_t factor;
  if (finish.post != nullptr)
    factor = finish.post[v];
  else if (finish.mean && degree > 1)
    factor = scalar_t(1) / static_cast<scalar_t>(degree);
  else
    return;
#pragma omp simd
  for (int64_t f = 0; f < W; ++f) o[f] *= factor;
}

template <typename scalar_t, typename index_t, bool kScaled>
void aggregate_columns(const int64_t* __restrict ptr, const index_t* __restrict idx,
                       const scalar_t* __restrict x, const scalar_t* __restrict scale,
                       scalar_t* __restrict out, const int64_t n_dst, const int64_t n_src,
                       const int64_t W, const int64_t stride, const RowFinish<scalar_t>& finish,
                       const int64_t block_rows, const int num_threads) {
  const int64_t num_edges = ptr[n_dst];
  const int64_t num_blocks = block_rows >= n_src ? 1 : (n_src + block_rows - 1) / block_rows;
  if (num_blocks <= 1) {
#pragma omp parallel for schedule(dynamic, kRowChunk) num_threads(num_threads)
    for (int64_t v = 0; v < n_dst; ++v) {
      scalar_t* __restrict o = out + v * stride;
#pragma omp simd
      for (int64_t f = 0; f < W; ++f) o[f] = scalar_t(0);
      accumulate<scalar_t, index_t, kScaled>(o, idx, ptr[v], ptr[v + 1], x, scale, W, stride, num_edges);
      finish_row<scalar_t, kScaled>(o, v, ptr[v + 1] - ptr[v], x, scale, W, stride, n_src, finish);
    }
    return;
  }
  std::vector<int64_t> cursor(n_dst);
  int64_t* __restrict cur = cursor.data();
#pragma omp parallel num_threads(num_threads)
  for (int64_t b = 0; b < num_blocks; ++b) {
    const bool first = b == 0, last = b == num_blocks - 1;
    const int64_t hi = (b + 1) * block_rows;
#pragma omp for schedule(dynamic, kRowChunk)
    for (int64_t v = 0; v < n_dst; ++v) {
      scalar_t* __restrict o = out + v * stride;
      const int64_t end = ptr[v + 1];
      int64_t e = first ? ptr[v] : cur[v];
      if (first) {
#pragma omp simd
        for (int64_t f = 0; f < W; ++f) o[f] = scalar_t(0);
      }
      int64_t stop = end;
      if (!last) {
        stop = e;
        while (stop < end && static_cast<int64_t>(idx[stop]) < hi) ++stop;
        cur[v] = stop;
      }
      if (stop > e) accumulate<scalar_t, index_t, kScaled>(o, idx, e, stop, x, scale, W, stride, stop);
      if (last)
        finish_row<scalar_t, kScaled>(o, v, end - ptr[v], x, scale, W, stride, n_src, finish);
    }  // implicit barrier: a block is finished by all threads before the next starts
  }
}

// float32 rows of 16 to 256 columns: each destination row's sum lives in
// registers (V = ceil(F / 16) vectors of 16 floats: 16 AVX-512 registers at 256
// columns) across all its edges and is stored once, with its finish (self term,
// factor) applied on the way out, instead of being loaded and stored in memory
// every few edges; the whole row goes in one sweep, not in column tiles. On 1M
// vertices / 25M edges this ran 1.5-1.7x the tiled kernel at widths 128 and 256
// (alternating A/B in one process), and on 200k / 5M 1.5-2.0x. When F is not a
// multiple of 16 the last vector starts at column F - 16 and overlaps the one
// before it: both hold the right sums of the columns they share, so every load
// and store stays inside the row, with no masks and no scalar tail. The vector
// type has 4-byte alignment (rows need not be 64-byte aligned) and may alias the
// floats it is read from.
//
// Cache blocked (see the top of this file), a row's sum is loaded from the
// output at the start of each sweep after the first and stored at its end: one
// load and one store of the row per sweep instead of one per edge, while the x
// rows of the sweep's block are served from cache.
typedef float f32x16 __attribute__((vector_size(64), aligned(4), may_alias));
typedef uint16_t u16x16 __attribute__((vector_size(32), aligned(2), may_alias));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
constexpr int64_t kRegisterPrefetchBytes = 4 << 10;

// 16 columns of a row as float32: bfloat16 is the top half of a float32's bits.
inline f32x16 load16(const float* p) { return *reinterpret_cast<const f32x16*>(p); }
inline f32x16 load16(const c10::BFloat16* p) {
  const u32x16 bits = __builtin_convertvector(*reinterpret_cast<const u16x16*>(p), u32x16) << 16;
  return __builtin_bit_cast(f32x16, bits);
}
inline void store16(float* p, f32x16 v) { *reinterpret_cast<f32x16*>(p) = v; }
// Rounded to nearest even, as torch rounds float32 to bfloat16; NaN stays NaN.
inline void store16(c10::BFloat16* p, f32x16 v) {
  const u32x16 bits = __builtin_bit_cast(u32x16, v);
  const u32x16 rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const u32x16 nan = (bits & 0x7FFFFFFFu) > 0x7F800000u ? u32x16{} + 0x7FC0u : rounded;
  *reinterpret_cast<u16x16*>(p) = __builtin_convertvector(nan, u16x16);
}
constexpr int64_t kMaxRegisterColumns = 256;

// kOverlap: F is not 16 V; otherwise the row stride and every offset are constants.
// T: float, or bfloat16 rows summed in float32 and rounded once, when stored.
template <int V, bool kOverlap, typename T, typename index_t, bool kScaled>
void aggregate_rows_in_registers(const int64_t* __restrict ptr, const index_t* __restrict idx,
                                 const T* __restrict x, const float* __restrict scale,
                                 T* __restrict out, const int64_t n_dst, const int64_t n_src,
                                 const int64_t F, const RowFinish<float>& finish,
                                 const int64_t block_rows, const int num_threads) {
  const int64_t W = kOverlap ? F : 16 * V;
  const int64_t last = W - 16;  // column offset of the last vector
  // Edges ahead to prefetch: 4 KiB of rows (8 at 128 float32 columns), at least 8, at most 32.
  const int64_t row_bytes = W * static_cast<int64_t>(sizeof(T));
  const int64_t ahead = std::clamp<int64_t>(kRegisterPrefetchBytes / row_bytes, 8, 32);
  const int64_t num_edges = ptr[n_dst];
  const int64_t num_blocks = block_rows >= n_src ? 1 : (n_src + block_rows - 1) / block_rows;
  std::vector<int64_t> cursor(num_blocks > 1 ? n_dst : 0);  // where a row's next sweep starts
  int64_t* __restrict cur = cursor.data();
#define GNNRUN_OFFSET(k) ((k) + 1 < V ? 16 * (k) : last)
#pragma omp parallel num_threads(num_threads)
  for (int64_t b = 0; b < num_blocks; ++b) {
    const bool first_sweep = b == 0, last_sweep = b == num_blocks - 1;
    const int64_t hi = (b + 1) * block_rows;  // sources of this sweep: below hi
#pragma omp for schedule(dynamic, kRowChunk)
    for (int64_t v = 0; v < n_dst; ++v) {
      T* o = out + v * W;
      const int64_t begin = ptr[v], end = ptr[v + 1];
      int64_t e = first_sweep ? begin : cur[v], stop = end;
      if (!last_sweep) {
        stop = e;
        while (stop < end && static_cast<int64_t>(idx[stop]) < hi) ++stop;
        cur[v] = stop;
      }
      f32x16 acc[V];
      for (int k = 0; k < V; ++k) acc[k] = first_sweep ? f32x16{} : load16(o + GNNRUN_OFFSET(k));
      for (; e < stop; ++e) {
        // Past the row's end too: the next rows of this thread's chunk start there.
        if (e + ahead < num_edges) prefetch_row(x + static_cast<int64_t>(idx[e + ahead]) * W, row_bytes);
        const int64_t u = idx[e];
        const T* row = x + u * W;
        if constexpr (kScaled) {
          const float w = scale[u];
          for (int k = 0; k < V; ++k) acc[k] += load16(row + GNNRUN_OFFSET(k)) * w;
        } else {
          for (int k = 0; k < V; ++k) acc[k] += load16(row + GNNRUN_OFFSET(k));
        }
      }
      float factor = 1.0f;
      if (last_sweep) {
        if (finish.self_loop && v < n_src) {
          const T* own = x + v * W;
          const float w = kScaled ? scale[v] : 1.0f;
          for (int k = 0; k < V; ++k) acc[k] += load16(own + GNNRUN_OFFSET(k)) * w;
        }
        if (finish.post != nullptr)
          factor = finish.post[v];
        else if (finish.mean && end - begin > 1)
          factor = 1.0f / static_cast<float>(end - begin);
      }
      for (int k = 0; k < V; ++k) store16(o + GNNRUN_OFFSET(k), acc[k] * factor);
    }  // implicit barrier: a block is finished by all threads before the next starts
  }
#undef GNNRUN_OFFSET
}

// Runs aggregate_rows_in_registers when it serves rows of F columns (16 to 256).
template <typename T, typename index_t, bool kScaled>
bool rows_in_registers(const int64_t* ptr, const index_t* idx, const T* x, const float* scale,
                       T* out, const int64_t n_dst, const int64_t n_src, const int64_t F,
                       const RowFinish<float>& finish, const int64_t block_rows,
                       const int num_threads) {
  if (F < 16 || F > kMaxRegisterColumns) return false;
  switch ((F + 15) / 16) {
#define GNNRUN_REGISTER_ROWS(V)                                                                    \
  case V:                                                                                          \
    if (F == 16 * V)                                                                               \
      aggregate_rows_in_registers<V, false, T, index_t, kScaled>(ptr, idx, x, scale, out, n_dst,  \
                                                                 n_src, F, finish, block_rows,    \
                                                                 num_threads);                    \
    else                                                                                           \
      aggregate_rows_in_registers<V, true, T, index_t, kScaled>(ptr, idx, x, scale, out, n_dst,   \
                                                                n_src, F, finish, block_rows,     \
                                                                num_threads);                     \
    return true;
    GNNRUN_REGISTER_ROWS(1)
    GNNRUN_REGISTER_ROWS(2)
    GNNRUN_REGISTER_ROWS(3)
    GNNRUN_REGISTER_ROWS(4)
    GNNRUN_REGISTER_ROWS(5)
    GNNRUN_REGISTER_ROWS(6)
    GNNRUN_REGISTER_ROWS(7)
    GNNRUN_REGISTER_ROWS(8)
    GNNRUN_REGISTER_ROWS(9)
    GNNRUN_REGISTER_ROWS(10)
    GNNRUN_REGISTER_ROWS(11)
    GNNRUN_REGISTER_ROWS(12)
    GNNRUN_REGISTER_ROWS(13)
    GNNRUN_REGISTER_ROWS(14)
    GNNRUN_REGISTER_ROWS(15)
    GNNRUN_REGISTER_ROWS(16)
#undef GNNRUN_REGISTER_ROWS
    default:
      return false;
  }
}

// Whether aggregate_rows_in_registers serves these float rows; it runs them if so.
template <typename scalar_t, typename index_t, bool kScaled>
bool aggregate_in_registers(const int64_t* ptr, const index_t* idx, const scalar_t* x,
                            const scalar_t* scale, scalar_t* out, const int64_t n_dst,
                            const int64_t n_src, const int64_t F,
                            const RowFinish<scalar_t>& finish, const int64_t block_rows,
                            const int num_threads) {
  if constexpr (!std::is_same_v<scalar_t, float>) {
    return false;
  } else {
    return rows_in_registers<float, index_t, kScaled>(ptr, idx, x, scale, out, n_dst, n_src, F,
                                                      finish, block_rows, num_threads);
  }
}

// Other rows are aggregated in column tiles of kTileBytes, one sweep over the CSR
// per tile: a sweep then gathers 512 B per edge, the width at which the prefetch
// distance above keeps enough rows in flight, and the x columns it touches are
// half the bytes of a 256-wide x. Measured on 1M vertices / 25M edges, width 256:
// 1.2-1.6 s in 128-column tiles against 1.5-1.9 s untiled; the extra sweep costs
// one more read of the indices (8 B per edge against 512 B gathered).
template <typename scalar_t, typename index_t, bool kScaled>
void aggregate_kernel(const int64_t* __restrict ptr, const index_t* __restrict idx,
                      const scalar_t* __restrict x, const scalar_t* __restrict scale,
                      scalar_t* __restrict out, const int64_t n_dst, const int64_t n_src,
                      const int64_t F, const RowFinish<scalar_t>& finish,
                      const int64_t block_rows, const int num_threads) {
  if (aggregate_in_registers<scalar_t, index_t, kScaled>(ptr, idx, x, scale, out, n_dst, n_src, F,
                                                         finish, block_rows, num_threads))
    return;
  const int64_t tile = std::max<int64_t>(1, kTileBytes / static_cast<int64_t>(sizeof(scalar_t)));
  for (int64_t c0 = 0; c0 < F; c0 += tile)
    aggregate_columns<scalar_t, index_t, kScaled>(ptr, idx, x + c0, scale, out + c0, n_dst, n_src,
                                                  std::min(tile, F - c0), F, finish, block_rows,
                                                  num_threads);
}

template <typename index_t>
void transpose_kernel(const int64_t* __restrict ptr, const index_t* __restrict idx,
                      index_t* __restrict out_idx, int64_t* __restrict out_ptr,
                      int64_t* __restrict perm_p, int64_t* __restrict counts,
                      const int64_t* __restrict row_lo, const int64_t num_src, const int T) {
#pragma omp parallel num_threads(T)
  {
#pragma omp for schedule(static, 1)
    for (int t = 0; t < T; ++t) {
      int64_t* c = counts + static_cast<size_t>(t) * num_src;
      for (int64_t e = ptr[row_lo[t]]; e < ptr[row_lo[t + 1]]; ++e) ++c[idx[e]];
    }
    // Exclusive offsets: row u of the output starts after all counts of rows
    // < u; thread t's share of row u follows those of threads < t.
#pragma omp single
    {
      int64_t running = 0;
      for (int64_t u = 0; u < num_src; ++u) {
        out_ptr[u] = running;
        for (int t = 0; t < T; ++t) {
          int64_t& c = counts[static_cast<size_t>(t) * num_src + u];
          const int64_t n = c;
          c = running;
          running += n;
        }
      }
      out_ptr[num_src] = running;
    }
#pragma omp for schedule(static, 1)
    for (int t = 0; t < T; ++t) {
      int64_t* c = counts + static_cast<size_t>(t) * num_src;
      for (int64_t v = row_lo[t]; v < row_lo[t + 1]; ++v) {
        for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e) {
          const int64_t p = c[idx[e]]++;
          out_idx[p] = static_cast<index_t>(v);
          perm_p[p] = e;
        }
      }
    }
  }
}

void check_csr(const at::Tensor& indptr, const at::Tensor& indices) {
  TORCH_CHECK(indptr.dim() == 1 && indptr.numel() >= 1, "indptr: 1-d with at least one entry");
  TORCH_CHECK(indptr.scalar_type() == at::kLong && indptr.is_contiguous() && indptr.is_cpu(),
              "indptr: contiguous int64 CPU tensor");
  TORCH_CHECK(indices.dim() == 1 && indices.is_contiguous() && indices.is_cpu(),
              "indices: contiguous 1-d CPU tensor");
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "indices: int32 or int64");
  const int64_t* ptr = indptr.data_ptr<int64_t>();
  TORCH_CHECK(ptr[0] == 0 && ptr[indptr.numel() - 1] == indices.numel(),
              "indptr does not span indices");
}

at::Tensor aggregate_impl(const at::Tensor& indptr, const at::Tensor& indices,
                             const at::Tensor& x, const c10::optional<at::Tensor>& scale,
                             const c10::optional<at::Tensor>& post, bool mean, bool self_loop,
                             int64_t block_rows);

}  // namespace

// The default number of source vertices per cache block; num_src means no blocking.
int64_t csr_aggregate_block_rows(int64_t num_dst, int64_t num_src, int64_t num_edges,
                                 int64_t width, int64_t elem_size) {
  // One sweep touches one column tile of each x row (see aggregate_kernel).
  const int64_t row_bytes = std::clamp<int64_t>(width * elem_size, 1, kTileBytes);
  // Half the last-level cache for the x rows of a block: the rest holds the
  // streamed indices, cursors and partial output rows.
  const int64_t budget = last_level_cache_bytes() / 2;
  const int64_t footprint = num_src * row_bytes;
  if (num_dst <= 0 || num_src <= 0 || footprint <= budget) return std::max<int64_t>(num_src, 1);
  const int64_t num_blocks = (footprint + budget - 1) / budget;
  const double edges_per_row_per_sweep =
      static_cast<double>(num_edges) / static_cast<double>(num_dst) / num_blocks;
  if (edges_per_row_per_sweep < kMinEdgesPerRowPerSweep) return num_src;
  return (num_src + num_blocks - 1) / num_blocks;
}

namespace {

at::Tensor aggregate_impl(const at::Tensor& indptr, const at::Tensor& indices,
                             const at::Tensor& x_in, const c10::optional<at::Tensor>& scale,
                             const c10::optional<at::Tensor>& post, bool mean, bool self_loop,
                             int64_t block_rows) {
  check_csr(indptr, indices);
  TORCH_CHECK(x_in.dim() == 2 && x_in.is_cpu(), "x: 2-d CPU tensor [num_src, F]");
  const bool bf16 = x_in.scalar_type() == at::kBFloat16;
  TORCH_CHECK(x_in.scalar_type() == at::kFloat || x_in.scalar_type() == at::kDouble ||
                  (bf16 && x_in.size(1) >= 16 && x_in.size(1) <= kMaxRegisterColumns),
              "x: float32 or float64, or bfloat16 rows of 16 to ", kMaxRegisterColumns, " columns");
  at::Tensor x = x_in.contiguous();
  const bool reused = x_in.size(0) > 0 && indices.numel() >= kMinEdgesPerSourceToStage * x_in.size(0);
  if (reused && x.numel() * x.element_size() >= kHugeMinBytes && huge_pages_usable()) {
    at::Tensor staged = empty_maybe_huge(x.sizes(), x.options());
    staged.copy_(x);
    x = staged;
  }
  const int64_t n_dst = indptr.numel() - 1;
  const int64_t n_src = x.size(0);
  const int64_t F = x.size(1);
  const int64_t num_edges = indices.numel();
  // bfloat16 rows are summed in float32, with float32 factors.
  const auto factor_type = bf16 ? at::kFloat : x.scalar_type();
  at::Tensor s;
  if (scale.has_value()) {
    s = scale->to(factor_type).contiguous();
    TORCH_CHECK(s.dim() == 1 && s.numel() == n_src, "scale: one value per source row");
  }
  at::Tensor p;
  if (post.has_value()) {
    p = post->to(factor_type).contiguous();
    TORCH_CHECK(p.dim() == 1 && p.numel() == n_dst, "post: one value per destination row");
  }
  if (num_edges > 0) {
    const auto [lo, hi] = at::aminmax(indices);
    TORCH_CHECK(lo.item<int64_t>() >= 0 && hi.item<int64_t>() < n_src,
                "indices outside [0, num_src) = [0, ", n_src, ")");
  }
  auto out = empty_maybe_huge({n_dst, F}, x.options());
  if (n_dst == 0 || F == 0) return out;
  if (block_rows <= 0)
    block_rows =
        csr_aggregate_block_rows(n_dst, n_src, num_edges, F, static_cast<int64_t>(x.element_size()));
  const int num_threads = std::max(1, at::get_num_threads());
  if (bf16) {
    // One sweep (no cache blocks): partial sums stored between sweeps would be rounded.
    AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "csr_aggregate", [&] {
      const RowFinish<float> finish{mean, p.defined() ? p.data_ptr<float>() : nullptr, self_loop};
      const auto* xp = x.data_ptr<c10::BFloat16>();
      auto* op = out.data_ptr<c10::BFloat16>();
      const int64_t* ptr = indptr.data_ptr<int64_t>();
      const index_t* idx = indices.data_ptr<index_t>();
      if (s.defined())
        rows_in_registers<c10::BFloat16, index_t, true>(ptr, idx, xp, s.data_ptr<float>(), op,
                                                        n_dst, n_src, F, finish, n_src, num_threads);
      else
        rows_in_registers<c10::BFloat16, index_t, false>(ptr, idx, xp, nullptr, op, n_dst, n_src, F,
                                                         finish, n_src, num_threads);
    });
    return out;
  }
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "csr_aggregate", [&] {
    AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "csr_aggregate", [&] {
      const int64_t* ptr = indptr.data_ptr<int64_t>();
      const index_t* idx = indices.data_ptr<index_t>();
      const scalar_t* xp = x.data_ptr<scalar_t>();
      scalar_t* op = out.data_ptr<scalar_t>();
      const RowFinish<scalar_t> finish{mean, p.defined() ? p.data_ptr<scalar_t>() : nullptr,
                                       self_loop};
      if (s.defined())
        aggregate_kernel<scalar_t, index_t, true>(ptr, idx, xp, s.data_ptr<scalar_t>(), op, n_dst,
                                                  n_src, F, finish, block_rows, num_threads);
      else
        aggregate_kernel<scalar_t, index_t, false>(ptr, idx, xp, nullptr, op, n_dst, n_src, F,
                                                   finish, block_rows, num_threads);
    });
  });
  return out;
}

}  // namespace

at::Tensor csr_aggregate(at::Tensor indptr, at::Tensor indices, at::Tensor x, bool mean,
                            int64_t block_rows) {
  return aggregate_impl(indptr, indices, x, c10::nullopt, c10::nullopt, mean, false, block_rows);
}

// out[v] = sum over e in row v of scale[u] * x[u], u = indices[e]: the backward
// of mean aggregation over the transposed CSR, with scale = 1 / in-degree.
at::Tensor csr_aggregate_scaled(at::Tensor indptr, at::Tensor indices, at::Tensor x,
                                   at::Tensor scale, int64_t block_rows) {
  return aggregate_impl(indptr, indices, x, scale, c10::nullopt, false, false, block_rows);
}

// out[v] = post[v] * (sum over u in N(v) + {v} of pre[u] * x[u]): GCN's propagation
// (pre, post: the inverse square roots of the degrees plus one) and DistGNN's
// GraphSAGE-gcn (no pre, post = 1 / (in-degree + 1)) in one pass, with no scaled
// copy of x. The self term applies to rows v < num_src. Its gradient is the same
// operation over the transposed CSR with pre and post swapped.
at::Tensor csr_aggregate_normalized(at::Tensor indptr, at::Tensor indices, at::Tensor x,
                                       c10::optional<at::Tensor> pre,
                                       c10::optional<at::Tensor> post, int64_t block_rows) {
  return aggregate_impl(indptr, indices, x, pre, post, false, true, block_rows);
}

// The transposed CSR: row u lists the destinations v of the edges u -> v in
// increasing v (a stable counting sort), `perm[p]` is the position in the input
// CSR of the edge at position p of the output. Threads take contiguous ranges of
// destination rows with their own counts, which keeps the sort stable.
std::tuple<at::Tensor, at::Tensor, at::Tensor> csr_transpose(at::Tensor indptr,
                                                                       at::Tensor indices,
                                                                       int64_t num_src) {
  check_csr(indptr, indices);
  TORCH_CHECK(num_src >= 0, "num_src must be non-negative");
  const int64_t n_dst = indptr.numel() - 1;
  const int64_t m = indices.numel();
  const int64_t* ptr = indptr.data_ptr<int64_t>();
  auto indptr_t = at::zeros({num_src + 1}, at::dtype(at::kLong));
  auto indices_t = at::empty({m}, indices.options());
  auto perm = at::empty({m}, at::dtype(at::kLong));
  if (m == 0) return {indptr_t, indices_t, perm};
  if (num_src > 0) {
    const auto [lo, hi] = at::aminmax(indices);
    TORCH_CHECK(lo.item<int64_t>() >= 0 && hi.item<int64_t>() < num_src,
                "indices outside [0, num_src)");
  } else {
    TORCH_CHECK(false, "edges but no source vertices");
  }
  // Per-thread count arrays cost num_src entries each: use no more threads than
  // the edges pay for.
  const int64_t max_threads = std::max<int64_t>(1, m / std::max<int64_t>(num_src, 1));
  const int T = static_cast<int>(std::min<int64_t>(std::max(1, at::get_num_threads()), max_threads));
  // Thread t takes destination rows [row_lo[t], row_lo[t+1]), about m / T edges each.
  std::vector<int64_t> row_lo(T + 1, n_dst);
  row_lo[0] = 0;
  for (int t = 1; t < T; ++t)
    row_lo[t] = std::upper_bound(ptr, ptr + n_dst + 1, (m * t) / T) - ptr - 1;
  for (int t = 1; t <= T; ++t) row_lo[t] = std::max(row_lo[t], row_lo[t - 1]);
  std::vector<int64_t> counts(static_cast<size_t>(T) * num_src, 0);
  int64_t* out_ptr = indptr_t.data_ptr<int64_t>();
  int64_t* perm_p = perm.data_ptr<int64_t>();
  AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "csr_transpose", [&] {
    transpose_kernel<index_t>(ptr, indices.data_ptr<index_t>(), indices_t.data_ptr<index_t>(),
                              out_ptr, perm_p, counts.data(), row_lo.data(), num_src, T);
  });
  return {indptr_t, indices_t, perm};
}

}  // namespace gnnrun

TORCH_LIBRARY_FRAGMENT(gnnrun, m) {
  m.def("csr_aggregate(Tensor indptr, Tensor indices, Tensor x, bool mean, int block_rows=0) -> Tensor",
        &gnnrun::csr_aggregate);
  m.def(
      "csr_aggregate_scaled(Tensor indptr, Tensor indices, Tensor x, Tensor scale, "
      "int block_rows=0) -> Tensor",
      &gnnrun::csr_aggregate_scaled);
  m.def(
      "csr_aggregate_normalized(Tensor indptr, Tensor indices, Tensor x, Tensor? pre, "
      "Tensor? post, int block_rows=0) -> Tensor",
      &gnnrun::csr_aggregate_normalized);
  m.def("csr_transpose(Tensor indptr, Tensor indices, int num_src) -> (Tensor, Tensor, Tensor)",
        &gnnrun::csr_transpose);
  m.def(
      "csr_aggregate_block_rows(int num_dst, int num_src, int num_edges, int width, "
      "int elem_size) -> int",
      &gnnrun::csr_aggregate_block_rows);
}
