// Fused elementwise loops. A FusionGroup becomes a small program that runs over blocks of the
// output: each instruction fills a register of kBlock values (double, float or int64_t), so
// dispatch costs once per block and every inner loop is a plain vectorizable loop. The loops
// are compiled once per SIMD target (simd.h) and run those of the target in use.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "prism/backends/cpu/storage.h"
#include "prism/backends/cpu/thread_pool.h"
#include "prism/compiler/fusion.h"
#include "prism/ir/graph.h"

namespace prism::cpu {

// What one fused loop computes: loads into registers of kBlock values, then one instruction
// per node; the last instruction's register is the result.
struct FusedProgram {
  static constexpr int kBlock = 1024;
  static constexpr int kRegisterBytes = kBlock * 8;  // kBlock values of the widest class

  struct Load {
    int source;  // index into the kernel's sources
    DType dtype;
    bool contiguous;                       // same elements as the output, row-major
    std::array<int64_t, kMaxRank> stride;  // per output axis, 0 where broadcast
    bool direct;                           // contiguous, no conversion: read in place
  };
  struct Instr {
    ir::Op op;
    Class cls;                   // class of the result
    Class in_cls;                // class of the operands
    DType dtype;                 // dtype of the result (convert rounds to it)
    int a = -1, b = -1, c = -1;  // operand registers
    int load = -1;               // for a load
  };

  Shape out_shape;
  std::vector<Load> loads;
  std::vector<Instr> instrs;
  bool direct_store = false;  // the last instruction writes the output in place
};

class FusedKernel {
 public:
  FusedKernel(const ir::Graph& graph, const compiler::FusionPlan& plan,
              const compiler::FusionGroup& group);

  // The values whose memory the kernel reads, in the order run() expects their pointers.
  const std::vector<ir::ValueId>& sources() const { return sources_; }
  void run(std::span<const std::byte* const> sources, std::byte* out, ThreadPool& pool) const;
  // The program as text, for PRISM_DEBUG=2: "r0 = load %3 (f32, in place); r1 = exp(r0) ...".
  std::string describe() const;

  static constexpr int kBlock = FusedProgram::kBlock;

 private:
  using Load = FusedProgram::Load;
  using Instr = FusedProgram::Instr;

  static bool same_type(DType t);

  std::vector<ir::ValueId> sources_;
  FusedProgram program_;
};

}  // namespace prism::cpu
