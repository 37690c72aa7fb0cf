// `prism quantize IN OUT.gguf`: a safetensors Llama, LFM 2 or Qwen 3.5 as a GGUF file llama.cpp
// loads (prism/llm/gguf_export.h), its matrices in the type asked for.
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "prism/core/error.h"
#include "prism/llm/gguf_export.h"
#include "prism/quant/ggml_type.h"

namespace {

struct Options {
  std::string in, out, type = "f16", tokenizer, name;
};

constexpr const char* kTypes[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k"};

prism::quant::GgmlType parse_type(const std::string& type) {
  for (const char* t : kTypes) {
    if (type == t) {
      std::string upper = type;
      for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      return *prism::quant::ggml_type_from_name(upper);
    }
  }
  prism::fail("quantize: --type={} is not one of f32, f16, bf16, q8_0, q4_0, q4_k", type);
}

int run(const Options& o) {
  const prism::quant::GgmlType type = parse_type(o.type);
  PRISM_CHECK(o.out.ends_with(".gguf"), "quantize: the output {} must be a .gguf file", o.out);
  prism::llm::GgufExportOptions options{.type = type, .tokenizer = o.tokenizer, .name = o.name};
  const prism::llm::GgufExportReport report = prism::llm::export_gguf(o.in, o.out, options);
  std::string types;
  for (const auto& [t, n] : report.tensors) {
    types += fmt::format("{}{} {}", types.empty() ? "" : ", ", n, prism::quant::name(t));
  }
  std::fprintf(stderr, "wrote %s: %s tensors (%.1f MB)%s\n", o.out.c_str(), types.c_str(),
               report.bytes / 1e6, report.tokenizer ? ", tokenizer" : ", no tokenizer");
  return 0;
}

const prism::cli::RegisterCommand kQuantize{
    "quantize",
    "Write a safetensors Llama, LFM 2 or Qwen 3.5 checkpoint as a GGUF file (f16, q8_0, ...)",
    [](CLI::App& app) -> prism::cli::Action {
      auto o = std::make_shared<Options>();
      app.add_option("IN", o->in, "checkpoint: a directory or URI with config.json")->required();
      app.add_option("OUT", o->out, "the GGUF file to write (a local path)")->required();
      app.add_option("--type", o->type,
                     "the matrices' type: f32, f16, bf16, q8_0, q4_0, q4_k (norms stay f32; "
                     "matrices whose rows do not fit the blocks fall back, see "
                     "docs/quantization.md)")
          ->capture_default_str();
      app.add_option("--tokenizer", o->tokenizer,
                     "directory with tokenizer.json (default: the checkpoint's own, if any)");
      app.add_option("--name", o->name, "general.name (default: the checkpoint's name)");
      return [o] { return run(*o); };
    }};

}  // namespace
