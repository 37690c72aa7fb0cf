// `prism tokenize`: prints the token ids of a text, separated by spaces, on one line.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>

#include "cli/command.h"
#include "prism/core/error.h"
#include "prism/llm/json_file.h"
#include "prism/llm/tokenizer.h"

namespace {

struct Options {
  std::string tokenizer;
  bool special = false;
  std::string text_file;
  std::optional<std::string> text;
};

int run(const Options& opts) {
  std::string text;
  if (opts.text && !opts.text_file.empty())
    prism::fail("tokenize: give a TEXT or --text-file, not both");
  if (opts.text) {
    text = *opts.text;
  } else if (!opts.text_file.empty()) {
    text = prism::llm::read_text_file(opts.text_file);
  } else {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  auto tokenizer = prism::llm::Tokenizer::load(opts.tokenizer);
  auto ids = tokenizer.encode(text, {.add_special_tokens = opts.special});
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  return 0;
}

const prism::cli::RegisterCommand kTokenize{
    "tokenize", "Print the token ids of a text (from TEXT, --text-file or standard input)",
    [](CLI::App& app) -> prism::cli::Action {
      auto opts = std::make_shared<Options>();
      app.add_option("--tokenizer", opts->tokenizer,
                     "Directory with tokenizer.json (or the file itself)")
          ->required();
      app.add_flag("--special", opts->special,
                   "Add the special tokens the model expects (e.g. BOS), as add_special_tokens");
      app.add_option("--text-file", opts->text_file, "Read the text from this file");
      app.add_option("text", opts->text, "The text");
      return [opts] { return run(*opts); };
    }};

}  // namespace
