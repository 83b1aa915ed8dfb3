// The float (fp32) decoder step of a pre-norm Transformer as one operation: the Python step
// (attnscope.nn.decoder_step.layer_step and Transformer._fast_step) transliterated, the same ATen
// operations on the same operands in the same order, so the same bits; what it saves is
// Python's share of each operation's cost (~130 small operations per step at one row). Products
// on FBGEMM's packed fp16 weights (attnscope.nn.inference.PackedFp16Product). Built at install time
// with int8_step.cpp (the int8 step and encoder) and beam.cpp into one library
// (app/nn/native/library.py); tests/nn/test_native_step.py holds it to the Python step.

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

namespace {

using at::Tensor;

std::tuple<Tensor, Tensor, Tensor> fp32_step(
    const Tensor& tokens,           // (N,) int64
    const Tensor& embed,            // (V, D)
    int64_t padding_idx,
    const Tensor& position,         // (D,)
    double embed_scale,
    at::TensorList caches,          // per layer (2, N, H, capacity, Dh): position t is written here
    int64_t t,
    at::TensorList cross_k,         // per layer (G, H, S, Dh), contiguous
    at::TensorList cross_v,
    const Tensor& blocked,          // (G, 1, 1, S) bool
    at::TensorList norms,           // per layer: self, cross, ff (weight, bias); then the final norm
    at::TensorList packed,          // per layer: qkv, self out, cross q, cross out, ff in, ff out; then the output
    at::TensorList bias,
    int64_t heads,
    double eps) {
  const int64_t layers = static_cast<int64_t>(caches.size());
  TORCH_CHECK(norms.size() == static_cast<size_t>(6 * layers + 2) && packed.size() == static_cast<size_t>(6 * layers + 1),
              "norms: 6 per layer and 2; products: 6 per layer and 1");
  const int64_t n = tokens.size(0), d = embed.size(1), dh = d / heads;
  const int64_t groups = blocked.size(0), s = blocked.size(3), g = n / groups;
  const double scale = std::sqrt(static_cast<double>(dh));
  auto product = [&](size_t i, const Tensor& x) { return at::fbgemm_linear_fp16_weight(x, packed[i], bias[i]); };
  auto norm = [&](size_t k, const Tensor& y) { return at::layer_norm(y, {d}, norms[2 * k], norms[2 * k + 1], eps); };

  Tensor x = at::embedding(embed, tokens, padding_idx).mul(embed_scale).add(position);  // (N, D)
  std::vector<Tensor> self_rows, cross_rows;
  for (int64_t l = 0; l < layers; ++l) {
    const size_t p0 = static_cast<size_t>(6 * l);
    Tensor qkv = product(p0, norm(3 * l, x)).view({n, 1, 3, heads, dh}).permute({2, 0, 3, 1, 4});  // (3, N, H, 1, Dh)
    const Tensor& data = caches[l];
    data.narrow(3, t, 1).copy_(qkv.narrow(0, 1, 2));
    Tensor part = data.narrow(3, 0, t + 1);
    Tensor keys = part.select(0, 0), values = part.select(0, 1);  // (N, H, t+1, Dh)
    Tensor scores = at::bmm(qkv.select(0, 0).reshape({n * heads, 1, dh}), keys.reshape({n * heads, t + 1, dh}).transpose(1, 2));
    Tensor self_w = scores.div_(scale).softmax(-1);  // (N*H, 1, t+1)
    Tensor out = at::bmm(self_w, values.reshape({n * heads, t + 1, dh})).view({n, d});
    x = x + product(p0 + 1, out);

    Tensor q = product(p0 + 2, norm(3 * l + 1, x));
    q = q.view({groups, g, heads, dh}).transpose(1, 2).reshape({groups * heads, g, dh});
    Tensor cscores = at::bmm(q, cross_k[l].view({groups * heads, s, dh}).transpose(1, 2)).div_(scale);
    Tensor cross_w = cscores.view({groups, heads, g, s}).masked_fill(blocked, -std::numeric_limits<double>::infinity()).softmax(-1);
    Tensor cout = at::bmm(cross_w.view({groups * heads, g, s}), cross_v[l].view({groups * heads, s, dh}));
    cout = cout.view({groups, heads, g, dh}).transpose(1, 2).reshape({n, d});
    x = x + product(p0 + 3, cout);
    Tensor hidden = at::relu(product(p0 + 4, norm(3 * l + 2, x)));
    x = x + product(p0 + 5, hidden);
    self_rows.push_back(self_w.view({n, heads, t + 1}));
    cross_rows.push_back(cross_w.transpose(1, 2).reshape({n, heads, s}));
  }
  Tensor y = norm(3 * layers, x);
  Tensor logits = product(static_cast<size_t>(6 * layers), y);
  return {at::log_softmax(logits.to(at::kFloat), -1), at::stack(self_rows, 1), at::stack(cross_rows, 1)};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(attnscope_native, m) {
  m.def(
      "fp32_step(Tensor tokens, Tensor embed, int padding_idx, Tensor position, float embed_scale, Tensor[] caches, "
      "int t, Tensor[] cross_k, Tensor[] cross_v, Tensor blocked, Tensor[] norms, Tensor[] packed, Tensor[] bias, "
      "int heads, float eps) -> (Tensor, Tensor, Tensor)",
      &fp32_step);
}
