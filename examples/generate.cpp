// examples/generate.cpp: text generation from a decoder-only LM that transformers' static-cache
// export path wrote (transformers.integrations.executorch.TorchExportableModuleForDecoderOnlyLM,
// what ExecuTorch's llama runner runs): the prompt prefilled, then one token a call, greedy or
// sampled (temperature, top-k, top-p), the KV cache living in the program's buffers.
//
//   generate DECODE.pt2 --prompt 3,17,42,8,25 [--prefill PREFILL.pt2] [--new 8]
//            [--temperature 0.8 --top-k 10 --top-p 0.9 --seed 7] [--engine]
//
// DECODE.pt2 takes (input_ids [1, 1], cache_position [1]); PREFILL.pt2, when given, takes the
// whole prompt at once (input_ids [1, seq], cache_position [seq], seq a dynamic Dim) and shares
// nothing with it but the file's weights: its cache is copied into the decoder's after the call.
// Without it the prompt goes through DECODE.pt2 one token a call. Prints the tokens, one line,
// and the time per generated token on standard error. tests/python/generate.py checks the tokens
// against Python's ep.module() with the same sampling, step for step.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ATen.h>

#include <xport/engine.hpp>
#include <xport/xport.hpp>

namespace {

struct options {
  std::string decode, prefill;
  std::vector<std::int64_t> prompt;
  std::int64_t new_tokens = 8, top_k = 0, seed = 0;
  double temperature = 0, top_p = 1;  // temperature 0: greedy
  bool engine = false;
};

/// The next token from the last position's logits: the most likely (temperature 0), or drawn
/// from softmax(logits / temperature) restricted to the top_k most likely tokens and to the
/// fewest most likely ones whose probabilities reach top_p (the same steps as Python's in
/// tests/python/generate.py, so a seed gives the same tokens).
std::int64_t pick(const at::Tensor& logits, const options& o, at::Generator& gen) {
  if (o.temperature <= 0) return logits.argmax().item<std::int64_t>();
  auto x = logits.to(at::kFloat) / o.temperature;
  const auto ninf = -std::numeric_limits<float>::infinity();
  if (o.top_k > 0 && o.top_k < x.numel()) x = x.masked_fill(x < std::get<0>(x.topk(o.top_k)).select(0, o.top_k - 1), ninf);
  if (o.top_p < 1) {
    const auto [sorted, order] = x.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true);
    const auto probs = sorted.softmax(0);
    const auto beyond = (probs.cumsum(0) - probs) > o.top_p;  // after the smallest prefix reaching top_p
    x = at::empty_like(x).scatter(0, order, sorted.masked_fill(beyond, ninf));
  }
  return at::multinomial(x.softmax(0), 1, /*replacement=*/false, gen).item<std::int64_t>();
}

/// One call of a program: the interpreter, or an engine over it.
struct runner {
  xport::exported_program& p;
  std::optional<xport::engine> e;
  runner(xport::exported_program& q, bool engine) : p(q) {
    if (engine) e.emplace(p);
  }
  at::Tensor operator()(const at::Tensor& ids, const at::Tensor& pos) { return e ? e->run({ids, pos})[0] : xport::run(p, {ids, pos})[0]; }
};

/// The prompt through PREFILL.pt2 at once; its buffers (the cache and its counters) copied into
/// the decoder's. Returns the last position's logits.
at::Tensor prefill(xport::exported_program& decoder, const options& o) {
  auto p = xport::load(o.prefill);
  runner run(p, o.engine);
  const auto n = static_cast<std::int64_t>(o.prompt.size());
  const auto logits = run(at::tensor(o.prompt, at::kLong).view({1, n}), at::arange(n, at::kLong));
  for (const auto& spec : p.signature().input_specs) {
    if (spec.kind != xport::input_kind::buffer || !spec.target) continue;
    const auto* from = p.state_dict().find(*spec.target);
    if (!from) from = p.constants().find(*spec.target);
    const auto* to = decoder.state_dict().find(*spec.target);
    if (!to) to = decoder.constants().find(*spec.target);
    if (from && to) to->copy_(*from);
  }
  return logits[0][-1];
}

std::vector<std::int64_t> generate(const options& o) {
  auto decoder = xport::load(o.decode);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(o.seed));
  std::vector<std::int64_t> tokens = o.prompt;
  const auto n = static_cast<std::int64_t>(o.prompt.size());
  at::Tensor last;
  if (!o.prefill.empty()) last = prefill(decoder, o);
  runner step(decoder, o.engine);
  if (o.prefill.empty())
    for (std::int64_t pos = 0; pos < n; ++pos)
      last = step(at::tensor({tokens[pos]}, at::kLong).view({1, 1}), at::tensor({pos}, at::kLong))[0][-1];
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t k = 0; k < o.new_tokens; ++k) {
    tokens.push_back(pick(last, o, gen));
    if (k + 1 == o.new_tokens) break;
    const auto pos = static_cast<std::int64_t>(tokens.size()) - 1;
    last = step(at::tensor({tokens.back()}, at::kLong).view({1, 1}), at::tensor({pos}, at::kLong))[0][-1];
  }
  const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
  std::cerr << (o.engine ? "engine" : "interpreter") << ": " << ms.count() / static_cast<double>(o.new_tokens)
            << " ms per generated token\n";
  return tokens;
}

std::vector<std::int64_t> numbers(const std::string& text) {
  std::vector<std::int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--prompt") o.prompt = numbers(value());
    else if (a == "--prefill") o.prefill = value();
    else if (a == "--new") o.new_tokens = std::stoll(value());
    else if (a == "--temperature") o.temperature = std::stod(value());
    else if (a == "--top-k") o.top_k = std::stoll(value());
    else if (a == "--top-p") o.top_p = std::stod(value());
    else if (a == "--seed") o.seed = std::stoll(value());
    else if (a == "--engine") o.engine = true;
    else if (a.rfind("--", 0) == 0 || !o.decode.empty()) throw std::invalid_argument("unexpected argument " + a);
    else o.decode = a;
  }
  if (o.decode.empty() || o.prompt.empty() || o.new_tokens < 1) throw std::invalid_argument("give DECODE.pt2 and --prompt");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto tokens = generate(parse(argc, argv));
    for (std::size_t i = 0; i < tokens.size(); ++i) std::cout << (i ? " " : "") << tokens[i];
    std::cout << '\n';
    return 0;
  } catch (const std::invalid_argument& e) {
    std::cerr << "generate: " << e.what() << "\nusage: generate DECODE.pt2 --prompt 3,17,42 [--prefill PREFILL.pt2] "
                 "[--new N] [--temperature T --top-k K --top-p P --seed S] [--engine]\n";
    return 129;
  } catch (const std::exception& e) {
    std::cerr << "generate: " << e.what() << '\n';
    return e.what()[0] == '[' ? 2 : 1;
  }
}
