// torch.cond as xport::cond: the ExportDB cond_* cases. A predicate on a tensor keeps both
// branches as subgraphs; a predicate on static information (a C++ bool: ranks, example sizes)
// picks its branch at export, as torch specializes a Python bool.
#include <torch/torch.h>

#include "case.hpp"

namespace {

const exportdb::registrar cond_closed_over_variable(
    "cond_closed_over_variable", "branches may read tensors they are not passed: they become operands",
    "SUPPORTED", [](std::ostream& os) {
      auto p = xport::export_program(
          [](const at::Tensor& pred, const at::Tensor& x) {
            return xport::cond(
                pred, [&](const at::Tensor&) { return x * 2; }, [&](const at::Tensor&) { return x - 2; },
                std::tuple{x + 1});
          },
          std::tuple{at::scalar_tensor(true, at::kBool), at::randn({3, 2})}, {.input_names = {"pred", "x"}});
      os << p;
    });

const exportdb::registrar cond_operands(
    "cond_operands", "the operands are the branches' arguments; a tensor predicate keeps both branches", "SUPPORTED",
    [](std::ostream& os) {
      auto p = xport::export_program(
          [](const at::Tensor& x, const at::Tensor& y) {
            return xport::cond(
                x.sum() > 0, [](const at::Tensor& a, const at::Tensor& b) { return a + b; },
                [](const at::Tensor& a, const at::Tensor& b) { return a - b; }, std::tuple{x, y});
          },
          std::tuple{at::randn({3, 2}), at::randn({2})},
          {.input_names = {"x", "y"}, .dynamic_shapes = {{"x", {{0, xport::Dim("dim0_x")}}}, {"y", {}}}});
      os << p;
    });

const exportdb::registrar cond_predicate(
    "cond_predicate", "a predicate on static information (a C++ bool) picks its branch at export", "SUPPORTED",
    [](std::ostream& os) {
      auto p = xport::export_program(
          [](const at::Tensor& x) {
            const bool pred = x.dim() > 2 && x.size(2) > 10;
            return xport::cond(
                pred, [](const at::Tensor& a) { return a.cos(); }, [](const at::Tensor& a) { return a.sin(); },
                std::tuple{x});
          },
          std::tuple{at::randn({6, 4, 3})});
      os << p;
    });

const exportdb::registrar cond_branch_nested_function(
    "cond_branch_nested_function", "branches may call helpers and closures of their own", "SUPPORTED",
    [](std::ostream& os) {
      auto p = xport::export_program(
          [](const at::Tensor& x) {
            auto true_fn = [](const at::Tensor& a) {
              auto inner = [&](const at::Tensor& b) { return a + b; };
              return inner(a);
            };
            auto false_fn = [](const at::Tensor& a) {
              auto inner = [&](const at::Tensor& b) { return a - b; };
              return inner(a);
            };
            return xport::cond(x.sum() > 0, true_fn, false_fn, std::tuple{x});
          },
          std::tuple{at::randn({3})});
      os << p;
    });

struct BranchesImpl : torch::nn::Module {
  at::Tensor scale;
  BranchesImpl() { scale = register_buffer("scale", at::full({3}, 2.0)); }
  at::Tensor bar(const at::Tensor& x) const { return x.sin() * scale; }
  at::Tensor forward(const at::Tensor& x) {
    return xport::cond(
        x.mean() > 0, [](const at::Tensor& a) { return a.cos(); }, [this](const at::Tensor& a) { return bar(a); },
        std::tuple{x});
  }
};
TORCH_MODULE(Branches);

const exportdb::registrar cond_branch_class_method(
    "cond_branch_class_method", "a branch may be a member function reading the module's buffers", "SUPPORTED",
    [](std::ostream& os) {
      Branches m;
      os << xport::export_program(m, std::tuple{at::randn({3})});
    });

const exportdb::registrar cond_branch_mismatch(
    "cond_branch_mismatch", "branches must return the same dtypes and shapes: torch.cond's error",
    "NOT_SUPPORTED_YET", [](std::ostream& os) {
      exportdb::expect_error(os, [] {
        (void)xport::export_program(
            [](const at::Tensor& x) {
              return xport::cond(
                  x.sum() > 0, [](const at::Tensor& a) { return a.sin(); },
                  [](const at::Tensor& a) { return a.to(at::kInt); }, std::tuple{x});
            },
            std::tuple{at::randn({3})});
      });
    });

}  // namespace
