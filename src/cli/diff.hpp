// src/cli/diff.hpp: `xport diff A B`: what differs between two programs as a reviewer reads it:
// the models each archive holds, then per program the state (tensors added, removed, retyped or
// with other values) and the printed program (signature, graph, range constraints) as a unified
// diff of torch's print.
#pragma once

#include <cstdint>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include <xport/xport.hpp>

namespace xport_cli {

/// `f32[2, 3]`, as torch.fx annotates a tensor.
inline std::string shape_text(const at::Tensor& t) {
  std::string s = xport::dtype_abbr(t.scalar_type()) + "[";
  for (std::int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

/// One line of a line diff: ' ' kept, '-' only in a, '+' only in b.
struct diff_line {
  char op;
  std::string text;
};

/// The lines of `a` and `b` aligned by their longest common subsequence (common head and tail
/// first; the middle by dynamic programming, up to 4000 lines a side, else all of it changed).
inline std::vector<diff_line> line_diff(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::size_t head = 0, tail = 0;
  while (head < a.size() && head < b.size() && a[head] == b[head]) ++head;
  while (tail < a.size() - head && tail < b.size() - head && a[a.size() - 1 - tail] == b[b.size() - 1 - tail]) ++tail;
  const std::size_t n = a.size() - head - tail, m = b.size() - head - tail;
  std::vector<diff_line> out;
  for (std::size_t i = 0; i < head; ++i) out.push_back({' ', a[i]});
  if (n <= 4000 && m <= 4000) {
    std::vector<std::uint16_t> lcs((n + 1) * (m + 1), 0);  // lcs[i][j]: of a's middle from i, b's from j
    const auto at = [&](std::size_t i, std::size_t j) -> std::uint16_t& { return lcs[i * (m + 1) + j]; };
    for (std::size_t i = n; i-- > 0;)
      for (std::size_t j = m; j-- > 0;)
        at(i, j) = a[head + i] == b[head + j] ? at(i + 1, j + 1) + 1 : std::max(at(i + 1, j), at(i, j + 1));
    std::size_t i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[head + i] == b[head + j]) {
        out.push_back({' ', a[head + i++]});
        ++j;
      } else if (i < n && (j == m || at(i + 1, j) >= at(i, j + 1))) {  // removals first, as diff -u shows them
        out.push_back({'-', a[head + i++]});
      } else {
        out.push_back({'+', b[head + j++]});
      }
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) out.push_back({'-', a[head + i]});
    for (std::size_t j = 0; j < m; ++j) out.push_back({'+', b[head + j]});
  }
  for (std::size_t i = a.size() - tail; i < a.size(); ++i) out.push_back({' ', a[i]});
  return out;
}

/// The changed lines with `context` lines around them, hunks headed `@@ -a,n +b,m @@`; empty
/// when nothing changed.
inline std::string unified(const std::vector<diff_line>& d, std::size_t context = 3) {
  std::vector<bool> shown(d.size(), false);
  for (std::size_t k = 0; k < d.size(); ++k)
    if (d[k].op != ' ')
      for (std::size_t c = (k > context ? k - context : 0); c < d.size() && c <= k + context; ++c) shown[c] = true;
  std::ostringstream out;
  std::size_t line_a = 1, line_b = 1;
  for (std::size_t k = 0; k < d.size();) {
    if (!shown[k]) {
      line_a += d[k].op != '+';
      line_b += d[k].op != '-';
      ++k;
      continue;
    }
    std::size_t end = k, na = 0, nb = 0;
    for (; end < d.size() && shown[end]; ++end) {
      na += d[end].op != '+';
      nb += d[end].op != '-';
    }
    out << "@@ -" << line_a << ',' << na << " +" << line_b << ',' << nb << " @@\n";
    for (; k < end; ++k) out << d[k].op << d[k].text << '\n';
    line_a += na;
    line_b += nb;
  }
  return out.str();
}

/// How tensor `name` differs between two programs' state ("" when equal).
inline std::string tensor_change(const at::Tensor& a, const at::Tensor& b) {
  const auto type = [](const at::Tensor& t) { return shape_text(t) + (t.device().is_cpu() ? "" : " on " + t.device().str()); };
  if (a.scalar_type() != b.scalar_type() || !a.sizes().equals(b.sizes()) || a.device() != b.device())
    return type(a) + " -> " + type(b);
  const auto x = a.cpu(), y = b.cpu();
  if (at::equal(x, y)) return "";
  std::ostringstream s;
  s << "values differ";
  if (at::isFloatingType(x.scalar_type()) || at::isComplexType(x.scalar_type())) {
    const auto wide = at::isComplexType(x.scalar_type()) ? at::kComplexDouble : at::kDouble;  // (no rounding, no part dropped)
    s << " (max abs difference " << std::setprecision(6) << (x.to(wide) - y.to(wide)).abs().max().item<double>() << ")";
  }
  else
    s << " (" << x.ne(y).sum().item<std::int64_t>() << " of " << x.numel() << " elements)";
  return s.str();
}

/// The state and constants of two programs compared by name: `-` only in a, `+` only in b, `~` changed.
inline std::string state_diff(const xport::exported_program& a, const xport::exported_program& b) {
  std::ostringstream out;
  const auto compare = [&](const xport::tensor_dict& x, const xport::tensor_dict& y) {
    for (const auto& [name, t] : x) {
      if (const auto* other = y.find(name)) {
        if (const auto change = tensor_change(t, *other); !change.empty()) out << "~ " << name << ": " << change << '\n';
      } else {
        out << "- " << name << '\n';
      }
    }
    for (const auto& [name, t] : y)
      if (!x.contains(name)) out << "+ " << name << '\n';
  };
  compare(a.state_dict(), b.state_dict());
  compare(a.constants(), b.constants());
  return out.str();
}

}  // namespace xport_cli
