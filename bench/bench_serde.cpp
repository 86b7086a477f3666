// Saving and loading big weights: xport::save / xport::load of a program with ~200 MB of
// parameters, against plain fwrite / fread of the same bytes and torch::jit::save / jit::load of
// a module holding the same tensors, all in one run. Counters: `bytes_per_second` (weights
// only) and `peak_extra_MB`, the growth of the process's peak resident set during one call
// (reset through /proc/self/clear_refs before it), to show that saving streams from the tensors
// and loading reads straight into their storage.
//
// Mapped loading (`load(path, {.mmap = true})`): the load alone, the load and a first run (which
// touches every weight), and BM_processes/N/mmap: N processes (fork + exec of this binary) each
// load the file and run once, all alive together when they measure themselves; counters are
// each one's load and run time, its resident set and its proportional set (Pss, which shares a
// page among the processes that map it), and the total Pss, the memory the N take together.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <torch/script.h>
#include <torch/torch.h>

#include <xport/xport.hpp>

namespace {

constexpr int kLayers = 4;
constexpr std::int64_t kIn = 4096, kOut = 3200;  // 4 x 52.4 MB of f32 = 210 MB

const std::string& dir() {
  static const std::string d = [] {
    const char* t = std::getenv("XPORT_BENCH_DIR");
    return std::string(t ? t : "/tmp");
  }();
  return d;
}

xport::exported_program& program() {
  static xport::exported_program p = [] {
    torch::manual_seed(0);
    xport::program_builder b;
    auto x = b.input("x", at::randn({1, kIn}));
    for (int i = 0; i < kLayers; ++i) {
      auto w = b.parameter("layers." + std::to_string(i) + ".weight", at::randn({kOut, kIn}));
      b.output(b.call("aten::mm", {x, b.call("aten::t", {w})}));
    }
    return std::move(b).build();
  }();
  return p;
}

std::int64_t weight_bytes() {
  std::int64_t n = 0;
  for (const auto& [k, t] : program().state_dict()) n += static_cast<std::int64_t>(t.nbytes());
  return n;
}

long status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(std::string(key).size()));
  return 0;
}
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

/// Runs f once between a peak reset and a peak read: the MB the peak grew above the RSS before.
template <class F>
double peak_extra_mb(F&& f) {
  reset_peak();
  const long before = status_kb("VmRSS:");
  f();
  return static_cast<double>(status_kb("VmHWM:") - before) / 1024.0;
}

void finish(benchmark::State& s, double peak) {
  s.SetBytesProcessed(s.iterations() * weight_bytes());
  s.counters["peak_extra_MB"] = peak;
}

void BM_save_xport(benchmark::State& s) {
  const auto path = dir() + "/xport_bench.pt2";
  double peak = 0;
  for (auto _ : s) peak = peak_extra_mb([&] { xport::save(program(), path); });
  finish(s, peak);
}

void BM_save_fwrite(benchmark::State& s) {
  const auto path = dir() + "/xport_bench.raw";
  double peak = 0;
  for (auto _ : s)
    peak = peak_extra_mb([&] {
      std::FILE* f = std::fopen(path.c_str(), "wb");
      std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
      for (const auto& [k, t] : program().state_dict()) std::fwrite(t.data_ptr(), 1, t.nbytes(), f);
      std::fclose(f);
    });
  finish(s, peak);
}

torch::jit::Module jit_module() {
  torch::jit::Module m("m");
  for (const auto& [k, t] : program().state_dict()) {
    std::string name = k;
    for (auto& c : name)
      if (c == '.') c = '_';
    m.register_parameter(name, t, false);
  }
  return m;
}

void BM_save_jit(benchmark::State& s) {
  const auto path = dir() + "/xport_bench.pt";
  auto m = jit_module();
  double peak = 0;
  for (auto _ : s) peak = peak_extra_mb([&] { m.save(path); });
  finish(s, peak);
}

void BM_load_xport(benchmark::State& s) {
  const auto path = dir() + "/xport_bench.pt2";
  xport::save(program(), path);
  double peak = 0;
  for (auto _ : s)
    peak = peak_extra_mb([&] {
      auto p = xport::load(path);
      benchmark::DoNotOptimize(p.state_dict().size());
    });
  finish(s, peak);
}

void BM_load_fread(benchmark::State& s) {
  const auto path = dir() + "/xport_bench.raw";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    for (const auto& [k, t] : program().state_dict()) std::fwrite(t.data_ptr(), 1, t.nbytes(), f);
    std::fclose(f);
  }
  double peak = 0;
  for (auto _ : s)
    peak = peak_extra_mb([&] {
      std::FILE* f = std::fopen(path.c_str(), "rb");
      std::vector<at::Tensor> ts;
      for (const auto& [k, t] : program().state_dict()) {
        auto u = at::empty_like(t);
        benchmark::DoNotOptimize(std::fread(u.data_ptr(), 1, u.nbytes(), f));
        ts.push_back(std::move(u));
      }
      std::fclose(f);
    });
  finish(s, peak);
}

void BM_load_jit(benchmark::State& s) {
  const auto path = dir() + "/xport_bench.pt";
  jit_module().save(path);
  double peak = 0;
  for (auto _ : s)
    peak = peak_extra_mb([&] {
      auto m = torch::jit::load(path);
      benchmark::DoNotOptimize(m.parameters().size());
    });
  finish(s, peak);
}

// ---- mapped loading ---------------------------------------------------------------------------

xport::load_options load_opts(bool mmap) {
  xport::load_options o;
  o.mmap = mmap;
  return o;
}

const std::string& saved_path() {
  static const std::string path = [] {
    const auto p = dir() + "/xport_bench_map.pt2";
    xport::save(program(), p);
    return p;
  }();
  return path;
}

void BM_load(benchmark::State& s) {
  const bool mmap = s.range(0) != 0;
  const auto& path = saved_path();
  double peak = 0;
  for (auto _ : s)
    peak = peak_extra_mb([&] {
      auto p = xport::load(path, load_opts(mmap));
      benchmark::DoNotOptimize(p.state_dict().size());
    });
  finish(s, peak);
  s.SetLabel(mmap ? "mmap" : "read");
}

void BM_load_and_run(benchmark::State& s) {
  const bool mmap = s.range(0) != 0;
  const auto& path = saved_path();
  const auto x = at::randn({1, kIn});
  double peak = 0;
  for (auto _ : s)
    peak = peak_extra_mb([&] {
      auto p = xport::load(path, load_opts(mmap));
      benchmark::DoNotOptimize(xport::run(p, {x}).size());
    });
  finish(s, peak);
  s.SetLabel(mmap ? "mmap" : "read");
}

/// {Rss, Pss} of this process in kB (/proc/self/smaps_rollup).
std::pair<long, long> rss_pss_kb() {
  std::ifstream f("/proc/self/smaps_rollup");
  std::string line;
  long rss = 0, pss = 0;
  while (std::getline(f, line)) {
    if (line.rfind("Rss:", 0) == 0) rss = std::stol(line.substr(4));
    if (line.rfind("Pss:", 0) == 0) pss = std::stol(line.substr(4));
  }
  return {rss, pss};
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// A child of BM_processes (this binary, exec'd with XPORT_BENCH_CHILD="<mmap> <file> <fds>"):
/// loads and runs, says it is ready, waits for all, measures itself, reports, waits to be let go.
void child_main(const char* spec) {
  int mmap = 0, ready = -1, go = -1, done = -1;
  char path[4096] = {};
  if (std::sscanf(spec, "%d %4095s %d %d %d", &mmap, path, &ready, &go, &done) != 5) std::_Exit(2);
  auto t0 = std::chrono::steady_clock::now();
  auto p = xport::load(path, load_opts(mmap != 0));
  const double load_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  benchmark::DoNotOptimize(xport::run(p, {at::randn({1, kIn})}).size());
  const double run_ms = ms_since(t0);
  char c = 'r';
  if (write(ready, &c, 1) != 1) std::_Exit(3);
  while (read(go, &c, 1) > 0) {}  // until every child is loaded
  const auto [rss, pss] = rss_pss_kb();
  const std::string report = std::to_string(load_ms) + " " + std::to_string(run_ms) + " " + std::to_string(rss) + " " +
                             std::to_string(pss) + "\n";
  if (write(ready, report.data(), report.size()) != static_cast<ssize_t>(report.size())) std::_Exit(4);
  while (read(done, &c, 1) > 0) {}  // until every child has measured
  std::_Exit(0);
}

[[maybe_unused]] const bool is_child = [] {
  if (const char* spec = std::getenv("XPORT_BENCH_CHILD")) child_main(spec);
  return false;
}();

void BM_processes(benchmark::State& s) {
  const int n = static_cast<int>(s.range(0));
  const bool mmap = s.range(1) != 0;
  const auto& path = saved_path();
  double load_ms = 0, run_ms = 0, rss_mb = 0, pss_mb = 0;
  for (auto _ : s) {
    int ready[2], go[2], done[2];
    if (pipe(ready) || pipe(go) || pipe(done)) {
      s.SkipWithError("pipe failed");
      return;
    }
    const std::string spec = std::to_string(int{mmap}) + " " + path + " " + std::to_string(ready[1]) + " " +
                             std::to_string(go[0]) + " " + std::to_string(done[0]);
    // the child's environment, made before fork: between fork and exec only async-signal-safe calls
    std::vector<std::string> env_strings{"XPORT_BENCH_CHILD=" + spec};
    for (char** e = environ; *e; ++e)
      if (std::string_view(*e).rfind("XPORT_BENCH_CHILD=", 0) != 0) env_strings.emplace_back(*e);
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    char exe_name[] = "bench_serde";
    char* argv[] = {exe_name, nullptr};
    std::vector<pid_t> kids;
    for (int i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        close(ready[0]);  // the parent's ends: a child holding them would never see EOF
        close(go[1]);
        close(done[1]);
        execve("/proc/self/exe", argv, envp.data());
        std::_Exit(127);
      }
      kids.push_back(pid);
    }
    close(ready[1]);
    close(go[0]);
    close(done[0]);
    std::string got;
    char buf[256];
    int readies = 0;
    while (readies < n) {  // one byte each
      if (read(ready[0], buf, 1) != 1) break;
      ++readies;
    }
    close(go[1]);  // every child is loaded: all measure now
    for (ssize_t k; std::count(got.begin(), got.end(), '\n') < n && (k = read(ready[0], buf, sizeof buf)) > 0;)
      got.append(buf, static_cast<std::size_t>(k));
    close(done[1]);
    close(ready[0]);
    for (pid_t pid : kids) waitpid(pid, nullptr, 0);
    std::istringstream in(got);
    load_ms = run_ms = rss_mb = pss_mb = 0;
    int reports = 0;
    for (double l, r, rss, pss; in >> l >> r >> rss >> pss; ++reports) {
      load_ms += l / n;
      run_ms += r / n;
      rss_mb += rss / 1024.0 / n;
      pss_mb += pss / 1024.0;
    }
    if (reports != n) {
      s.SkipWithError("a child did not report");
      return;
    }
  }
  s.counters["load_ms"] = load_ms;
  s.counters["first_run_ms"] = run_ms;
  s.counters["rss_MB_each"] = rss_mb;
  s.counters["pss_MB_total"] = pss_mb;
  s.SetLabel(mmap ? "mmap" : "read");
}

}  // namespace

BENCHMARK(BM_save_fwrite)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_save_xport)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_save_jit)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_load_fread)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_load_xport)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_load_jit)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_load)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_load_and_run)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_processes)->ArgsProduct({{1, 4}, {0, 1}})->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
