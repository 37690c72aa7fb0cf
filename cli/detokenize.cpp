// `prism detokenize`: prints the text of token ids, exactly (no newline added).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "prism/core/error.h"
#include "prism/llm/tokenizer.h"

namespace {

struct Options {
  std::string tokenizer;
  bool skip_special = false;
  std::vector<std::string> ids;
};

int run(const Options& opts) {
  std::vector<int32_t> ids;
  for (const std::string& word : opts.ids) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < 0 || id > INT32_MAX) {
      prism::fail("detokenize: '{}' is not a token id", word);
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  auto tokenizer = prism::llm::Tokenizer::load(opts.tokenizer);
  std::string text = tokenizer.decode(ids, {.skip_special_tokens = opts.skip_special,
                                            .clean_up_tokenization_spaces = std::nullopt});
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

const prism::cli::RegisterCommand kDetokenize{
    "detokenize", "Print the text of token ids", [](CLI::App& app) -> prism::cli::Action {
      auto opts = std::make_shared<Options>();
      app.add_option("--tokenizer", opts->tokenizer,
                     "Directory with tokenizer.json (or the file itself)")
          ->required();
      app.add_flag("--skip-special", opts->skip_special, "Leave special tokens out of the text");
      app.add_option("ids", opts->ids, "Token ids")->allow_extra_args();
      return [opts] { return run(*opts); };
    }};

}  // namespace
