// tests/torchbind/xport_test_classes.cpp: a custom class (torch::class_) and an operator taking
// it, built into one shared library that both oracles load: tests/python/torchbind.py with
// torch.ops.load_library (torch exports, saves and loads programs holding it) and the C++ suite
// torchbind_oracle with dlopen (xport loads, runs and saves them). Built against the wheel's
// LibTorch, so one library serves both.
//
// xport_classes::RunningMean keeps the running mean of the rows it has seen, as a robotics or
// serving code keeps input statistics: update() changes it (calls must stay in order), the other
// methods read it. It pickles (def_pickle, what torch.export.save writes) and flattens
// (__obj_flatten__, what torch's fake class rebuilds it from at export).
#include <cstdint>
#include <string>
#include <tuple>

#include <ATen/ATen.h>
#include <torch/custom_class.h>
#include <torch/library.h>

namespace {

struct RunningMean : torch::CustomClassHolder {
  at::Tensor sum;
  std::int64_t count = 0;

  explicit RunningMean(at::Tensor init) : sum(init.clone()) {}
  at::Tensor mean() const { return count == 0 ? sum : sum / static_cast<double>(count); }
  /// Adds the rows of x; returns x minus the mean after them.
  at::Tensor update(at::Tensor x) {
    sum = sum + x.sum(0);
    count += x.size(0);
    return x - mean();
  }
  at::Tensor normalize(at::Tensor x) { return x - mean(); }
  at::Tensor mix(at::Tensor x, at::Tensor y) { return (x + y) * 0.5 - mean(); }
};

at::Tensor scale_by_count(const c10::intrusive_ptr<RunningMean>& stats, const at::Tensor& x) {
  return x * static_cast<double>(stats->count);
}

}  // namespace

TORCH_LIBRARY(xport_classes, m) {
  m.class_<RunningMean>("RunningMean")
      .def(torch::init<at::Tensor>())
      .def("update", &RunningMean::update)
      .def("normalize", &RunningMean::normalize)
      .def("mix", &RunningMean::mix)
      .def("seen", [](const c10::intrusive_ptr<RunningMean>& s) { return s->count; })  // not a tensor
      .def("__obj_flatten__",
           [](const c10::intrusive_ptr<RunningMean>& s) {
             return std::make_tuple(std::make_tuple(std::string("sum"), s->sum),
                                    std::make_tuple(std::string("count"), s->count));
           })
      .def_pickle([](const c10::intrusive_ptr<RunningMean>& s) { return std::make_tuple(s->sum, s->count); },
                  [](std::tuple<at::Tensor, std::int64_t> state) {
                    auto s = c10::make_intrusive<RunningMean>(std::get<0>(state));
                    s->count = std::get<1>(state);
                    return s;
                  });
  m.def("scale_by_count(__torch__.torch.classes.xport_classes.RunningMean stats, Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(xport_classes, CompositeExplicitAutograd, m) { m.impl("scale_by_count", &scale_by_count); }
