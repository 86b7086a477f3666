// The suite's own operator library, as a LibTorch user writes one: namespace `xport_ops`, three
// operators with schemas, kernels for CPU and CUDA and a Meta (fake) kernel each, plus one
// operator with a CPU kernel only (its export error says how to add the Meta kernel).
//   rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor
//   fused_bias_gelu(Tensor x, Tensor bias) -> Tensor                     gelu(x + bias, 'tanh')
//   top_k_gate(Tensor logits, int k=2) -> (Tensor weights, Tensor indices)  softmax over the top k
//   cpu_only_scale(Tensor x, float s) -> Tensor
//   kv_write_(Tensor(a!) cache, Tensor pos, Tensor update) -> ()         cache.index_copy_(-2, pos, update)
//   scale_add_(Tensor(a!) buf, Tensor x, float s) -> ()                  buf = buf * s + x
//   accumulate(Tensor x, Tensor(a!) total) -> Tensor                     total += x; returns x * 2
//   log_stat(Tensor x, str tag) -> Tensor                                x.sum(), an op with an effect in Python
// tests/python/xport_ops.py registers the same schemas and computations in Python (torch.library),
// so that torch.export programs using them run in both. And GatedBlock: a pre-norm transformer
// block (causal self-attention, then a top-2 gated mixture of four expert MLPs) written with them.
//
// The library is registered by load_custom_ops() (once per process), as a user's program loads
// its operator library before it loads programs that use it: TORCH_LIBRARY's static registration
// cannot sit in a header that several test files include.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <tuple>
#include <vector>

#include <torch/library.h>
#include <torch/torch.h>

namespace xport_test {

namespace custom_kernels {

inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return x * at::rsqrt(x.pow(2).mean({-1}, /*keepdim=*/true) + eps) * weight;
}
inline at::Tensor rms_norm_meta(const at::Tensor& x, const at::Tensor& weight, double) {
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1), "xport_ops::rms_norm: weight of ",
              weight.sizes(), " does not match the last dim of x, ", x.sizes());
  return at::empty_like(x, at::MemoryFormat::Contiguous);
}
inline at::Tensor fused_bias_gelu(const at::Tensor& x, const at::Tensor& bias) { return at::gelu(x + bias, "tanh"); }
inline at::Tensor fused_bias_gelu_meta(const at::Tensor& x, const at::Tensor& bias) {
  return at::empty(at::infer_size(x.sizes(), bias.sizes()), x.options());
}
inline std::tuple<at::Tensor, at::Tensor> top_k_gate(const at::Tensor& logits, std::int64_t k) {
  auto [values, indices] = at::topk(logits, k, -1);
  return {at::softmax(values, -1), indices};
}
inline std::tuple<at::Tensor, at::Tensor> top_k_gate_meta(const at::Tensor& logits, std::int64_t k) {
  TORCH_CHECK(k >= 1 && k <= logits.size(-1), "xport_ops::top_k_gate: k = ", k, " is not in [1, ", logits.size(-1), "]");
  auto sizes = logits.sizes().vec();
  sizes.back() = k;
  return {at::empty(sizes, logits.options()), at::empty(sizes, logits.options().dtype(at::kLong))};
}
inline at::Tensor cpu_only_scale(const at::Tensor& x, double s) { return x * s; }
// the mutating ones (torch.export lowers them to auto_functionalized_v2) and one with an effect
inline void kv_write_(at::Tensor& cache, const at::Tensor& pos, const at::Tensor& update) {
  cache.index_copy_(-2, pos, update);
}
inline void kv_write_meta(at::Tensor&, const at::Tensor&, const at::Tensor&) {}
inline void scale_add_(at::Tensor& buf, const at::Tensor& x, double s) { buf.mul_(s).add_(x); }
inline void scale_add_meta(at::Tensor&, const at::Tensor&, double) {}
inline at::Tensor accumulate(const at::Tensor& x, at::Tensor& total) {
  total.add_(x);
  return x * 2;
}
inline at::Tensor accumulate_meta(const at::Tensor& x, at::Tensor&) { return at::empty_like(x); }
inline at::Tensor log_stat(const at::Tensor& x, c10::string_view) { return x.sum().reshape({1}); }
inline at::Tensor log_stat_meta(const at::Tensor& x, c10::string_view) { return at::empty({1}, x.options()); }

}  // namespace custom_kernels

/// Registers the `xport_ops` library (schemas, CPU, CUDA and Meta kernels) once per process.
inline void load_custom_ops() {
  static const auto libraries = [] {
    namespace k = custom_kernels;
    std::vector<std::unique_ptr<torch::Library>> libs;
    auto& def = *libs.emplace_back(std::make_unique<torch::Library>(torch::Library::DEF, "xport_ops", c10::nullopt, __FILE__, __LINE__));
    def.def("rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor");
    def.def("fused_bias_gelu(Tensor x, Tensor bias) -> Tensor");
    def.def("top_k_gate(Tensor logits, int k=2) -> (Tensor weights, Tensor indices)");
    def.def("cpu_only_scale(Tensor x, float s) -> Tensor");
    def.def("kv_write_(Tensor(a!) cache, Tensor pos, Tensor update) -> ()");
    def.def("scale_add_(Tensor(a!) buf, Tensor x, float s) -> ()");
    def.def("accumulate(Tensor x, Tensor(a!) total) -> Tensor");
    def.def("log_stat(Tensor x, str tag) -> Tensor");
    for (auto key : {c10::DispatchKey::CPU, c10::DispatchKey::CUDA}) {
      auto& impl = *libs.emplace_back(std::make_unique<torch::Library>(torch::Library::IMPL, "xport_ops", key, __FILE__, __LINE__));
      impl.impl("rms_norm", &k::rms_norm);
      impl.impl("fused_bias_gelu", &k::fused_bias_gelu);
      impl.impl("top_k_gate", &k::top_k_gate);
      if (key == c10::DispatchKey::CPU) impl.impl("cpu_only_scale", &k::cpu_only_scale);
      impl.impl("kv_write_", &k::kv_write_);
      impl.impl("scale_add_", &k::scale_add_);
      impl.impl("accumulate", &k::accumulate);
      impl.impl("log_stat", &k::log_stat);
    }
    auto& meta = *libs.emplace_back(std::make_unique<torch::Library>(torch::Library::IMPL, "xport_ops", c10::DispatchKey::Meta, __FILE__, __LINE__));
    meta.impl("rms_norm", &k::rms_norm_meta);
    meta.impl("fused_bias_gelu", &k::fused_bias_gelu_meta);
    meta.impl("top_k_gate", &k::top_k_gate_meta);
    meta.impl("kv_write_", &k::kv_write_meta);
    meta.impl("scale_add_", &k::scale_add_meta);
    meta.impl("accumulate", &k::accumulate_meta);
    meta.impl("log_stat", &k::log_stat_meta);
    return libs;
  }();
  (void)libraries;
}

// ---- calling them from C++, as a user's code does (through the dispatcher) ----------------------

namespace custom {

inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps = 1e-6) {
  load_custom_ops();
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("xport_ops::rms_norm", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, weight, eps);
}
inline at::Tensor fused_bias_gelu(const at::Tensor& x, const at::Tensor& bias) {
  load_custom_ops();
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("xport_ops::fused_bias_gelu", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(x, bias);
}
inline std::tuple<at::Tensor, at::Tensor> top_k_gate(const at::Tensor& logits, std::int64_t k = 2) {
  load_custom_ops();
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("xport_ops::top_k_gate", "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, std::int64_t)>();
  return op.call(logits, k);
}
inline at::Tensor cpu_only_scale(const at::Tensor& x, double s) {
  load_custom_ops();
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("xport_ops::cpu_only_scale", "")
                             .typed<at::Tensor(const at::Tensor&, double)>();
  return op.call(x, s);
}

inline void kv_write_(at::Tensor& cache, const at::Tensor& pos, const at::Tensor& update) {
  load_custom_ops();
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("xport_ops::kv_write_", "")
                             .typed<void(at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  op.call(cache, pos, update);
}
inline void scale_add_(at::Tensor& buf, const at::Tensor& x, double s) {
  load_custom_ops();
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("xport_ops::scale_add_", "")
                             .typed<void(at::Tensor&, const at::Tensor&, double)>();
  op.call(buf, x, s);
}
inline at::Tensor accumulate(const at::Tensor& x, at::Tensor& total) {
  load_custom_ops();
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("xport_ops::accumulate", "")
                             .typed<at::Tensor(const at::Tensor&, at::Tensor&)>();
  return op.call(x, total);
}

}  // namespace custom

/// A decoder step's cache, written by the suite's in-place kernels: the KV cache through
/// kv_write_ (as an in-place cache kernel does), a running sum through scale_add_ (on the
/// whole buffer and on a slice of it), a total through accumulate (which also returns).
struct CacheWriterImpl : torch::nn::Module {
  CacheWriterImpl() {
    cache = register_buffer("cache", torch::zeros({2, 6, 4}));
    running = register_buffer("running", torch::zeros({2, 4}));
    total = register_buffer("total", torch::zeros({2, 4}));
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& pos) {
    custom::kv_write_(cache, pos, x);
    custom::scale_add_(running, x.sum(0), 0.5);
    auto part = running.slice(0, 1, 2);
    custom::scale_add_(part, x[0].slice(0, 0, 1), 2.0);
    auto y = custom::accumulate(x.sum(1), total);
    return y + cache.sum(1);
  }
  at::Tensor cache, running, total;
};
TORCH_MODULE(CacheWriter);

/// One expert of the mixture: up-projection, the fused bias + GELU, down-projection.
struct ExpertImpl : torch::nn::Module {
  ExpertImpl(std::int64_t d, std::int64_t hidden)
      : up(torch::nn::LinearOptions(d, hidden).bias(false)), down(hidden, d) {
    register_module("up", up);
    register_module("down", down);
    up_bias = register_parameter("up_bias", torch::randn({hidden}) * 0.1);
  }
  at::Tensor forward(const at::Tensor& x) { return down(custom::fused_bias_gelu(up(x), up_bias)); }
  torch::nn::Linear up, down;
  at::Tensor up_bias;
};
TORCH_MODULE(Expert);

/// A pre-norm transformer block with the suite's operators: x [batch, seq, d] ->
///   x + attention(rms_norm(x)), then + a top-2 gated mixture of experts of rms_norm of that.
/// The mixture is dense (every expert runs; the gate weights select), as routers are exported
/// when their token counts must not depend on data.
struct GatedBlockImpl : torch::nn::Module {
  explicit GatedBlockImpl(std::int64_t d = 32, std::int64_t heads = 4, std::int64_t experts = 4, std::int64_t hidden = 64)
      : d_(d), heads_(heads), qkv(d, 3 * d), proj(d, d), router(torch::nn::LinearOptions(d, experts).bias(false)) {
    norm1 = register_parameter("norm1", torch::ones({d}) + torch::randn({d}) * 0.1);
    norm2 = register_parameter("norm2", torch::ones({d}) + torch::randn({d}) * 0.1);
    register_module("qkv", qkv);
    register_module("proj", proj);
    register_module("router", router);
    for (std::int64_t e = 0; e < experts; ++e) experts_->push_back(Expert(d, hidden));
    register_module("experts", experts_);
  }
  at::Tensor forward(at::Tensor x) {
    const auto b = x.size(0), t = x.size(1), dh = d_ / heads_;
    auto h = custom::rms_norm(x, norm1);
    auto parts = qkv(h).view({b, t, 3, heads_, dh}).permute({2, 0, 3, 1, 4});
    auto q = parts[0], k = parts[1], v = parts[2];
    auto scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(dh));
    auto mask = at::ones({t, t}, x.options().dtype(at::kBool)).triu(1);
    auto attn = at::softmax(scores.masked_fill(mask, -std::numeric_limits<double>::infinity()), -1);
    x = x + proj(at::matmul(attn, v).transpose(1, 2).reshape({b, t, d_}));
    h = custom::rms_norm(x, norm2);
    auto [weights, chosen] = custom::top_k_gate(router(h), 2);
    auto mixed = at::zeros_like(x);
    for (std::int64_t e = 0; e < static_cast<std::int64_t>(experts_->size()); ++e) {
      auto gate = (weights * chosen.eq(e)).sum(-1, /*keepdim=*/true);
      mixed = mixed + gate * experts_[e]->as<Expert>()->forward(h);
    }
    return x + mixed;
  }
  std::int64_t d_, heads_;
  at::Tensor norm1, norm2;
  torch::nn::Linear qkv, proj, router;
  torch::nn::ModuleList experts_;
};
TORCH_MODULE(GatedBlock);

}  // namespace xport_test
