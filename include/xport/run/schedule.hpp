// xport/run/schedule.hpp: the engine's parallel branches (engine_options::threads > 1): the
// hazards of a planned run as edges between instructions, and the pool of threads that runs the
// instructions whose inputs are ready.
#pragma once

#include <algorithm>           // std::sort, std::unique, std::max
#include <condition_variable>  // std::condition_variable
#include <cstddef>             // std::size_t
#include <cstdint>             // std::uint32_t, std::uint8_t
#include <deque>               // std::deque
#include <functional>          // std::function
#include <mutex>               // std::mutex, std::lock_guard, std::unique_lock
#include <thread>              // std::thread
#include <utility>             // std::move
#include <vector>              // std::vector

#include <ATen/Parallel.h>

#include <xport/config.hpp>
#include <xport/ops/data_dependent.hpp>
#include <xport/run/compiled.hpp>
#include <xport/run/plan.hpp>

XPORT_BEGIN_NAMESPACE
namespace detail {

/// A fixed set of threads running posted jobs (the engine's parallel branches). Each thread takes
/// LibTorch's intra-op thread count as its own, as LibTorch's own pools do.
class branch_pool {
 public:
  explicit branch_pool(std::size_t workers) {
    for (std::size_t i = 0; i < workers; ++i)
      threads_.emplace_back([this] {
        at::init_num_threads();
        for (;;) {
          std::function<void()> job;
          {
            std::unique_lock<std::mutex> lock(mutex_);
            cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
            if (jobs_.empty()) return;  // stopping
            job = std::move(jobs_.front());
            jobs_.pop_front();
          }
          job();
        }
      });
  }
  branch_pool(const branch_pool&) = delete;
  branch_pool& operator=(const branch_pool&) = delete;
  ~branch_pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }
  [[nodiscard]] std::size_t size() const noexcept { return threads_.size(); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// The hazards of a planned run as edges between instructions. Memory is tracked per resource:
// the arena buffer a planned root lives in, else the root itself (views and in-place results
// share their base's); one more resource orders random and effectful ops. An instruction
// follows the makers of its arguments and the last writer of each resource it reads; one that
// writes a resource (a fresh result, an in-place or out= call, a mutating op) follows every
// earlier reader and writer of it.
inline std::size_t parallel_width(const engine_plan& p, const std::vector<std::uint8_t>& hoisted);

// `hoisted[i]`: instruction i is made once (no part of a run); `slot[i]`: the arena buffer
// instruction i's result lives in (or no_reg), of `buffers`.
inline void schedule(engine_plan& p, const compiled_program& cp, const std::vector<std::uint8_t>& hoisted, const lifetimes& l,
                     const std::vector<std::uint32_t>& slot, std::uint32_t buffers) {
  const auto& code = cp.code;
  const auto nregs = static_cast<std::uint32_t>(cp.num_regs);
  const std::uint32_t effects = nregs + buffers;
  const auto resource = [&](std::uint32_t r) {
    const auto root = l.root[r];
    const auto d = l.def[root];
    return d != no_reg && slot[d] != no_reg ? nregs + slot[d] : root;
  };
  struct use {
    std::uint32_t writer = no_reg;
    std::vector<std::uint32_t> readers;
  };
  std::vector<use> uses(effects + 1);
  std::vector<std::uint32_t> maker(nregs, no_reg);
  p.deps.assign(code.size(), 0);
  p.succ.assign(code.size(), {});
  p.reads.assign(nregs, 0);
  p.keep.assign(nregs, 0);
  for (const auto& o : cp.outputs)
    if (o.is_reg) p.keep[o.index] = 1;
  std::vector<std::uint32_t> preds, reads, writes;
  for (std::uint32_t i = 0; i < code.size(); ++i) {
    if (hoisted[i]) continue;
    const auto& in = code[i];
    const auto& op = *in.info;
    preds.clear();
    reads.clear();
    writes.clear();
    cp.for_each_register_use(in, [&](std::uint32_t r) {
      ++p.reads[r];
      if (maker[r] != no_reg) preds.push_back(maker[r]);
      reads.push_back(resource(r));
    });
    if (p.in_place[i]) writes.push_back(resource(in.args[0].index));
    if (!p.bases_in_place[i].empty()) {  // (Note [Bases written in place])
      const auto bases = functionalized_bases(cp, in);
      for (std::size_t k = 0; k < bases.size(); ++k)
        if (p.bases_in_place[i][k]) writes.push_back(resource(bases[k]));
    }
    if (op.is_mutable || op.inplace_view) writes.insert(writes.end(), reads.begin(), reads.end());
    if (op.nondeterministic || op.ordered || in.outputs.empty() || reads_data(op)) writes.push_back(effects);
    for (auto r : in.outputs)
      if (r != compiled_program::dead && l.def[r] == i) writes.push_back(resource(r));
    for (auto res : reads)
      if (uses[res].writer != no_reg) preds.push_back(uses[res].writer);
    for (auto res : writes) {
      if (uses[res].writer != no_reg) preds.push_back(uses[res].writer);
      preds.insert(preds.end(), uses[res].readers.begin(), uses[res].readers.end());
    }
    for (auto res : reads) uses[res].readers.push_back(i);
    for (auto res : writes) {
      uses[res].writer = i;
      uses[res].readers.clear();
    }
    for (auto r : in.outputs)
      if (r != compiled_program::dead) maker[r] = i;
    std::sort(preds.begin(), preds.end());
    preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
    for (auto q : preds) {
      if (q == i) continue;
      p.succ[q].push_back(i);
      ++p.deps[i];
    }
  }
  p.roots.clear();
  for (std::uint32_t i = 0; i < code.size(); ++i)
    if (!hoisted[i] && p.deps[i] == 0) p.roots.push_back(i);
  p.info.parallel_width = parallel_width(p, hoisted);
}

// The most instructions at one depth of the schedule (a level is one more than its deepest predecessor).
inline std::size_t parallel_width(const engine_plan& p, const std::vector<std::uint8_t>& hoisted) {
  std::vector<std::uint32_t> level(p.deps.size(), 0), count;
  std::size_t widest = 0;
  for (std::uint32_t i = 0; i < p.deps.size(); ++i) {  // predecessors come first in code order
    if (hoisted[i]) continue;
    if (level[i] >= count.size()) count.resize(level[i] + 1, 0);
    widest = std::max<std::size_t>(widest, ++count[level[i]]);
    for (auto s : p.succ[i]) level[s] = std::max(level[s], level[i] + 1);
  }
  return widest;
}

}  // namespace detail
XPORT_END_NAMESPACE
