// A pre-norm Transformer's decoder step (int8_step) and encoder (int8_encode) with int8
// products, each as one operation.
//
// At one row per step a decoder step is ~130 small PyTorch operations around 19 matrix
// products; each operation costs microseconds of dispatch and allocation, together several
// times the int8 products themselves (see docs/decoding.md, seventh round). Here the products go
// through FBGEMM's int8 kernel (the same call and operands as attnscope.nn.inference.Int8Product) and
// everything else (embedding, layer norms, each head's attention, softmaxes, residuals, ReLU) is
// plain loops over the rows. Built on first use by app/nn/native/__init__.py; the Python layers
// stay the reference, and tests/nn/test_native_step.py holds the two together.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

namespace {

using at::Tensor;

void layer_norm(const float* x, float* y, int64_t rows, int64_t d, const float* w, const float* b, double eps) {
  for (int64_t n = 0; n < rows; ++n) {
    const float* xr = x + n * d;
    float* yr = y + n * d;
    double mean = 0.0;
    for (int64_t i = 0; i < d; ++i) mean += xr[i];
    mean /= static_cast<double>(d);
    double var = 0.0;
    for (int64_t i = 0; i < d; ++i) {
      double c = xr[i] - mean;
      var += c * c;
    }
    var /= static_cast<double>(d);
    float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    float m = static_cast<float>(mean);
    for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - m) * inv * w[i] + b[i];
  }
}

// softmax in place over p[0..len) (masked entries already -inf)
void softmax(float* p, int64_t len) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < len; ++j) mx = p[j] > mx ? p[j] : mx;
  float sum = 0.f;
  for (int64_t j = 0; j < len; ++j) {
    p[j] = std::exp(p[j] - mx);
    sum += p[j];
  }
  float inv = 1.f / sum;
  for (int64_t j = 0; j < len; ++j) p[j] *= inv;
}

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// o[0..n) = sum_j p[j] * v_j, v_j = v + j * stride
inline void weighted_sum(float* o, const float* p, const float* v, int64_t len, int64_t stride, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = 0.f;
  for (int64_t j = 0; j < len; ++j) {
    const float pj = p[j];
    if (pj == 0.f) continue;
    const float* vj = v + j * stride;
    for (int64_t i = 0; i < n; ++i) o[i] += pj * vj[i];
  }
}

// The int8 products (attnscope.nn.inference.Int8Product): FBGEMM's kernel with weight scale 1 and
// zero point 0, then each output column times its row's weight scale, plus the bias.
struct Products {
  at::TensorList weight;
  at::TensorList packed;
  at::TensorList col_offsets;
  at::TensorList scales;
  at::TensorList bias;
  at::TensorList zeros;

  Tensor operator()(size_t i, const Tensor& x) const {
    Tensor out = at::fbgemm_linear_int8_weight_fp32_activation(
        x, weight[i], packed[i], col_offsets[i], 1.0, 0, zeros[i]);
    const int64_t cols = out.size(1);
    const float* s = scales[i].data_ptr<float>();
    const float* b = bias[i].data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t r = 0, rows = out.size(0); r < rows; ++r, o += cols)
      for (int64_t j = 0; j < cols; ++j) o[j] = o[j] * s[j] + b[j];
    return out;
  }
};

// The residual stream x (N, D) of a pre-norm layer stack, with its normed copy and the heads'
// outputs (N, D) that attention writes.
struct Stream {
  Tensor x, normed, heads_out;
  float *xp, *np, *hp;
  int64_t n, d;
  at::TensorList norms;  // (weight, bias) pairs
  double eps;
  const Products& product;

  Stream(Tensor x_, at::TensorList norms_, double eps_, const Products& product_)
      : x(std::move(x_)), normed(at::empty_like(x)), heads_out(at::empty_like(x)),
        xp(x.data_ptr<float>()), np(normed.data_ptr<float>()), hp(heads_out.data_ptr<float>()),
        n(x.size(0)), d(x.size(1)), norms(norms_), eps(eps_), product(product_) {}

  // normed = the k-th layer norm of x
  const Tensor& norm(size_t k) {
    layer_norm(xp, np, n, d, norms[2 * k].data_ptr<float>(), norms[2 * k + 1].data_ptr<float>(), eps);
    return normed;
  }
  // x += product p of the heads' outputs (attention's output projection)
  void add_heads(size_t p) { add(product(p, heads_out)); }
  // x += out (N, D)
  void add(const Tensor& out) {
    const float* op = out.data_ptr<float>();
    for (int64_t i = 0; i < n * d; ++i) xp[i] += op[i];
  }
  // x += p_out(relu(p_in(norm k of x)))
  void feed_forward(size_t k, size_t p_in, size_t p_out) {
    Tensor hidden = product(p_in, norm(k));
    float* h = hidden.data_ptr<float>();
    for (int64_t i = 0, m = hidden.numel(); i < m; ++i) h[i] = h[i] > 0.f ? h[i] : 0.f;
    add(product(p_out, hidden));
  }
};

std::tuple<Tensor, Tensor, Tensor> int8_step(
    const Tensor& tokens,           // (N,) int64: the new tokens
    const Tensor& embed,            // (V, D) the embedding matrix
    const Tensor& position,         // (D,) the position row of this step
    double embed_scale,             // sqrt(D): x = embed[token] * scale + position
    at::TensorList caches,          // per layer (2, N, H, capacity, Dh): position t is written here
    int64_t t,                      // the position of this step (keys 0..t after it)
    at::TensorList cross_k,         // per layer (G, H, S, Dh), contiguous
    at::TensorList cross_v,
    const Tensor& blocked,          // (G, S) bool: padded source positions
    at::TensorList norms,           // per layer: self, cross, ff (weight, bias); then the final norm
    at::TensorList weight,          // per layer: qkv, self out, cross q, cross out, ff in, ff out; then the output
    at::TensorList packed,
    at::TensorList col_offsets,
    at::TensorList scales,
    at::TensorList bias,
    at::TensorList zeros,
    int64_t heads,
    double eps) {
  const int64_t layers = static_cast<int64_t>(caches.size());
  TORCH_CHECK(embed.dim() == 2 && embed.scalar_type() == at::kFloat && embed.is_contiguous(), "embed must be (V, D) float32");
  TORCH_CHECK(tokens.dim() == 1 && tokens.scalar_type() == at::kLong && position.is_contiguous(), "tokens (N,) int64");
  TORCH_CHECK(norms.size() == static_cast<size_t>(6 * layers + 2), "norms: 6 per layer and 2");
  TORCH_CHECK(weight.size() == static_cast<size_t>(6 * layers + 1), "products: 6 per layer and 1");
  const int64_t n = tokens.size(0), d = embed.size(1), vocab = embed.size(0), dh = d / heads;
  const int64_t groups = blocked.size(0), s = blocked.size(1), g = n / groups;
  TORCH_CHECK(g * groups == n && dh * heads == d, "rows must be groups x beams, D heads x Dh");
  const Products product{weight, packed, col_offsets, scales, bias, zeros};
  const float scale_dot = 1.f / std::sqrt(static_cast<float>(dh));
  const float neg_inf = -std::numeric_limits<float>::infinity();

  Tensor x = at::empty({n, d}, embed.options());
  {
    Tensor tok = tokens.contiguous();
    const int64_t* tp = tok.data_ptr<int64_t>();
    const float* ep = embed.data_ptr<float>();
    const float* pp = position.data_ptr<float>();
    const float es = static_cast<float>(embed_scale);
    float* out = x.data_ptr<float>();
    for (int64_t r = 0; r < n; ++r) {
      TORCH_CHECK(tp[r] >= 0 && tp[r] < vocab, "token id out of range");
      const float* row = ep + tp[r] * d;
      for (int64_t i = 0; i < d; ++i) out[r * d + i] = row[i] * es + pp[i];
    }
  }
  Stream st(x, norms, eps, product);
  Tensor self_w = at::empty({n, layers, heads, t + 1}, x.options());
  Tensor cross_w = at::empty({n, layers, heads, s}, x.options());
  float* swp = self_w.data_ptr<float>();
  float* cwp = cross_w.data_ptr<float>();
  const bool* bp = blocked.data_ptr<bool>();

  for (int64_t l = 0; l < layers; ++l) {
    const size_t p0 = static_cast<size_t>(6 * l);
    // self-attention: this position's keys/values into the cache, then each head over 0..t
    Tensor qkv = product(p0, st.norm(3 * l));  // (N, 3D)
    const float* qp = qkv.data_ptr<float>();
    const Tensor& cache = caches[l];
    TORCH_CHECK(cache.is_contiguous() && cache.size(1) == n && cache.size(3) > t, "cache too small");
    float* cp = cache.data_ptr<float>();
    const int64_t cap = cache.size(3);
    const int64_t half = n * heads * cap * dh;  // keys, then values
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t h = 0; h < heads; ++h) {
        float* keys = cp + ((r * heads + h) * cap) * dh;
        float* values = keys + half;
        const float* q = qp + r * 3 * d + h * dh;
        for (int64_t i = 0; i < dh; ++i) {
          keys[t * dh + i] = q[d + i];
          values[t * dh + i] = q[2 * d + i];
        }
        float* p = swp + ((r * layers + l) * heads + h) * (t + 1);
        for (int64_t j = 0; j <= t; ++j) p[j] = dot(q, keys + j * dh, dh) * scale_dot;
        softmax(p, t + 1);
        weighted_sum(st.hp + r * d + h * dh, p, values, t + 1, dh, dh);
      }
    }
    st.add_heads(p0 + 1);

    // cross-attention over the sentence's source positions
    Tensor cq = product(p0 + 2, st.norm(3 * l + 1));  // (N, D)
    const float* cqp = cq.data_ptr<float>();
    const Tensor& kt = cross_k[l];
    const Tensor& vt = cross_v[l];
    TORCH_CHECK(kt.is_contiguous() && vt.is_contiguous() && kt.size(0) == groups && kt.size(2) == s,
                "cross keys/values must be (G, H, S, Dh), contiguous");
    const float* kp = kt.data_ptr<float>();
    const float* vp = vt.data_ptr<float>();
    for (int64_t r = 0; r < n; ++r) {
      const int64_t grp = r / g;
      const bool* blk = bp + grp * s;
      for (int64_t h = 0; h < heads; ++h) {
        const float* q = cqp + r * d + h * dh;
        const float* kh = kp + ((grp * heads + h) * s) * dh;
        float* p = cwp + ((r * layers + l) * heads + h) * s;
        for (int64_t j = 0; j < s; ++j) p[j] = blk[j] ? neg_inf : dot(q, kh + j * dh, dh) * scale_dot;
        softmax(p, s);
        weighted_sum(st.hp + r * d + h * dh, p, vp + ((grp * heads + h) * s) * dh, s, dh, dh);
      }
    }
    st.add_heads(p0 + 3);
    st.feed_forward(3 * l + 2, p0 + 4, p0 + 5);
  }
  Tensor logits = product(static_cast<size_t>(6 * layers), st.norm(3 * layers));
  return {at::log_softmax(logits, -1), self_w, cross_w};
}

// The encoder on the real (unpadded) positions only: every layer's self-attention weights
// (B, L, H, S, S) (rows and columns of padded positions zero) and the normed memory (B, S, D)
// (zero at padded positions), as Transformer.encode returns them.
std::tuple<Tensor, Tensor> int8_encode(
    const Tensor& x_in,             // (B, S, D) the embedded sources, positions added
    const Tensor& real,             // (B, S) bool: the real positions
    at::TensorList norms,           // per layer: attention, feed-forward (weight, bias); then the final norm
    at::TensorList weight,          // per layer: qkv, out, ff in, ff out
    at::TensorList packed,
    at::TensorList col_offsets,
    at::TensorList scales,
    at::TensorList bias,
    at::TensorList zeros,
    int64_t heads,
    double eps) {
  TORCH_CHECK(x_in.dim() == 3 && x_in.scalar_type() == at::kFloat, "x must be (B, S, D) float32");
  const int64_t layers = static_cast<int64_t>(weight.size()) / 4;
  TORCH_CHECK(weight.size() == static_cast<size_t>(4 * layers) && norms.size() == static_cast<size_t>(4 * layers + 2),
              "products: 4 per layer; norms: 4 per layer and 2");
  const int64_t b = x_in.size(0), s = x_in.size(1), d = x_in.size(2), dh = d / heads;
  TORCH_CHECK(dh * heads == d && real.size(0) == b && real.size(1) == s, "shapes");
  const Products product{weight, packed, col_offsets, scales, bias, zeros};
  const float scale_dot = 1.f / std::sqrt(static_cast<float>(dh));

  Tensor real_c = real.contiguous();
  const bool* rp = real_c.data_ptr<bool>();
  std::vector<int64_t> flat;             // the real positions, b * S + s
  std::vector<int64_t> start(b + 1, 0);  // sentence b's rows are start[b] .. start[b+1]-1
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t j = 0; j < s; ++j)
      if (rp[i * s + j]) flat.push_back(i * s + j);
    start[i + 1] = static_cast<int64_t>(flat.size());
  }
  const int64_t n = static_cast<int64_t>(flat.size());
  Tensor src = x_in.contiguous();
  const float* sp = src.data_ptr<float>();
  Tensor x = at::empty({n, d}, src.options());
  float* xp = x.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < d; ++i) xp[r * d + i] = sp[flat[r] * d + i];
  Stream st(x, norms, eps, product);
  Tensor weights = at::zeros({b, layers, heads, s, s}, src.options());
  float* wp = weights.data_ptr<float>();
  std::vector<float> row(static_cast<size_t>(s));

  for (int64_t l = 0; l < layers; ++l) {
    const size_t p0 = static_cast<size_t>(4 * l);
    Tensor qkv = product(p0, st.norm(2 * l));  // (N, 3D)
    const float* qp = qkv.data_ptr<float>();
    for (int64_t sent = 0; sent < b; ++sent) {
      const int64_t r0 = start[sent], len = start[sent + 1] - r0;
      for (int64_t qi = 0; qi < len; ++qi) {
        const int64_t pos_q = flat[r0 + qi] - sent * s;
        for (int64_t h = 0; h < heads; ++h) {
          const float* q = qp + (r0 + qi) * 3 * d + h * dh;
          const float* k0 = qp + r0 * 3 * d + d + h * dh;  // row kj's key: k0 + kj * 3D
          for (int64_t kj = 0; kj < len; ++kj) row[kj] = dot(q, k0 + kj * 3 * d, dh) * scale_dot;
          softmax(row.data(), len);
          float* wrow = wp + ((((sent * layers + l) * heads + h) * s) + pos_q) * s;
          for (int64_t kj = 0; kj < len; ++kj) wrow[flat[r0 + kj] - sent * s] = row[kj];
          weighted_sum(st.hp + (r0 + qi) * d + h * dh, row.data(), k0 + d, len, 3 * d, dh);
        }
      }
    }
    st.add_heads(p0 + 1);
    st.feed_forward(2 * l + 1, p0 + 2, p0 + 3);
  }
  const float* np = st.norm(2 * layers).data_ptr<float>();
  Tensor memory = at::zeros({b, s, d}, src.options());
  float* mp = memory.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < d; ++i) mp[flat[r] * d + i] = np[r * d + i];
  return {memory, weights};
}

}  // namespace

TORCH_LIBRARY(attnscope_native, m) {
  m.def(
      "int8_encode(Tensor x, Tensor real, Tensor[] norms, Tensor[] weight, Tensor[] packed, "
      "Tensor[] col_offsets, Tensor[] scales, Tensor[] bias, Tensor[] zeros, int heads, float eps) "
      "-> (Tensor, Tensor)",
      &int8_encode);
  m.def(
      "int8_step(Tensor tokens, Tensor embed, Tensor position, float embed_scale, Tensor[] caches, int t, "
      "Tensor[] cross_k, Tensor[] cross_v, Tensor blocked, Tensor[] norms, Tensor[] weight, Tensor[] packed, "
      "Tensor[] col_offsets, Tensor[] scales, Tensor[] bias, Tensor[] zeros, int heads, float eps) "
      "-> (Tensor, Tensor, Tensor)",
      &int8_step);
}
