// xport/detail/python_repr.hpp: Python's repr() of floats and strings, and identifier checks.
// torch.export prints arguments with Python's repr, so a C++ double must print as Python prints
// the same float (`1e-05`, `0.1`, `1.0`, `inf`) for the text format to match byte for byte.
#pragma once

#include <charconv>     // std::to_chars
#include <cmath>        // std::isnan, std::isinf, std::signbit
#include <complex>      // std::complex
#include <cstdio>       // std::snprintf
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <system_error> // std::errc

#include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// Python's `repr(float)`: the shortest string that round-trips; fixed notation when the
/// decimal exponent is in [-4, 16), scientific (`1e-05`, `1.5e+16`) otherwise; `.0` added to
/// integral values in fixed notation.
inline std::string python_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<std::size_t>(res.ptr - buf));
  // sci looks like [-]d[.ddd]e(+|-)XX
  std::string sign;
  if (!sci.empty() && sci.front() == '-') {
    sign = "-";
    sci.remove_prefix(1);
  }
  const auto epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos))
    if (c != '.') digits += c;
  const int exp10 = std::stoi(std::string(sci.substr(epos + 1)));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exp10 + 1;  // value = 0.d1d2... * 10^decpt
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<std::size_t>(-decpt), '0');
      out += digits;
    } else if (static_cast<std::size_t>(decpt) >= digits.size()) {
      out += digits;
      out.append(static_cast<std::size_t>(decpt) - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(decpt));
      out += '.';
      out += digits.substr(static_cast<std::size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  const int e = decpt - 1;
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
  return out + ebuf;
}

/// Python's `repr(complex)`: `(1+2j)`, `2j` (a real part of +0 is left out), its parts as floats
/// without the `.0` a float gets (`(1.5-2j)`, `(1e+16+0j)`).
inline std::string python_complex_repr(std::complex<double> c) {
  const auto part = [](double x) {
    auto s = python_float_repr(x);
    if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
    return s;
  };
  std::string imag = part(c.imag());
  if (c.real() == 0 && !std::signbit(c.real())) return imag + "j";
  if (imag.front() != '-') imag.insert(0, "+");
  return "(" + part(c.real()) + imag + "j)";
}

/// Python's `repr(str)` for UTF-8 text: single quotes unless the text holds a single quote and
/// no double quote; backslash escapes for quotes, backslashes and control characters.
inline std::string python_str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == static_cast<unsigned char>(quote)) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += quote;
  return out;
}

/// True when `s` is a valid Python identifier made of ASCII letters, digits and '_'.
inline bool is_identifier(std::string_view s) {
  if (s.empty()) return false;
  const auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(s.front())) return false;
  for (char c : s)
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  return true;
}

}  // namespace detail
XPORT_END_NAMESPACE
