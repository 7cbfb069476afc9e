// Dropout with a counter-based mask, fused into one pass over the tensor.
//
// Element i of a call with key k is kept when its 16-bit lane of
// mix64(k + (i / 4) * golden) is at least the drop threshold round(p * 65536):
// one splitmix64 hash serves 4 consecutive elements (lane i % 4, lowest bits
// first). The mask is a pure function of (key, i), so nothing is stored for
// the backward pass: the gradient is the same operation with the same key.
// Threads split the tensor into ranges; the result does not depend on how.
// bfloat16 elements are scaled in float32 and rounded once (the same mask).
// gnnrun/ops/dropout.py holds the NumPy reference of the same function.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstdint>
#include <utility>

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

inline uint64_t mix64(uint64_t z) {
  z += kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A dropped element becomes value * 0, not 0, so that NaN and inf still
// propagate as they do through torch's dropout (the NaN-loss guard relies on it).
template <typename scalar_t>
inline scalar_t lane(uint64_t h, int j, uint32_t threshold, scalar_t value) {
  return static_cast<uint32_t>((h >> (16 * j)) & 0xFFFF) >= threshold ? value : value * scalar_t(0);
}

// relu that lets NaN through, as torch.relu does.
template <typename scalar_t>
inline scalar_t relu_scaled(scalar_t x, scalar_t scale) {
  return x <= scalar_t(0) ? scalar_t(0) : x * scale;
}

// out[i] = lane(i, f(x[i]) * scale), f the identity or relu: one hash per 4 elements.
template <typename scalar_t, bool kRelu>
void apply_mask(const scalar_t* x, scalar_t* out, int64_t n, uint64_t key, uint32_t threshold,
                at::opmath_type<scalar_t> scale) {
  using acc_t = at::opmath_type<scalar_t>;
  const auto value = [scale](scalar_t v) {
    const acc_t a = static_cast<acc_t>(v);
    return kRelu ? relu_scaled(a, scale) : a * scale;
  };
  const int64_t full = n / 4;
  at::parallel_for(0, full, 8192, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const uint64_t h = mix64(key + static_cast<uint64_t>(g) * kGolden);
      const scalar_t* in = x + g * 4;
      scalar_t* o = out + g * 4;
      for (int j = 0; j < 4; ++j) o[j] = static_cast<scalar_t>(lane(h, j, threshold, value(in[j])));
    }
  });
  if (full * 4 < n) {  // the last, partial group
    const uint64_t h = mix64(key + static_cast<uint64_t>(full) * kGolden);
    for (int64_t i = full * 4; i < n; ++i)
      out[i] = static_cast<scalar_t>(lane(h, static_cast<int>(i - full * 4), threshold, value(x[i])));
  }
}

template <bool kRelu>
at::Tensor masked(at::Tensor x, int64_t key, int64_t threshold, double scale) {
  TORCH_CHECK(x.device().is_cpu(), "dropout: CPU tensors only");
  TORCH_CHECK(threshold >= 0 && threshold <= 65536, "dropout: threshold out of range");
  x = x.contiguous();
  auto out = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "dropout", [&] {
    apply_mask<scalar_t, kRelu>(x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), x.numel(),
                                static_cast<uint64_t>(key), static_cast<uint32_t>(threshold),
                                static_cast<at::opmath_type<scalar_t>>(scale));
  });
  return out;
}

// r = o > 0 ? g * s : 0. A vector select, not a branch: the elements are dropped
// at random, and the branch the compiler made of it inside the parallel_for
// lambda (mispredicted on every other element) made this pass 3.5x slower.
template <typename scalar_t>
void relu_dropout_grad(const scalar_t* __restrict g, const scalar_t* __restrict o,
                       scalar_t* __restrict r, const at::opmath_type<scalar_t> s, const int64_t n) {
  using acc_t = at::opmath_type<scalar_t>;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    r[i] = static_cast<acc_t>(o[i]) > acc_t(0) ? static_cast<scalar_t>(static_cast<acc_t>(g[i]) * s)
                                               : scalar_t(0);
}

}  // namespace

// x with each element zeroed with probability p (threshold / 65536) and the rest scaled.
at::Tensor dropout_apply(at::Tensor x, int64_t key, int64_t threshold, double scale) {
  return masked<false>(std::move(x), key, threshold, scale);
}

// relu(x) then the same dropout, in one pass (NaN stays NaN, as through torch.relu).
at::Tensor relu_dropout_forward(at::Tensor x, int64_t key, int64_t threshold, double scale) {
  return masked<true>(std::move(x), key, threshold, scale);
}

// The gradient of relu_dropout_forward from its output: where out > 0 the input was positive
// and kept, so the gradient passes scaled; everywhere else it is 0.
at::Tensor relu_dropout_backward(at::Tensor grad, at::Tensor out, double scale) {
  TORCH_CHECK(grad.sizes() == out.sizes(), "relu_dropout_backward: shapes differ");
  grad = grad.contiguous();
  out = out.contiguous();
  auto result = at::empty_like(grad);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, grad.scalar_type(), "relu_dropout_backward", [&] {
    const scalar_t* g = grad.data_ptr<scalar_t>();
    const scalar_t* o = out.data_ptr<scalar_t>();
    scalar_t* r = result.data_ptr<scalar_t>();
    const auto s = static_cast<at::opmath_type<scalar_t>>(scale);
    at::parallel_for(0, grad.numel(), 32768, [&](int64_t begin, int64_t end) {
      relu_dropout_grad(g + begin, o + begin, r + begin, s, end - begin);
    });
  });
  return result;
}

TORCH_LIBRARY_FRAGMENT(gnnrun, m) {
  m.def("dropout_apply(Tensor x, int key, int threshold, float scale) -> Tensor", &dropout_apply);
  m.def("relu_dropout_forward(Tensor x, int key, int threshold, float scale) -> Tensor",
        &relu_dropout_forward);
  m.def("relu_dropout_backward(Tensor grad, Tensor out, float scale) -> Tensor",
        &relu_dropout_backward);
}
