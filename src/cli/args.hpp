// src/cli/args.hpp: the `xport` tool's command line, read as git reads its own: a command, then
// options (`--name value`, `--name=value`, flags) and operands in any order, `--` ending options.
// A mistake in it is a usage_error (exit 129, the command's usage printed), never an xport::error.
#pragma once

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace xport_cli {

/// A mistake in the command line: the message, then the command's usage (exit 129).
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One subcommand: its name, usage line, one-line summary, and the options it takes.
struct command_spec {
  std::string name;
  std::string usage;    ///< "xport print [--model NAME] FILE"
  std::string summary;  ///< "print a program as torch's print(ep) does"
  std::string options;  ///< the options' help, one per line, aligned
  std::set<std::string> valued;  ///< options that take a value ("--model")
  std::set<std::string> flags;   ///< options that take none ("--engine")
  std::size_t min_operands = 0, max_operands = 0;
};

/// A parsed command line: operands in order, each valued option's values (repeatable), flags.
struct parsed_args {
  std::vector<std::string> operands;
  std::map<std::string, std::vector<std::string>> values;
  std::set<std::string> flags;

  [[nodiscard]] bool has(const std::string& name) const { return values.count(name) || flags.count(name); }
  [[nodiscard]] std::string get(const std::string& name, const std::string& fallback = "") const {
    const auto it = values.find(name);
    return it == values.end() ? fallback : it->second.back();
  }
  [[nodiscard]] std::vector<std::string> all(const std::string& name) const {
    const auto it = values.find(name);
    return it == values.end() ? std::vector<std::string>{} : it->second;
  }
  /// A non-negative integer option, or `fallback`; anything else is a usage_error.
  [[nodiscard]] long long number(const std::string& name, long long fallback) const {
    if (!values.count(name)) return fallback;
    const auto text = get(name);
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || v < 0) throw usage_error("option '" + name + "' takes a number, not '" + text + "'");
    return v;
  }
};

inline parsed_args parse_args(const command_spec& spec, const std::vector<std::string>& argv) {
  parsed_args out;
  bool options_done = false;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const auto& a = argv[i];
    if (options_done || a.size() < 2 || a[0] != '-') {
      out.operands.push_back(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    const auto eq = a.find('=');
    const auto name = a.substr(0, eq);
    if (spec.flags.count(name)) {
      if (eq != std::string::npos) throw usage_error("option '" + name + "' takes no value");
      out.flags.insert(name);
    } else if (spec.valued.count(name)) {
      if (eq == std::string::npos && i + 1 >= argv.size()) throw usage_error("option '" + name + "' requires a value");
      out.values[name].push_back(eq == std::string::npos ? argv[++i] : a.substr(eq + 1));
    } else {
      throw usage_error("unknown option '" + name + "'");
    }
  }
  if (out.operands.size() < spec.min_operands) throw usage_error("too few arguments");
  if (out.operands.size() > spec.max_operands)
    throw usage_error("unexpected argument '" + out.operands[spec.max_operands] + "'");
  return out;
}

}  // namespace xport_cli
