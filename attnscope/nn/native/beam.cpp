// Beam search's bookkeeping on the CPU, each part as one operation: the candidate selection
// (top_candidates, attnscope.decoding.beam.top_candidates; best_words, greedy's) and the reordering of the decoder's
// self-attention caches after it (select_rows, attnscope.nn.kv_cache.select_all).
//
// Each step of beam search keeps the `count` best extensions of every sentence: over its rows
// r and words w, score[r] + log_prob[r, w], with padding and BOS never chosen. In PyTorch that is
// two column fills, a sum over all (rows, vocabulary) entries, a topk and a gather; at one
// sentence of 5 beams over 8,000 words the topk alone took ~95 us of a ~700 us decoder step.
// Here one pass over each sentence's log-probabilities keeps a heap of the best `count`: the same
// sums (the same float additions, so the same values), ties broken towards the lower index.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

namespace {

using at::Tensor;

struct Candidate {
  float value;
  int64_t index;  // row_in_group * vocab + word
};

// The better of two candidates: the higher value, among equal values the lower index. As the
// heap's order it puts the worst kept candidate on top.
inline bool better(const Candidate& a, const Candidate& b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

constexpr int64_t block = 32;

// Whether any of the block's `block` values is above `bound`: comparisons the compiler
// vectorises (with AVX2 where the CPU has it).
#if defined(__x86_64__) && defined(__GLIBC__)  // function versions chosen at load time (ifunc)
__attribute__((target_clones("avx2", "default")))
#endif
bool any_above(const float* p, float bound) {
  int any = 0;
  for (int64_t i = 0; i < block; ++i) any |= p[i] > bound;
  return any;
}

// scores (N,), log_probs (N, V), float32; the N rows are `groups` sentences of N / groups
// consecutive rows. Returns, per sentence and best first, the `count` best candidates' scores
// (G, count), flat indices row_in_group * V + word (G, count) and log-probabilities (G, count).
// Words in `banned` count as log-probability -inf, as after attnscope.decoding.output.never_emit.
std::tuple<Tensor, Tensor, Tensor> top_candidates(
    const Tensor& scores, const Tensor& log_probs, int64_t groups, int64_t count, at::IntArrayRef banned) {
  TORCH_CHECK(log_probs.dim() == 2 && scores.dim() == 1 && scores.size(0) == log_probs.size(0),
              "top_candidates: scores (N,) and log_probs (N, V)");
  TORCH_CHECK(log_probs.scalar_type() == at::kFloat && scores.scalar_type() == at::kFloat,
              "top_candidates: float32 only");
  TORCH_CHECK(log_probs.device().is_cpu() && scores.device().is_cpu(), "top_candidates: CPU only");
  const Tensor lp = log_probs.contiguous(), sc = scores.contiguous();
  const int64_t rows = lp.size(0), vocab = lp.size(1);
  TORCH_CHECK(groups > 0 && rows % groups == 0, "top_candidates: rows must split into groups");
  const int64_t width = rows / groups;
  TORCH_CHECK(count >= 1 && count <= width * vocab, "top_candidates: count out of range");

  std::vector<char> ban(vocab, 0);
  for (int64_t b : banned) {
    if (b >= 0 && b < vocab) ban[b] = 1;
  }
  const float neg = -std::numeric_limits<float>::infinity();
  Tensor values = at::empty({groups, count}, lp.options());
  Tensor indices = at::empty({groups, count}, lp.options().dtype(at::kLong));
  Tensor chosen = at::empty({groups, count}, lp.options());
  const float* L = lp.data_ptr<float>();
  const float* S = sc.data_ptr<float>();
  float* V = values.data_ptr<float>();
  int64_t* I = indices.data_ptr<int64_t>();
  float* C = chosen.data_ptr<float>();

  std::vector<Candidate> heap;
  heap.reserve(count);
  for (int64_t g = 0; g < groups; ++g) {
    heap.clear();
    float worst = neg;
    for (int64_t r = 0; r < width; ++r) {
      const float s = S[g * width + r];
      const float* p = L + (g * width + r) * vocab;
      const int64_t base = r * vocab;
      int64_t w = 0;
      for (; w < vocab && static_cast<int64_t>(heap.size()) < count; ++w) {  // the first `count`
        heap.push_back({ban[w] ? neg : s + p[w], base + w});
        std::push_heap(heap.begin(), heap.end(), better);
        worst = heap.front().value;
      }
      if (s == neg) continue;  // a dead hypothesis: every sum is -inf, none beats a kept one
      auto offer = [&](int64_t end) {
        for (; w < end; ++w) {
          const float v = s + p[w];
          // a later candidate equal to the worst kept one loses the tie (higher index)
          if (v > worst && !ban[w]) {
            std::pop_heap(heap.begin(), heap.end(), better);
            heap.back() = {v, base + w};
            std::push_heap(heap.begin(), heap.end(), better);
            worst = heap.front().value;
          }
        }
      };
      offer(std::min(vocab, (w + block - 1) / block * block));  // up to a block boundary
      for (; w + block <= vocab;) {
        // Most blocks hold no candidate: test a whole block with comparisons the compiler
        // vectorises, against a bound a little below the exact one (worst - s, rounded), then
        // take the exact sums only in the blocks that pass.
        const float bound = worst - s - (std::fabs(worst) + std::fabs(s)) * 1e-5f;
        if (any_above(p + w, bound)) {
          offer(w + block);
        } else {
          w += block;
        }
      }
      offer(vocab);
    }
    std::sort_heap(heap.begin(), heap.end(), better);  // best first
    for (int64_t i = 0; i < count; ++i) {
      const Candidate& c = heap[i];
      const int64_t word = c.index % vocab;
      V[g * count + i] = c.value;
      I[g * count + i] = c.index;
      C[g * count + i] = ban[word] ? neg : L[(g * width + c.index / vocab) * vocab + word];
    }
  }
  return {values, indices, chosen};
}

// Greedy decoding's choice: each row's likeliest word of log_probs (N, V) outside `banned`, as
// (log-probability (N,), word (N,)); top_candidates with one candidate per row, so ties go to
// the lower word as PyTorch's max does.
std::tuple<Tensor, Tensor> best_words(const Tensor& log_probs, at::IntArrayRef banned) {
  TORCH_CHECK(log_probs.dim() == 2 && log_probs.size(0) > 0, "best_words: log_probs (N, V), N > 0");
  const int64_t rows = log_probs.size(0);
  auto ranked = top_candidates(at::zeros({rows}, log_probs.options()), log_probs, rows, 1, banned);
  return {std::get<2>(ranked).view({rows}), std::get<1>(ranked).view({rows})};
}

// buffers: caches (2, N, H, capacity, Dh), contiguous, one dtype; lengths: the positions filled
// in each. Returns, per cache, a new buffer (2, N', H, capacity, Dh) holding the rows `indices`
// (N',) of the old one in its first `length` positions (the rest not written), as
// KVCache.select's index_select does for one cache; one call for all layers.
std::vector<Tensor> select_rows(at::TensorList buffers, const Tensor& indices, at::IntArrayRef lengths) {
  TORCH_CHECK(buffers.size() == lengths.size(), "select_rows: one length per buffer");
  TORCH_CHECK(indices.dim() == 1 && indices.scalar_type() == at::kLong && indices.device().is_cpu(),
              "select_rows: indices (N',) int64 on the CPU");
  const Tensor idx = indices.contiguous();
  const int64_t* I = idx.data_ptr<int64_t>();
  const int64_t picked = idx.size(0);
  std::vector<Tensor> out;
  out.reserve(buffers.size());
  for (size_t b = 0; b < buffers.size(); ++b) {
    const Tensor& old = buffers[b];
    TORCH_CHECK(old.dim() == 5 && old.size(0) == 2 && old.is_contiguous() && old.device().is_cpu(),
                "select_rows: buffers (2, N, H, capacity, Dh), contiguous, on the CPU");
    const int64_t rows = old.size(1), heads = old.size(2), capacity = old.size(3), dim = old.size(4);
    TORCH_CHECK(lengths[b] >= 0 && lengths[b] <= capacity, "select_rows: length beyond the buffer");
    Tensor data = at::empty({2, picked, heads, capacity, dim}, old.options());
    const size_t item = old.element_size();
    const size_t filled = static_cast<size_t>(lengths[b] * dim) * item;  // bytes per (row, head)
    const size_t head_stride = static_cast<size_t>(capacity * dim) * item;
    const char* src = static_cast<const char*>(old.data_ptr());
    char* dst = static_cast<char*>(data.data_ptr());
    for (int64_t i = 0; i < picked; ++i) {
      TORCH_CHECK(I[i] >= 0 && I[i] < rows, "select_rows: index ", I[i], " out of range for ", rows, " rows");
    }
    for (int64_t kv = 0; kv < 2; ++kv) {
      for (int64_t i = 0; i < picked; ++i) {
        const char* from = src + static_cast<size_t>(kv * rows + I[i]) * heads * head_stride;
        char* to = dst + static_cast<size_t>(kv * picked + i) * heads * head_stride;
        for (int64_t h = 0; h < heads; ++h) std::memcpy(to + h * head_stride, from + h * head_stride, filled);
      }
    }
    out.push_back(data);
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(attnscope_native, m) {
  m.def(
      "top_candidates(Tensor scores, Tensor log_probs, int groups, int count, int[] banned) "
      "-> (Tensor, Tensor, Tensor)",
      &top_candidates);
  m.def("best_words(Tensor log_probs, int[] banned) -> (Tensor, Tensor)", &best_words);
  m.def("select_rows(Tensor[] buffers, Tensor indices, int[] lengths) -> Tensor[]", &select_rows);
}
