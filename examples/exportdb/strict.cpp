// The strict policy: the same computation written once as a template, exported from the
// at::Tensor code and from the xport::sym_tensor code, gives the same graph; strict nodes carry
// their C++ line.
#include "case.hpp"

namespace {

template <class T>
T attention_scores(const T& q, const T& k) {
  auto s = matmul(q, k.transpose(0, 1)) / 4.0;
  return softmax(s, -1);
}

const exportdb::registrar strict_template(
    "strict_template", "one template, both policies, one IR; strict adds source lines", "SUPPORTED",
    [](std::ostream& os) {
      const auto q = at::randn({4, 16}), k = at::randn({4, 16});
      os << "--- non-strict ---\n"
         << xport::export_program([](const at::Tensor& a, const at::Tensor& b) { return attention_scores(a, b); },
                                  std::tuple{q, k}, {.input_names = {"q", "k"}});
      os << "\n--- strict ---\n"
         << xport::export_program<xport::strict>([](auto a, auto b) { return attention_scores(a, b); },
                                                  std::tuple{q, k}, {.input_names = {"q", "k"}});
    });

}  // namespace
