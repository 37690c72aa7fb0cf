#include "prism/backends/cpu/onednn.h"

#include <omp.h>

#include <vector>

namespace prism::cpu::onednn {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::primitive_attr single_thread() {
  omp_set_num_threads(1);  // oneDNN plans for the threads it will get: one
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void execute(const dnnl::primitive& primitive, const dnnl::memory::desc& scratch,
             std::unordered_map<int, dnnl::memory> args) {
  omp_set_num_threads(1);  // this thread's own setting: oneDNN stays on it
  thread_local std::vector<std::byte> pad;
  if (pad.size() < scratch.get_size()) pad.resize(scratch.get_size());
  args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratch, engine(), pad.data()));
  dnnl::stream stream(engine());
  primitive.execute(stream, args);
  stream.wait();
}

bool multiplies_bf16() {
  static const bool yes = [] {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    try {
      const dnnl::memory::desc a({2, 32}, dt::bf16, tag::ab), b({32, 16}, dt::bf16, tag::ab),
          c({2, 16}, dt::bf16, tag::ab);
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), single_thread(), engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return yes;
}

}  // namespace prism::cpu::onednn
