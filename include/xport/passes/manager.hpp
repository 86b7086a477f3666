// xport/passes/manager.hpp: pipelines built at run time, from names (for tools and configs).
//
//   auto pm = xport::passes::pass_manager::parse("functionalize,dce,cse,fold");
//   pm.verify_each(true).print_to(std::cerr);
//   auto r = pm.run(program);
//
// The same passes as the compile-time pipelines (standard.hpp's builtin_passes()), type-erased;
// user passes can be registered by name. verify_each runs verify() after every pass; print_to prints the program before and
// after each one.
#pragma once

#include <functional>     // std::function
#include <map>            // std::map
#include <mutex>          // std::mutex
#include <ostream>        // std::ostream
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <tuple>          // std::apply
#include <vector>         // std::vector

#include <xport/config.hpp>
#include <xport/error.hpp>
#include <xport/passes/pass.hpp>
#include <xport/passes/standard.hpp>

XPORT_BEGIN_NAMESPACE
namespace passes {

/// A pass behind a name.
struct any_pass {
  std::string name;
  std::function<pass_result(exported_program&, const pipeline_options&)> run;

  template <class P>
    requires pass<P>
  static any_pass of(P p) {
    return {std::string(P::name), [p = std::move(p)](exported_program& prog, const pipeline_options& o) {
              return run_pass(p, prog, o);
            }};
  }
};

class pass_manager {
 public:
  using factory = std::function<any_pass()>;

  /// Registers a pass under `name` for parse()/add(name).
  static void register_pass(const std::string& name, factory make) {
    std::lock_guard<std::mutex> lock(mutex());
    registry()[name] = std::move(make);
  }
  /// The registered names.
  static std::vector<std::string> registered() {
    std::lock_guard<std::mutex> lock(mutex());
    std::vector<std::string> out;
    for (const auto& [k, v] : registry()) out.push_back(k);
    return out;
  }

  /// "dce,cse,fold" -> a manager running those passes in that order.
  static pass_manager parse(std::string_view text) {
    pass_manager pm;
    std::size_t start = 0;
    while (start <= text.size()) {
      auto end = text.find(',', start);
      if (end == std::string_view::npos) end = text.size();
      auto item = text.substr(start, end - start);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      if (!item.empty()) pm.add(item);
      start = end + 1;
    }
    return pm;
  }

  pass_manager& add(std::string_view name) {
    std::lock_guard<std::mutex> lock(mutex());
    const auto it = registry().find(std::string(name));
    if (it == registry().end()) {
      std::string known;
      for (const auto& [k, v] : registry()) known += (known.empty() ? "" : ", ") + k;
      throw error("xport.passes.unknown", "no pass named '" + std::string(name) + "' (known: " + known + ")");
    }
    passes_.push_back(it->second());
    return *this;
  }
  template <class P>
    requires pass<P>
  pass_manager& add(P p) {
    passes_.push_back(any_pass::of(std::move(p)));
    return *this;
  }
  pass_manager& verify_each(bool on = true) {
    options_.verify_each = on;
    return *this;
  }
  pass_manager& print_to(std::ostream& os) {
    options_.print = &os;
    return *this;
  }

  /// Runs the passes in order; stops at the first failure (the program is left as that pass
  /// found it) and returns it, prefixed with the pass's name.
  pass_result run(exported_program& p) const {
    pass_result total;
    for (const auto& ps : passes_) {
      auto r = ps.run(p, options_);
      total.changed = total.changed || r.changed;
      if (!r.ok()) return pass_result::failure(ps.name + ": " + r.error);
    }
    return total;
  }

  /// "dce,cse,fold": the textual pipeline, as parse() reads it.
  [[nodiscard]] std::string str() const {
    std::string s;
    for (const auto& ps : passes_) s += (s.empty() ? "" : ",") + ps.name;
    return s;
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::map<std::string, factory>& registry() {
    static std::map<std::string, factory> r = [] {
      std::map<std::string, factory> m;
      std::apply([&](const auto&... p) { ((m[std::string(p.name)] = [&p] { return any_pass::of(p); }), ...); },
                 builtin_passes());
      return m;
    }();
    return r;
  }

  std::vector<any_pass> passes_;
  pipeline_options options_;
};

}  // namespace passes
XPORT_END_NAMESPACE
