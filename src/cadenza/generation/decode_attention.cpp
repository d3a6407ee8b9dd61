// cadenza::decode_attention: one new token's attention over a KV cache, for the compiled decode
// step (cadenza/generation/step.py; built and loaded by cadenza/generation/kernel.py).
//
// For each (row, head), in parallel: score every cached key with vector FMAs (with relative attention
// the distance embedding of slot j, E[n - j], is added to the key in the same loop), take the softmax
// over the n cached scores and the new token's own score with a vectorized exp, and sum the value rows
// in registers. The cache is read once, in its layout, through its strides (the step passes views of
// a full-context cache). Inductor's loops for the same arithmetic read the cache at about a third of
// this speed (docs/benchmarks.md, "Generation speed").
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/cpu/vec/functional.h>
#include <cmath>
#include <vector>
#include <algorithm>

namespace {
using Vec = at::vec::Vectorized<float>;

struct Head {
  const float *q, *k, *v, *e, *k_self, *v_self;
  int64_t n, kj, vj, ej;
  float* out;
};

template <int NV>
inline float dot_row(const Vec* q, const float* k, const float* e) {
  Vec acc(0.f);
  for (int i = 0; i < NV; ++i) {
    Vec kk = Vec::loadu(k + i * Vec::size());
    if (e) kk = kk + Vec::loadu(e + i * Vec::size());
    acc = at::vec::fmadd(q[i], kk, acc);
  }
  return at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return a + b; }, acc);
}

template <int NV>  // NV vectors a head
void attend_head(const Head& h, float* s) {
  Vec q[NV];
  for (int i = 0; i < NV; ++i) q[i] = Vec::loadu(h.q + i * Vec::size());
  float m = -INFINITY;
  for (int64_t j = 0; j < h.n; ++j) {
    s[j] = dot_row<NV>(q, h.k + j * h.kj, h.e ? h.e + (h.n - j) * h.ej : nullptr);
    m = std::max(m, s[j]);
  }
  s[h.n] = dot_row<NV>(q, h.k_self, nullptr);
  m = std::max(m, s[h.n]);
  const int64_t len = h.n + 1;
  at::vec::map([m](Vec x) { return (x - Vec(m)).exp_u20(); }, s, s, len);
  const float total = at::vec::reduce_all<float>([](Vec& a, Vec& b) { return a + b; }, s, len);
  Vec acc[NV];
  const Vec ws(s[h.n]);
  for (int i = 0; i < NV; ++i) acc[i] = ws * Vec::loadu(h.v_self + i * Vec::size());
  for (int64_t j = 0; j < h.n; ++j) {
    const Vec w(s[j]);
    const float* row = h.v + j * h.vj;
    for (int i = 0; i < NV; ++i) acc[i] = at::vec::fmadd(w, Vec::loadu(row + i * Vec::size()), acc[i]);
  }
  const Vec inv(1.f / total);
  for (int i = 0; i < NV; ++i) (acc[i] * inv).store(h.out + i * Vec::size());
}

void attend_head_any(const Head& h, int64_t D, float* s) {  // any head size: plain loops
  float m = -INFINITY;
  for (int64_t j = 0; j <= h.n; ++j) {
    const float* k = j < h.n ? h.k + j * h.kj : h.k_self;
    const float* e = (j < h.n && h.e) ? h.e + (h.n - j) * h.ej : nullptr;
    float a = 0.f;
    for (int64_t i = 0; i < D; ++i) a += h.q[i] * (e ? k[i] + e[i] : k[i]);
    s[j] = a;
    m = std::max(m, a);
  }
  float total = 0.f;
  for (int64_t j = 0; j <= h.n; ++j) total += (s[j] = std::exp(s[j] - m));
  for (int64_t i = 0; i < D; ++i) {
    float a = s[h.n] * h.v_self[i];
    for (int64_t j = 0; j < h.n; ++j) a += s[j] * h.v[j * h.vj + i];
    h.out[i] = a / total;
  }
}

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& kc, const at::Tensor& vc,
                            const std::optional<at::Tensor>& rel, const at::Tensor& k_self,
                            const at::Tensor& v_self) {
  TORCH_CHECK(q.dim() == 3 && kc.dim() == 4 && vc.dim() == 4, "decode_attention: bad ranks");
  for (const auto* t : {&q, &kc, &vc, &k_self, &v_self})
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->device().is_cpu(), "decode_attention: float32 CPU tensors only");
  const int64_t B = kc.size(0), H = kc.size(1), n = kc.size(2), D = kc.size(3);
  TORCH_CHECK(vc.sizes() == kc.sizes() && q.size(0) == B && q.size(1) == H && q.size(2) == D &&
              k_self.sizes() == q.sizes() && v_self.sizes() == q.sizes(),
              "decode_attention: shapes do not match");
  TORCH_CHECK(kc.stride(3) == 1 && vc.stride(3) == 1, "decode_attention: cache rows must be contiguous");
  auto qq = q.contiguous(), ks = k_self.contiguous(), vs = v_self.contiguous();
  at::Tensor r;
  if (rel.has_value() && rel->defined()) {
    r = rel->contiguous();
    TORCH_CHECK(r.scalar_type() == at::kFloat && r.dim() == 3 && r.size(0) == H && r.size(2) == D && r.size(1) > n,
                "decode_attention: rel must be (heads, > n, head_dim) float32");
  }
  auto out = at::empty({B, H, D}, q.options());
  const float* Q = qq.data_ptr<float>();
  const float* K = kc.data_ptr<float>();
  const float* V = vc.data_ptr<float>();
  const float* R = r.defined() ? r.data_ptr<float>() : nullptr;
  float* O = out.data_ptr<float>();
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> s(n + 1);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      Head hd{Q + bh * D, K + b * kc.stride(0) + h * kc.stride(1), V + b * vc.stride(0) + h * vc.stride(1),
              R ? R + h * r.stride(0) : nullptr, ks.data_ptr<float>() + bh * D, vs.data_ptr<float>() + bh * D,
              n, kc.stride(2), vc.stride(2), R ? r.stride(1) : 0, O + bh * D};
      switch (D % Vec::size() ? 0 : D / Vec::size()) {
        case 1: attend_head<1>(hd, s.data()); break;
        case 2: attend_head<2>(hd, s.data()); break;
        case 4: attend_head<4>(hd, s.data()); break;
        case 8: attend_head<8>(hd, s.data()); break;
        case 16: attend_head<16>(hd, s.data()); break;
        default: attend_head_any(hd, D, s.data());
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(cadenza, CPU, m) {
  m.impl("decode_attention", &decode_attention);
}
