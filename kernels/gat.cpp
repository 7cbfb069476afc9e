// GAT attention aggregation on a Block (Velickovic et al. 2018).
//
// For every edge u->v (CSR row v lists v's in-neighbours u) and head h:
//   x[e,h]     = el[u,h] + er[v,h]
//   alpha[e,h] = softmax over v's in-edges of leaky_relu(x[e,h])   (row max subtracted)
//   out[v,h,:] = sum_e alpha[e,h] * feat_src[u,h,:]                 (empty rows give 0)
//
// gat_forward runs one pass over the destination rows (OpenMP, dynamic
// schedule: degrees are skewed) and returns out and alpha; gat_backward takes
// alpha back instead of recomputing the softmax. Its gradients wrt the
// destinations (grad_er) are per-row sums, race-free in the same row-parallel
// pass that computes the per-edge logit gradients. The gradients wrt the
// sources (grad_feat_src, grad_el) are scattered to u; rather than atomics or
// one accumulation buffer per thread (S*H*D floats each), the backward builds
// the transposed CSR (a stable counting sort by source, so each source's
// edges are met in increasing edge order and the result is deterministic) and
// runs a second pass, parallel over sources, that gathers into each u alone.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <ATen/AccumulateType.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

struct Checked {
  at::Tensor indptr;  // int64
  int64_t num_dst, num_src, num_edges, heads, dim;
};

Checked check_inputs(const char* op, const at::Tensor& indptr, const at::Tensor& indices,
                     const at::Tensor& feat_src, const at::Tensor& el,
                     const at::Tensor& er) {
  TORCH_CHECK(indptr.dim() == 1 && indptr.numel() >= 1, op, ": indptr must be 1-d, non-empty");
  TORCH_CHECK(indices.dim() == 1, op, ": indices must be 1-d");
  TORCH_CHECK(indices.scalar_type() == at::kInt || indices.scalar_type() == at::kLong,
              op, ": int32 or int64 indices");
  TORCH_CHECK(indptr.scalar_type() == at::kInt || indptr.scalar_type() == at::kLong,
              op, ": int32 or int64 indptr");
  TORCH_CHECK(feat_src.dim() == 3, op, ": feat_src must be [num_src, heads, dim]");
  const auto dtype = feat_src.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble, op,
              ": float32 or float64 features");
  TORCH_CHECK(el.scalar_type() == dtype && er.scalar_type() == dtype, op,
              ": feat_src, el and er differ in dtype");
  TORCH_CHECK(indptr.device().is_cpu() && indices.device().is_cpu() && feat_src.device().is_cpu() &&
                  el.device().is_cpu() && er.device().is_cpu(),
              op, ": CPU tensors only");
  TORCH_CHECK(indices.is_contiguous() && feat_src.is_contiguous() && el.is_contiguous() &&
                  er.is_contiguous(),
              op, ": contiguous inputs");
  Checked c;
  c.indptr = indptr.to(at::kLong).contiguous();
  c.num_dst = indptr.numel() - 1;
  c.num_src = feat_src.size(0);
  c.heads = feat_src.size(1);
  c.dim = feat_src.size(2);
  c.num_edges = indices.numel();
  TORCH_CHECK(el.dim() == 2 && el.size(0) == c.num_src && el.size(1) == c.heads, op,
              ": el must be [num_src, heads]");
  TORCH_CHECK(er.dim() == 2 && er.size(0) == c.num_dst && er.size(1) == c.heads, op,
              ": er must be [num_dst, heads]");
  const int64_t* ptr = c.indptr.data_ptr<int64_t>();
  TORCH_CHECK(ptr[0] == 0 && ptr[c.num_dst] == c.num_edges, op,
              ": indptr does not span indices");
  for (int64_t v = 0; v < c.num_dst; ++v)
    TORCH_CHECK(ptr[v] <= ptr[v + 1], op, ": indptr must be non-decreasing");
  return c;
}

template <typename scalar_t, typename index_t>
int64_t forward_impl(const int64_t* ptr, const index_t* __restrict__ idx,
                     const scalar_t* __restrict__ feat, const scalar_t* __restrict__ l,
                     const scalar_t* __restrict__ r, scalar_t* __restrict__ o,
                     scalar_t* __restrict__ a, scalar_t slope, int64_t N, int64_t S, int64_t H,
                     int64_t D) {
  using acc_t = at::acc_type<scalar_t, false>;
  int64_t bad = 0;  // rows with a source id out of range (reported after the parallel loop)
#pragma omp parallel reduction(+ : bad)
  {
    std::vector<scalar_t> mx(H);
    std::vector<acc_t> sum(H);
#pragma omp for schedule(dynamic, 64)
    for (int64_t v = 0; v < N; ++v) {
      const int64_t beg = ptr[v], end = ptr[v + 1];
      if (beg == end) continue;
      bool row_ok = true;
      for (int64_t e = beg; e < end; ++e) row_ok &= idx[e] >= 0 && idx[e] < S;
      if (!row_ok) {
        ++bad;
        continue;
      }
      const scalar_t* rv = r + v * H;
      for (int64_t h = 0; h < H; ++h) {
        mx[h] = -std::numeric_limits<scalar_t>::infinity();
        sum[h] = 0;
      }
      // Logits after the leaky relu, and their row max per head.
      for (int64_t e = beg; e < end; ++e) {
        const scalar_t* lu = l + static_cast<int64_t>(idx[e]) * H;
        scalar_t* ae = a + e * H;
        for (int64_t h = 0; h < H; ++h) {
          const scalar_t x = lu[h] + rv[h];
          const scalar_t y = x > 0 ? x : x * slope;
          ae[h] = y;
          mx[h] = y > mx[h] ? y : mx[h];
        }
      }
      for (int64_t e = beg; e < end; ++e) {
        scalar_t* ae = a + e * H;
        for (int64_t h = 0; h < H; ++h) {
          const scalar_t p = std::exp(ae[h] - mx[h]);
          ae[h] = p;
          sum[h] += p;
        }
      }
      for (int64_t h = 0; h < H; ++h) mx[h] = static_cast<scalar_t>(acc_t(1) / sum[h]);  // 1/sum
      scalar_t* ov = o + v * H * D;
      for (int64_t e = beg; e < end; ++e) {
        const scalar_t* fu = feat + static_cast<int64_t>(idx[e]) * H * D;
        scalar_t* ae = a + e * H;
        for (int64_t h = 0; h < H; ++h) {
          const scalar_t w = ae[h] * mx[h];
          ae[h] = w;
          const scalar_t* __restrict__ f = fu + h * D;
          scalar_t* __restrict__ oh = ov + h * D;
          for (int64_t d = 0; d < D; ++d) oh[d] += w * f[d];
        }
      }
    }
  }
  return bad;
}

template <typename scalar_t, typename index_t>
void backward_impl(const int64_t* ptr, const index_t* __restrict__ idx,
                   const scalar_t* __restrict__ feat, const scalar_t* __restrict__ l,
                   const scalar_t* __restrict__ r, const scalar_t* __restrict__ a,
                   const scalar_t* __restrict__ go, scalar_t* __restrict__ gf,
                   scalar_t* __restrict__ gl, scalar_t* __restrict__ gr,
                   scalar_t* __restrict__ gx, scalar_t slope, int64_t N, int64_t S, int64_t H,
                   int64_t D, int64_t E) {
  using acc_t = at::acc_type<scalar_t, false>;

  // Transposed CSR: every source's edge ids in increasing order (a stable
  // counting sort) with their destinations. Also validates the source ids.
  std::vector<int64_t> tptr(S + 1, 0);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t u = idx[e];
    TORCH_CHECK(u >= 0 && u < S, "gat_backward: source id outside [0, num_src)");
    ++tptr[u + 1];
  }
  for (int64_t u = 0; u < S; ++u) tptr[u + 1] += tptr[u];
  std::vector<int64_t> teid(E), tdst(E);
  {
    std::vector<int64_t> cursor(tptr.begin(), tptr.end() - 1);
    for (int64_t v = 0; v < N; ++v)
      for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e) {
        const int64_t t = cursor[idx[e]]++;
        teid[t] = e;
        tdst[t] = v;
      }
  }

  // Pass 1, per destination: grad wrt alpha, then the softmax and leaky relu
  // backward into gx[e,h] (the gradient wrt el[u,h] + er[v,h]); grad_er[v,h]
  // is the sum of v's row.
#pragma omp parallel
  {
    std::vector<acc_t> dotsum(H);
#pragma omp for schedule(dynamic, 64)
    for (int64_t v = 0; v < N; ++v) {
      const int64_t beg = ptr[v], end = ptr[v + 1];
      if (beg == end) continue;
      const scalar_t* gov = go + v * H * D;
      for (int64_t h = 0; h < H; ++h) dotsum[h] = 0;
      for (int64_t e = beg; e < end; ++e) {
        const scalar_t* fu = feat + static_cast<int64_t>(idx[e]) * H * D;
        for (int64_t h = 0; h < H; ++h) {
          const scalar_t* __restrict__ f = fu + h * D;
          const scalar_t* __restrict__ g = gov + h * D;
          scalar_t dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += g[d] * f[d];
          gx[e * H + h] = dot;  // grad wrt alpha, for now
          dotsum[h] += static_cast<acc_t>(a[e * H + h]) * dot;
        }
      }
      const scalar_t* rv = r + v * H;
      scalar_t* grv = gr + v * H;
      for (int64_t e = beg; e < end; ++e) {
        const scalar_t* lu = l + static_cast<int64_t>(idx[e]) * H;
        for (int64_t h = 0; h < H; ++h) {
          const scalar_t ge = a[e * H + h] * (gx[e * H + h] - static_cast<scalar_t>(dotsum[h]));
          const scalar_t x = lu[h] + rv[h];
          const scalar_t g = x > 0 ? ge : ge * slope;
          gx[e * H + h] = g;
          grv[h] += g;
        }
      }
    }
  }

  // Pass 2, per source: gather the contributions of its out-edges.
  const int64_t* tp = tptr.data();
  const int64_t* te = teid.data();
  const int64_t* td = tdst.data();
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t u = 0; u < S; ++u) {
    scalar_t* gfu = gf + u * H * D;
    scalar_t* glu = gl + u * H;
    for (int64_t t = tp[u]; t < tp[u + 1]; ++t) {
      const int64_t e = te[t];
      const scalar_t* gov = go + td[t] * H * D;
      for (int64_t h = 0; h < H; ++h) {
        const scalar_t w = a[e * H + h];
        glu[h] += gx[e * H + h];
        const scalar_t* __restrict__ g = gov + h * D;
        scalar_t* __restrict__ f = gfu + h * D;
        for (int64_t d = 0; d < D; ++d) f[d] += w * g[d];
      }
    }
  }
}

}  // namespace

std::vector<at::Tensor> gat_forward(at::Tensor indptr, at::Tensor indices,
                                       at::Tensor feat_src, at::Tensor el, at::Tensor er,
                                       double negative_slope) {
  const Checked c = check_inputs("gat_forward", indptr, indices, feat_src, el, er);
  auto out = at::zeros({c.num_dst, c.heads, c.dim}, feat_src.options());
  auto alpha = at::empty({c.num_edges, c.heads}, feat_src.options());
  const int64_t* ptr = c.indptr.data_ptr<int64_t>();
  int64_t bad = 0;
  AT_DISPATCH_FLOATING_TYPES(feat_src.scalar_type(), "gat_forward", [&] {
    AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "gat_forward_idx", [&] {
      bad = forward_impl<scalar_t, index_t>(
          ptr, indices.data_ptr<index_t>(), feat_src.data_ptr<scalar_t>(),
          el.data_ptr<scalar_t>(), er.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
          alpha.data_ptr<scalar_t>(), static_cast<scalar_t>(negative_slope), c.num_dst,
          c.num_src, c.heads, c.dim);
    });
  });
  TORCH_CHECK(bad == 0, "gat_forward: source id outside [0, num_src)");
  return {out, alpha};
}

std::vector<at::Tensor> gat_backward(at::Tensor indptr, at::Tensor indices,
                                        at::Tensor feat_src, at::Tensor el,
                                        at::Tensor er, at::Tensor alpha,
                                        at::Tensor grad_out, double negative_slope) {
  const Checked c = check_inputs("gat_backward", indptr, indices, feat_src, el, er);
  const int64_t N = c.num_dst, S = c.num_src, H = c.heads, D = c.dim, E = c.num_edges;
  TORCH_CHECK(alpha.scalar_type() == feat_src.scalar_type() &&
                  grad_out.scalar_type() == feat_src.scalar_type(),
              "gat_backward: alpha and grad_out must have feat_src's dtype");
  TORCH_CHECK(alpha.dim() == 2 && alpha.size(0) == E && alpha.size(1) == H && alpha.is_contiguous(),
              "gat_backward: alpha must be contiguous [num_edges, heads]");
  TORCH_CHECK(grad_out.dim() == 3 && grad_out.size(0) == N && grad_out.size(1) == H &&
                  grad_out.size(2) == D,
              "gat_backward: grad_out must be [num_dst, heads, dim]");
  TORCH_CHECK(grad_out.device().is_cpu() && alpha.device().is_cpu(), "gat_backward: CPU tensors");
  grad_out = grad_out.contiguous();
  auto grad_feat = at::zeros({S, H, D}, feat_src.options());
  auto grad_el = at::zeros({S, H}, feat_src.options());
  auto grad_er = at::zeros({N, H}, feat_src.options());
  auto grad_x = at::empty({E, H}, feat_src.options());
  AT_DISPATCH_FLOATING_TYPES(feat_src.scalar_type(), "gat_backward", [&] {
    AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "gat_backward_idx", [&] {
      backward_impl<scalar_t, index_t>(
          c.indptr.data_ptr<int64_t>(), indices.data_ptr<index_t>(),
          feat_src.data_ptr<scalar_t>(), el.data_ptr<scalar_t>(), er.data_ptr<scalar_t>(),
          alpha.data_ptr<scalar_t>(), grad_out.data_ptr<scalar_t>(),
          grad_feat.data_ptr<scalar_t>(), grad_el.data_ptr<scalar_t>(),
          grad_er.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(),
          static_cast<scalar_t>(negative_slope), N, S, H, D, E);
    });
  });
  return {grad_feat, grad_el, grad_er};
}

TORCH_LIBRARY_FRAGMENT(gnnrun, m) {
  m.def(
      "gat_forward(Tensor indptr, Tensor indices, Tensor feat_src, Tensor el, Tensor er, "
      "float negative_slope) -> Tensor[]",
      &gat_forward);
  m.def(
      "gat_backward(Tensor indptr, Tensor indices, Tensor feat_src, Tensor el, Tensor er, "
      "Tensor alpha, Tensor grad_out, float negative_slope) -> Tensor[]",
      &gat_backward);
}
