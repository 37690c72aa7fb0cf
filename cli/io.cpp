// `prism io ls|tree|stat|cat|cp|inspect|load URI`: the VFS, safetensors and GGUF layers from
// the shell, for every scheme (local paths, https://, hf://, s3://).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "cli/command.h"
#include "prism/backends/registry.h"
#include "prism/core/error.h"
#include "prism/io/gguf.h"
#include "prism/io/load.h"
#include "prism/io/store.h"
#include "prism/io/vfs.h"

namespace prism::cli {
namespace {

struct IoOptions {
  std::string uri;
  std::string dest;
  bool flat = false;
  std::string platform;
  std::string dtype;  // load: convert to this dtype ("" keeps the file's)
  int parallelism = 8;
  uint64_t chunk_size = 16ull << 20;
  io::ReadOptions read() const { return {.parallelism = parallelism, .chunk_size = chunk_size}; }
};

// "model.layers.10" after "model.layers.9": numeric components compare as numbers.
bool natural_less(const std::string& a, const std::string& b) {
  bool a_num = !a.empty() && std::all_of(a.begin(), a.end(), ::isdigit);
  bool b_num = !b.empty() && std::all_of(b.begin(), b.end(), ::isdigit);
  if (a_num && b_num && a.size() != b.size()) return a.size() < b.size();
  return a < b;
}

// Spaces that pad `text` to `width` terminal columns (the tree's box characters are
// multi-byte UTF-8, so printf's byte-counting %-60s would misalign them).
std::string padding(const std::string& text, size_t width) {
  size_t columns = 0;
  for (unsigned char c : text) columns += (c & 0xc0) != 0x80;  // count code points
  return std::string(columns < width ? width - columns : 0, ' ');
}

// A tree of names split at a separator ('.' for tensors, '/' for files), with totals.
struct NameTree {
  struct Node {
    std::map<std::string, std::unique_ptr<Node>, decltype(&natural_less)> children{&natural_less};
    std::string leaf;  // what to print for a leaf ("F32  [8, 4]  128 B")
    bool is_leaf = false;
    uint64_t count = 0;
    uint64_t bytes = 0;
  };
  Node root;
  char separator;
  const char* unit;  // what the leaves are: "tensors", "files"

  NameTree(char sep, const char* leaf_unit) : separator(sep), unit(leaf_unit) {}

  void add(const std::string& name, uint64_t bytes, std::string leaf) {
    Node* node = &root;
    size_t start = 0;
    while (true) {
      node->count += 1;
      node->bytes += bytes;
      size_t end = name.find(separator, start);
      std::string part = name.substr(start, end == std::string::npos ? end : end - start);
      auto& child = node->children[part];
      if (!child) child = std::make_unique<Node>();
      node = child.get();
      if (end == std::string::npos) break;
      start = end + 1;
    }
    node->count += 1;
    node->bytes += bytes;
    node->is_leaf = true;
    node->leaf = std::move(leaf);
  }

  void print(const Node& node, const std::string& indent) const {
    size_t i = 0;
    for (const auto& [part, child] : node.children) {
      bool last = ++i == node.children.size();
      // Chains with one child print as one name: "embed_tokens.weight", not two levels.
      std::string label = part;
      const Node* shown = child.get();
      while (!shown->is_leaf && shown->children.size() == 1) {
        label += separator + shown->children.begin()->first;
        shown = shown->children.begin()->second.get();
      }
      std::string line = indent + (last ? "└─ " : "├─ ") + label;
      if (shown->is_leaf) {
        std::printf("%s%s %s\n", line.c_str(), padding(line, 60).c_str(), shown->leaf.c_str());
        // A name that is also a prefix ("q4_k" and "q4_k.ref"): its children below it.
        if (!shown->children.empty()) print(*shown, indent + (last ? "   " : "│  "));
      } else {
        std::printf("%s  (%llu %s, %s)\n", line.c_str(),
                    static_cast<unsigned long long>(shown->count), unit,
                    io::format_bytes(shown->bytes).c_str());
        print(*shown, indent + (last ? "   " : "│  "));
      }
    }
  }
};

int run_ls(const IoOptions& o) {
  for (const auto& e : io::list(o.uri, false)) {
    if (e.is_dir) {
      std::printf("%12s  %s/\n", "-", e.path.c_str());
    } else {
      std::printf("%12llu  %s\n", static_cast<unsigned long long>(e.size), e.path.c_str());
    }
  }
  return 0;
}

int run_tree(const IoOptions& o) {
  NameTree tree('/', "files");
  for (const auto& e : io::list(o.uri, true)) tree.add(e.path, e.size, io::format_bytes(e.size));
  std::printf("%s  (%llu files, %s)\n", o.uri.c_str(),
              static_cast<unsigned long long>(tree.root.count),
              io::format_bytes(tree.root.bytes).c_str());
  tree.print(tree.root, "");
  return 0;
}

int run_stat(const IoOptions& o) {
  io::FileEntry e = io::stat(o.uri);
  std::printf("uri:  %s\n", e.uri.c_str());
  std::printf("type: %s\n", e.is_dir ? "directory" : "file");
  if (!e.is_dir) {
    std::printf("size: %llu (%s)\n", static_cast<unsigned long long>(e.size),
                io::format_bytes(e.size).c_str());
  }
  return 0;
}

int run_cat(const IoOptions& o) {
  auto file = io::open(o.uri);
  // Reads a window of parallelism x chunk_size at a time, so that output stays in order while
  // several requests are in flight.
  uint64_t window = o.chunk_size * static_cast<uint64_t>(std::max(o.parallelism, 1));
  std::vector<std::byte> buffer(std::min<uint64_t>(window, file->size()));
  for (uint64_t offset = 0; offset < file->size(); offset += buffer.size()) {
    auto out = std::span(buffer).first(std::min<uint64_t>(buffer.size(), file->size() - offset));
    io::ReadRange range{file.get(), offset, out};
    io::read_ranges(std::span(&range, 1), o.read());
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) {
      fail("{}: cannot write to stdout", o.uri);
    }
  }
  std::fflush(stdout);
  return 0;
}

int run_cp(const IoOptions& o) {
  std::string dest = o.dest;
  if (!io::stat(o.uri).is_dir) {
    if (std::filesystem::is_directory(dest)) dest = io::join(dest, io::base_name(o.uri));
    io::copy_to_local(o.uri, dest, o.read());
    return 0;
  }
  // A directory, repo or prefix: everything under it, into `dest` (created if needed).
  uint64_t files = 0, bytes = 0;
  for (const auto& e : io::list(o.uri, true)) {
    // Names come from the listing (S3 keys, a repository's files): none may leave `dest`.
    std::filesystem::create_directories(dest);
    io::copy_to_local(e.uri, io::local_path_under(dest, e.path, e.uri), o.read());
    files += 1;
    bytes += e.size;
  }
  std::fprintf(stderr, "copied %llu files, %s\n", static_cast<unsigned long long>(files),
               io::format_bytes(bytes).c_str());
  return 0;
}

// A GGUF file: named .gguf, or a file that starts with the magic. Safetensors names, and
// directories named as such, are taken at their word, costing no request; anything else that
// is not a GGUF file, or cannot be probed, goes to the checkpoint reader, which says what it
// finds.
bool names_gguf(const std::string& uri) {
  if (uri.ends_with(".gguf")) return true;
  if (uri.ends_with(".safetensors") || uri.ends_with(".json") || uri.ends_with("/")) return false;
  try {
    io::FileEntry e = io::stat(uri);
    return !e.is_dir && e.size >= 4 && io::is_gguf(*io::open(uri, {.metadata_only = true}));
  } catch (const Error&) {
    return false;
  }
}

// A GGUF file's header: its metadata (long arrays cut to their first items), then its tensors
// as safetensors checkpoints show them.
int inspect_gguf(const IoOptions& o) {
  auto file = io::open(o.uri, {.metadata_only = true});
  io::GgufHeader h = io::GgufHeader::read(*file);
  std::map<std::string, uint64_t> types;
  NameTree tree('.', "tensors");
  for (const io::GgufTensor& t : h.tensors) {
    std::string type(quant::name(t.type));
    types[type] += 1;
    if (o.flat) {
      std::printf("%-60s %-8s %-20s %s\n", t.name.c_str(), type.c_str(), t.shape_str().c_str(),
                  io::format_bytes(t.bytes).c_str());
    } else {
      tree.add(t.name, t.bytes,
               fmt::format("{:<8} {:<20} {}", type, t.shape_str(), io::format_bytes(t.bytes)));
    }
  }
  std::string type_summary;
  for (const auto& [type, count] : types) type_summary += fmt::format(" {}:{}", type, count);
  std::printf("%s: GGUF v%u, %zu tensors, %s (types%s), %zu metadata keys, alignment %llu\n",
              h.uri.c_str(), h.version, h.tensors.size(), io::format_bytes(h.data_bytes()).c_str(),
              type_summary.c_str(), h.metadata.size(),
              static_cast<unsigned long long>(h.alignment));
  if (o.flat) return 0;
  size_t width = 0;
  for (const auto& [key, value] : h.metadata) width = std::max(width, key.size());
  width = std::min<size_t>(width, 40);
  std::printf("metadata:\n");
  for (const auto& [key, value] : h.metadata) {
    std::printf("  %-*s %s\n", static_cast<int>(width), key.c_str(), value.to_string(4).c_str());
  }
  std::printf("tensors:\n");
  tree.print(tree.root, "");
  return 0;
}

int run_inspect(const IoOptions& o) {
  if (names_gguf(o.uri)) return inspect_gguf(o);
  // Metadata only: inspecting an hf:// checkpoint reads its headers, it does not download it.
  io::Store store = io::Store::open(o.uri, {.parallelism = o.parallelism, .metadata_only = true});
  std::map<std::string, uint64_t> dtypes;
  NameTree tree('.', "tensors");
  for (const auto& name : store.names()) {
    const io::StoredTensor& t = store.at(name);
    dtypes[std::string(io::name(t.info.dtype))] += 1;
    if (o.flat) {
      std::printf("%-60s %-8s %-20s %s\n", name.c_str(),
                  std::string(io::name(t.info.dtype)).c_str(), t.info.shape_str().c_str(),
                  io::format_bytes(t.bytes).c_str());
    } else {
      tree.add(name, t.bytes,
               fmt::format("{:<8} {:<20} {}", io::name(t.info.dtype), t.info.shape_str(),
                           io::format_bytes(t.bytes)));
    }
  }
  std::string dtype_summary;
  for (const auto& [dtype, count] : dtypes) dtype_summary += fmt::format(" {}:{}", dtype, count);
  std::printf("%s: %zu tensors, %s in %zu file%s (dtypes%s)\n", store.uri().c_str(), store.size(),
              io::format_bytes(store.total_bytes()).c_str(), store.files().size(),
              store.files().size() == 1 ? "" : "s", dtype_summary.c_str());
  if (!o.flat) tree.print(tree.root, "");
  return 0;
}

// Streams every tensor of a checkpoint into buffers on a platform, as a model's load would.
int run_load(const IoOptions& o) {
  io::Store store = io::Store::open(o.uri, {.parallelism = o.parallelism});
  std::optional<DType> to;
  if (!o.dtype.empty()) to = dtype_from_name(o.dtype);
  std::vector<Executable::Parameter> tensors;
  for (const std::string& name : store.names()) {
    Shape s = store.at(name).info.core_shape();
    tensors.push_back({name, to ? s.with_dtype(*to) : s});
  }
  Platform& platform = get_platform(o.platform);
  io::LoadOptions options;
  options.parallelism = o.parallelism;
  options.chunk_size = o.chunk_size;
  io::LoadStats stats;
  io::load(store, tensors, platform, options, &stats);
  std::printf("%s on %s: %zu tensors (%zu used in place)\n", store.uri().c_str(),
              std::string(platform.name()).c_str(), stats.tensors, stats.zero_copy);
  return 0;
}

const RegisterCommand kIo{
    "io", "Browse and copy files and checkpoints (local, https, hf, s3)",
    [](CLI::App& app) -> Action {
      auto o = std::make_shared<IoOptions>();
      auto chosen = std::make_shared<std::function<int(const IoOptions&)>>();
      app.require_subcommand(1);
      auto add = [&](const char* name, const char* help, int (*fn)(const IoOptions&)) {
        CLI::App* sub = app.add_subcommand(name, help);
        sub->add_option("uri", o->uri,
                        "A path, file://, https://, hf://org/repo[@rev]/path or "
                        "s3://bucket/key")
            ->required();
        sub->callback([chosen, fn] { *chosen = fn; });
        return sub;
      };
      add("ls", "List a directory, repo or prefix", run_ls);
      add("tree", "List everything under a directory, repo or prefix, as a tree", run_tree);
      add("stat", "Print a file's size and type", run_stat);
      for (CLI::App* sub :
           {add("cat", "Write a file's bytes to stdout", run_cat),
            add("cp", "Copy a file, or all under a directory/repo/prefix, to a local path", run_cp),
            add("inspect",
                "Print every tensor of a safetensors file or checkpoint, or of a GGUF file "
                "(name, dtype, shape, size), as a tree by name prefix with totals; for GGUF "
                "its metadata too",
                run_inspect),
            add("load", "Stream a checkpoint's tensors onto a platform and report the speed",
                run_load)}) {
        sub->add_option("--parallelism", o->parallelism, "Reads in flight")->capture_default_str();
        sub->add_option("--chunk-size", o->chunk_size, "Bytes per read")->capture_default_str();
        if (sub->get_name() == "cp") {
          sub->add_option("dest", o->dest, "Local file or directory")->required();
        }
        if (sub->get_name() == "inspect") sub->add_flag("--flat", o->flat, "One line per tensor");
        if (sub->get_name() == "load") {
          sub->add_option("--platform", o->platform, "cpu, opencl, cuda, auto");
          sub->add_option("--dtype", o->dtype, "Convert every tensor to this dtype (f32, bf16...)");
        }
      }
      return [o, chosen] { return (*chosen)(*o); };
    }};

}  // namespace
}  // namespace prism::cli
