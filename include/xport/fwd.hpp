// xport/fwd.hpp: forward declarations of xport's public types and their default aliases.
// Includes no LibTorch header: a TU that only passes xport types around can include this alone.
#pragma once

#include <cstdint>  // std::int64_t

#include <xport/config.hpp>

XPORT_BEGIN_NAMESPACE

template <class Int = std::int64_t>
class basic_sym_int;
using sym_int = basic_sym_int<>;

struct tensor_meta;
class argument;
class value;
class node;
/// The default graph policy: no typed node metadata (node.custom_meta<T>() still holds any
/// type), storage from new/delete. See basic_graph<Policy> in ir/graph.hpp.
struct default_policy {
  struct node_meta {};
};
template <class Policy = default_policy>
class basic_graph;
using graph = basic_graph<>;
struct op_info;

struct input_spec;
struct output_spec;
class graph_signature;
template <class Policy = default_policy>
class basic_exported_program;
using exported_program = basic_exported_program<>;
class program_builder;

struct run_options;
class interpreter;
class program_module;

XPORT_END_NAMESPACE
