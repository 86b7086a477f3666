// The compiled mode's one translation unit (target xport::xport_compiled): xport's header-only
// library, compiled once, behind <xport/compiled.hpp>.
#include <xport/compiled.hpp>

#include <utility>  // std::move

#include <xport/engine.hpp>
#include <xport/xport.hpp>

XPORT_BEGIN_NAMESPACE
namespace compiled {

struct program::state {
  exported_program p;
  interpreter interp;
  explicit state(exported_program q) : p(std::move(q)), interp(p) {}
};

program::program(std::shared_ptr<const state> s) : s_(std::move(s)) {}
program::program(exported_program&& p) : s_(std::make_shared<const state>(std::move(p))) {}

program program::load(const std::string& path) { return program(std::make_shared<const state>(xport::load(path))); }
program program::load_from_memory(const void* data, std::size_t size) {
  return program(std::make_shared<const state>(xport::load_from_memory(data, size)));
}

std::vector<at::Tensor> program::run(const std::vector<at::Tensor>& inputs) const { return s_->interp.run(inputs); }
void program::save(const std::string& path) const { xport::save(s_->p, path); }
std::string program::save_to_string() const { return xport::save_to_string(s_->p); }
std::string program::str() const { return to_string(s_->p); }
std::vector<std::string> program::input_names() const { return s_->p.signature().user_inputs(); }
std::vector<std::string> program::output_names() const { return s_->p.signature().user_outputs(); }
const exported_program& program::get() const { return s_->p; }

engine::engine(const program& p, const engine_options& options)
    : e_(std::make_shared<const xport::engine>(p.get(), options)), p_(p) {}
std::vector<at::Tensor> engine::run(const std::vector<at::Tensor>& inputs) const { return e_->run(inputs); }

}  // namespace compiled
XPORT_END_NAMESPACE
