// One decoding step's pass through the layers (engine.CausalLM.final_hidden with decoding.DecodeCache's
// attention), calling the same ATen ops in the same order as the Python code, so the results are bit-equal.
// At a decoding step's shapes, ~45 small ops a layer, calling each from Python cost ~1.7 µs more (argument
// parsing, wrapping): the whole step is 1.09-1.15x faster here on SmolLM2 (docs/benchmarks.md).
// native_decode.py builds this file and falls back to the Python code wherever it cannot.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

using at::Tensor;

namespace {

// x @ weight.T + bias by oneDNN's blocked copy of a bf16 weight (engine.CausalLM._packed), or F.linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, bool packed) {
  std::optional<Tensor> b = bias.numel() ? std::optional<Tensor>(bias) : std::nullopt;
  if (!packed) return at::linear(x, weight, b);
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
                       .typed<Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&, c10::string_view,
                                     c10::List<std::optional<at::Scalar>>, std::optional<c10::string_view>)>();
  return op.call(x, weight, b, "none", c10::List<std::optional<at::Scalar>>(), std::nullopt);
}

// As transformers' LlamaRMSNorm: the statistics in float32, the result in the weights' dtype.
Tensor norm(const Tensor& x, const Tensor& weight, double eps) {
  auto x32 = x.to(at::kFloat);
  auto normed = x32 * at::rsqrt(x32.pow(2).mean(-1, true) + eps);
  return weight * normed.to(x.scalar_type());
}

struct Attention {
  at::TensorList prefix_k, prefix_v, suffix_k, suffix_v;
  Tensor prefix_bias, suffix_bias, slot;  // empty where absent
  int64_t length, specs, per_spec, n_kv, groups, head_dim;
  double scale, neg_inf;

  // decoding.DecodeCache._attend: q (B, heads, 1, dim) and this step's k, v (B, kv, 1, dim).
  Tensor attend(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) const {
    const int64_t end = length + 1, batch = q.size(0), width = prefix_k[layer].size(2);
    const Tensor& sk = suffix_k[layer];
    const Tensor& sv = suffix_v[layer];
    sk.select(2, length).copy_(k.select(2, 0));
    sv.select(2, length).copy_(v.select(2, 0));
    auto query = q.to(at::kFloat).view({batch, n_kv, groups, head_dim}) * scale;
    auto own = at::matmul(query, sk.narrow(2, 0, end).transpose(-1, -2));
    if (suffix_bias.numel()) own = own + suffix_bias;
    if (slot.numel()) {
      query = query.new_zeros({specs * per_spec, n_kv, groups, head_dim}).index_copy_(0, slot, query);
      own = own.new_full({specs * per_spec, n_kv, groups, end}, neg_inf).index_copy_(0, slot, own);
    }
    auto grouped = query.view({specs, per_spec, n_kv, groups, head_dim}).transpose(1, 2).reshape({specs, n_kv, -1, head_dim});
    auto shared = at::matmul(grouped, prefix_k[layer].transpose(-1, -2));
    if (prefix_bias.numel()) shared = shared + prefix_bias;
    shared = shared.view({specs, n_kv, per_spec, groups, width}).transpose(1, 2);
    auto weights = at::cat({shared, own.view({specs, per_spec, n_kv, groups, end})}, -1).softmax(-1);
    auto shared_weights = weights.narrow(-1, 0, width).transpose(1, 2).reshape({specs, n_kv, -1, width});
    auto out = at::matmul(shared_weights, prefix_v[layer]).view({specs, n_kv, per_spec, groups, head_dim}).transpose(1, 2);
    out = out.reshape({specs * per_spec, n_kv, groups, head_dim});
    auto own_weights = weights.narrow(-1, width, end).reshape({specs * per_spec, n_kv, groups, end});
    if (slot.numel()) {
      out = out.index_select(0, slot);
      own_weights = own_weights.index_select(0, slot);
    }
    out = out + at::matmul(own_weights, sv.narrow(2, 0, end));
    return out.reshape({batch, n_kv * groups, 1, head_dim}).to(q.scalar_type());
  }
};

// h: the step's embeddings (B, 1, hidden); cos, sin: engine.CausalLM._rope's; layers: per layer
// [input norm, qkv weight, qkv bias, o weight, o bias, post norm, gate_up weight, gate_up bias, down weight,
// down bias], an absent bias as an empty tensor; the attention's tensors as decoding.DecodeCache holds them.
Tensor decode_hidden(Tensor h, const Tensor& cos, const Tensor& sin, at::TensorList layers, const Tensor& final_norm,
                     bool packed, double eps, int64_t n_heads, at::TensorList prefix_k, at::TensorList prefix_v,
                     at::TensorList suffix_k, at::TensorList suffix_v, const Tensor& prefix_bias,
                     const Tensor& suffix_bias, const Tensor& slot, int64_t length, int64_t specs, int64_t per_spec,
                     double scale, double neg_inf) {
  const int64_t n_kv = prefix_k[0].size(1), head_dim = prefix_k[0].size(3), batch = h.size(0);
  const int64_t heads = n_heads + n_kv, n_layers = static_cast<int64_t>(prefix_k.size());
  const Attention attention{prefix_k, prefix_v, suffix_k, suffix_v, prefix_bias, suffix_bias, slot,
                            length, specs, per_spec, n_kv, n_heads / n_kv, head_dim, scale, neg_inf};
  const int threads = at::get_num_threads();
  for (int64_t layer = 0; layer < n_layers; ++layer) {
    const Tensor* w = &layers[10 * layer];
    auto x = norm(h, w[0], eps);
    auto qkv = linear(x, w[1], w[2], packed);
    auto qk = qkv.narrow(-1, 0, heads * head_dim).view({batch, 1, heads, head_dim}).transpose(1, 2);
    qk = qk * cos + qk.roll(head_dim / 2, -1) * sin;
    auto v = qkv.narrow(-1, heads * head_dim, n_kv * head_dim).view({batch, 1, n_kv, head_dim}).transpose(1, 2);
    // one thread, as DecodeCache.attend: each parallel region is a barrier a descheduled thread stalls
    if (threads > 1) at::set_num_threads(1);
    auto attn = attention.attend(layer, qk.narrow(1, 0, n_heads), qk.narrow(1, n_heads, n_kv), v);
    if (threads > 1) at::set_num_threads(threads);
    attn = attn.transpose(1, 2).reshape({batch, 1, n_heads * head_dim});
    h = h + linear(attn, w[3], w[4], packed);
    x = norm(h, w[5], eps);
    auto gate_up = linear(x, w[6], w[7], packed);
    const int64_t half = gate_up.size(-1) / 2;
    h = h + linear(at::silu(gate_up.narrow(-1, 0, half)) * gate_up.narrow(-1, half, half), w[8], w[9], packed);
  }
  return norm(h, final_norm, eps);
}

}  // namespace

TORCH_LIBRARY(hermes_rl_decode, m) {
  m.def(
      "decode_hidden(Tensor h, Tensor cos, Tensor sin, Tensor[] layers, Tensor final_norm, bool packed, float eps, "
      "int n_heads, Tensor[] prefix_k, Tensor[] prefix_v, Tensor[] suffix_k, Tensor[] suffix_v, Tensor prefix_bias, "
      "Tensor suffix_bias, Tensor slot, int length, int specs, int per_spec, float scale, float neg_inf) -> Tensor",
      decode_hidden);
}
