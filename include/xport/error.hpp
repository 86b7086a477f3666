// xport/error.hpp: the exception types xport throws.
// Every error carries a stable id (`xport.guard.shape`, `xport.verify.use_before_def`, ...) that
// prefixes its message as `[id] ...`; tests and users may match on the id, the text explains
// what was wrong, where, and how to fix it.
#pragma once

#include <stdexcept>  // std::runtime_error
#include <string>     // std::string
#include <utility>    // std::move
#include <vector>     // std::vector

#include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE

/// Base of every exception thrown by xport.
class error : public std::runtime_error {
 public:
  error(std::string id, const std::string& message)
      : std::runtime_error("[" + id + "] " + message), id_(std::move(id)) {}

  /// The stable identifier, e.g. "xport.guard.shape".
  [[nodiscard]] const std::string& id() const noexcept { return id_; }

 private:
  std::string id_;
};

/// A graph or program was built or edited wrongly (builder calls, graph mutations).
class graph_error : public error {
 public:
  using error::error;
};

/// An operator call did not match the operator's schema (unknown op, argument count or type).
class schema_error : public graph_error {
 public:
  using graph_error::graph_error;
};

/// Shapes and dtypes of an op's outputs could not be inferred without running real compute.
class missing_fake_kernel : public graph_error {
 public:
  using graph_error::graph_error;
};

/// `verify()` found a broken invariant of the graph or of the graph signature.
class verify_error : public error {
 public:
  verify_error(std::string id, const std::string& message, std::string node = {})
      : error(std::move(id), message), node_(std::move(node)) {}

  /// Name of the offending node or value, empty when the failure is not about one node.
  [[nodiscard]] const std::string& node() const noexcept { return node_; }

 private:
  std::string node_;
};

/// Export could not capture the program (an unsupported construct in the traced code).
class export_error : public error {
 public:
  using error::error;
};

/// The traced code read tensor data (`item()`, `nonzero`, `unique`, a tensor used as a bool)
/// where no value can stand for it: torch.export's graph break. A program_builder call of such
/// an op is the same error. The message names the op and the way out (ops/data_dependent.hpp).
class graph_break : public export_error {
 public:
  using export_error::export_error;
};

/// A dynamic dimension the user asked for cannot be kept: the traced code fixes it to a
/// constant, narrows its range, or ties it to another dimension (torch's "Constraints
/// violated"). The message names the dims, the op, and a suggested fix.
class constraint_violation : public export_error {
 public:
  using export_error::export_error;
};

/// Inputs given to a program do not satisfy its input guards (count, dtype, device, shape).
class guard_error : public error {
 public:
  using error::error;
};

/// A file that could not be loaded: names the record (and offset, where one applies) and the
/// problem. Nothing was changed anywhere when this is thrown.
class load_error : public error {
 public:
  using error::error;
};

/// Running a program failed inside an operator; the message names the node and the op.
class run_error : public error {
 public:
  using error::error;
};

namespace detail {

/// The first line of a message (LibTorch's errors append a backtrace and notes below it).
inline std::string first_line(const std::string& s) {
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

/// Names joined for a message: `'encode', 'forward'` (`none` for no names).
inline std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out.empty() ? "none" : out;
}

}  // namespace detail

XPORT_END_NAMESPACE
