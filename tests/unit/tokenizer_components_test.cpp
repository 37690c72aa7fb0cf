// Pipeline stages and options the fixture tokenizers do not use (Split's other behaviors and
// `invert`, Punctuation, Metaspace's prepend schemes), checked against the behavior Hugging Face's
// tokenizers documents; plus added-token flags, BPE options and errors on small hand-written files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "prism/core/error.h"
#include "prism/llm/bpe.h"
#include "prism/llm/tokenizer.h"
#include "prism/llm/tokenizer_pipeline.h"

namespace prism::llm {
namespace {

using nlohmann::json;

std::vector<std::string> pre_tokenize(const char* pre_tokenizer_json, std::string text) {
  auto stage = pipeline::make_pre_tokenizer(json::parse(pre_tokenizer_json), {"test", "", {}});
  std::vector<std::string> out;
  stage->pre_tokenize(text, true,
                      [&](std::string_view piece, bool) { out.push_back(std::string(piece)); });
  return out;
}

using Pieces = std::vector<std::string>;

// The example of Hugging Face's SplitDelimiterBehavior documentation.
TEST(TokenizerComponents, SplitBehaviors) {
  auto split = [](const char* behavior, bool invert = false) {
    std::string config =
        std::string(R"({"type": "Split", "pattern": {"String": "-"}, "behavior": ")") + behavior +
        R"(", "invert": )" + (invert ? "true" : "false") + "}";
    return pre_tokenize(config.c_str(), "the-final--countdown");
  };
  EXPECT_EQ(split("Removed"), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(split("Isolated"), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithPrevious"), (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithNext"), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split("Contiguous"), (Pieces{"the", "-", "final", "--", "countdown"}));
  // Inverted: the non-matches are what the behavior acts on.
  EXPECT_EQ(split("Removed", true), (Pieces{"-", "-", "-"}));
}

TEST(TokenizerComponents, PunctuationDigitsWhitespace) {
  EXPECT_EQ(pre_tokenize(R"({"type": "Punctuation"})", "hi!? ok..."),
            (Pieces{"hi", "!", "?", " ok", ".", ".", "."}));
  EXPECT_EQ(pre_tokenize(R"({"type": "Digits", "individual_digits": false})", "a123b4"),
            (Pieces{"a", "123", "b", "4"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "Digits", "individual_digits": true})", "a12"),
            (Pieces{"a", "1", "2"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "Whitespace"})", "Hey friend!  How are_you?"),
            (Pieces{"Hey", "friend", "!", "How", "are_you", "?"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "WhitespaceSplit"})", " a\tb\n c "), (Pieces{"a", "b", "c"}));
}

// A regex split whose pieces go through another regex (ByteLevel's) while the first scan is
// still under way.
TEST(TokenizerComponents, NestedRegexSplits) {
  const char* nested = R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "[,;]"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]})";
  EXPECT_EQ(pre_tokenize(nested, "ab cd,ef gh;ij"),
            (Pieces{"ab", "Ġcd", ",", "ef", "Ġgh", ";", "ij"}));
}

TEST(TokenizerComponents, MetaspacePrependSchemes) {
  const char* first = R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"})";
  EXPECT_EQ(pre_tokenize(first, "Hey there"), (Pieces{"▁Hey", "▁there"}));
  const char* never = R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"})";
  EXPECT_EQ(pre_tokenize(never, "Hey there"), (Pieces{"Hey", "▁there"}));
  const char* no_split =
      R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": false})";
  EXPECT_EQ(pre_tokenize(no_split, "Hey there"), (Pieces{"▁Hey▁there"}));
  // "first" prepends only to the piece that starts the input.
  const char* digits_then_first = R"({"type": "Sequence", "pretokenizers": [
      {"type": "Digits", "individual_digits": true},
      {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}]})";
  EXPECT_EQ(pre_tokenize(digits_then_first, "1ab"), (Pieces{"▁1", "ab"}));
}

// A character-level BPE over a few letters, with merges and the options under test.
std::string small_bpe(const std::string& model_options, const std::string& added_tokens = "[]",
                      const std::string& normalizer = "null") {
  return R"({"added_tokens": )" + added_tokens + R"(, "normalizer": )" + normalizer +
         R"(, "pre_tokenizer": {"type": "WhitespaceSplit"},
         "model": {"type": "BPE", "vocab": {"<unk>": 0, "a": 1, "b": 2, "c": 3, "##a": 4, "##b": 5,
         "##c": 6, "ab": 7, "abc": 8, "ca": 9, "x": 10, "a</w>": 11, "b</w>": 12, "ab</w>": 13},
         "merges": [["a", "##b"], ["ab", "##c"], ["c", "##a"], ["a", "b</w>"]])" +
         model_options + "}}";
}

TEST(TokenizerComponents, BpeOptions) {
  auto prefixed = Tokenizer::from_json(
      small_bpe(R"(, "continuing_subword_prefix": "##", "unk_token": "<unk>")"), "prefix.json");
  EXPECT_EQ(prefixed.encode("abc ca cab"), (std::vector<int32_t>{8, 9, 9, 5}));
  auto fused = Tokenizer::from_json(
      small_bpe(R"(, "unk_token": "<unk>", "fuse_unk": true, "continuing_subword_prefix": "##")"),
      "fuse.json");
  EXPECT_EQ(fused.encode("azzzb"), (std::vector<int32_t>{1, 0, 5}));
  auto suffixed = Tokenizer::from_json(
      R"({"pre_tokenizer": {"type": "WhitespaceSplit"}, "model": {"type": "BPE",
          "end_of_word_suffix": "</w>", "vocab": {"a": 0, "b": 1, "a</w>": 2, "b</w>": 3,
          "ab</w>": 4}, "merges": ["a b</w>"]}})",
      "suffix.json");
  EXPECT_EQ(suffixed.encode("ab a ba"), (std::vector<int32_t>{4, 2, 1, 2}));
}

// tokenizer.json's vocabulary and merges are read into tables as the text streams past; a
// document that is not read that way is parsed whole instead, and either way the tokenizer is
// the same.
TEST(TokenizerComponents, BpeTablesReadAsTheyStreamPast) {
  const std::string doc = small_bpe(R"(, "continuing_subword_prefix": "##")");
  const std::optional<TokenizerJson> parsed = parse_tokenizer_json(doc);
  ASSERT_TRUE(parsed);
  const BpeTables tables = parsed->tables();
  ASSERT_EQ(tables.vocab.size(), 14u);
  EXPECT_EQ(tables.vocab[8], (std::pair<std::string_view, int32_t>{"abc", 8}));
  ASSERT_EQ(tables.merges.size(), 4u);
  EXPECT_EQ(tables.merges[1], (std::pair<std::string_view, std::string_view>{"ab", "##c"}));
  EXPECT_EQ(tables.merges[3], (std::pair<std::string_view, std::string_view>{"a", "b</w>"}));
  EXPECT_FALSE(parsed->root["model"].contains("vocab"));
  EXPECT_EQ(parsed->root["model"]["continuing_subword_prefix"], "##");
  EXPECT_EQ(parsed->root["pre_tokenizer"]["type"], "WhitespaceSplit");
  // Merges spelled "a b", and a "vocab" elsewhere than the model's left in the document.
  const std::optional<TokenizerJson> spelled = parse_tokenizer_json(
      R"({"decoder": {"vocab": {"q": 1}}, "model": {"vocab": {"a": 0, "b": 1, "ab": 2},
          "merges": ["a b"], "type": "BPE"}})");
  ASSERT_TRUE(spelled);
  EXPECT_EQ(spelled->tables().merges.at(0),
            (std::pair<std::string_view, std::string_view>{"a", "b"}));
  EXPECT_EQ(spelled->root["decoder"]["vocab"]["q"], 1);
  const char* whole[] = {
      R"({"model": {"vocab": {"a": 0}, "vocab": {"a": 0}, "merges": []}})",  // given twice
      R"({"model": {"vocab": {"a": 0}, "merges": []}, "model": {}})",
      R"({"model": {"vocab": ["a"], "merges": []}})",
      R"({"model": {"vocab": {"a": -1}, "merges": []}})",
      R"({"model": {"vocab": {"a": 1.5}, "merges": []}})",
      R"({"model": {"vocab": {"a": 16777216}, "merges": []}})",
      R"({"model": {"vocab": {"a": 0}, "merges": [1]}})",
      R"({"model": {"vocab": {"a": 0}, "merges": ["a"]}})",
      R"({"model": {"vocab": {"a": 0}, "merges": [["a", "b", "c"]]}})",
      R"({"model": {"vocab": {"a": 0}}})",               // no merges
      R"({"model": {"vocab": {"a": 0}, "merges": []})",  // malformed
  };
  for (const char* text : whole) EXPECT_FALSE(parse_tokenizer_json(text)) << text;
  // The same tokenizer from the tables and from the whole document.
  const Tokenizer fast = Tokenizer::from_json(doc, "doc.json");
  const Tokenizer slow = Tokenizer::from_documents(json::parse(doc), "doc.json");
  for (const char* text : {"abc ca cab", "ab abab cc", "xyz"}) {
    EXPECT_EQ(fast.encode(text), slow.encode(text)) << text;
  }
}

TEST(TokenizerComponents, AddedTokenFlags) {
  const std::string added = R"([
      {"id": 20, "content": "[M]", "special": true, "lstrip": true, "rstrip": true, "normalized": false},
      {"id": 21, "content": "ab", "special": false, "single_word": true, "normalized": false},
      {"id": 22, "content": "<x>", "special": false, "normalized": true}])";
  auto tokenizer =
      Tokenizer::from_json(small_bpe(R"(, "unk_token": "<unk>", "continuing_subword_prefix": "##")",
                                     added, R"({"type": "Lowercase"})"),
                           "added.json");
  // lstrip/rstrip take the spaces around the token with it.
  EXPECT_EQ(tokenizer.encode("a  [M]  b"), (std::vector<int32_t>{1, 20, 2}));
  // single_word: only where "ab" is a whole word.
  EXPECT_EQ(tokenizer.encode("ab c"), (std::vector<int32_t>{21, 3}));
  EXPECT_EQ(tokenizer.encode("abc"), (std::vector<int32_t>{8}));
  // normalized: matched after the normalizer ran (here, lowercasing).
  EXPECT_EQ(tokenizer.encode("a<X>b"), (std::vector<int32_t>{1, 22, 2}));
  EXPECT_TRUE(tokenizer.is_special(20));
  EXPECT_FALSE(tokenizer.is_special(21));
  EXPECT_EQ(tokenizer.token_to_id("[M]"), 20);
}

TEST(TokenizerComponents, MalformedFilesNameTheFileAndPlace) {
  auto error_of = [](const std::string& text) -> std::string {
    try {
      Tokenizer::from_json(text, "dir/tokenizer.json");
    } catch (const prism::Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error_of("{\n  \"model\": {\n    \"vocab\": {\"a\": 1,,}\n  }\n}"),
            "dir/tokenizer.json:3:22: malformed JSON: syntax error while parsing object key - "
            "unexpected ','; expected string literal");
  EXPECT_EQ(
      error_of(
          R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "normalizer": {"type": "Nope"}})"),
      "dir/tokenizer.json:1:69: normalizer: unsupported normalizer type \"Nope\"");
  EXPECT_EQ(
      error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})"),
      "dir/tokenizer.json:1:57: model.merges[0]: merge uses \"b\", which is not in the vocabulary");
  EXPECT_EQ(error_of(R"({"model": {"type": "WordLevel", "vocab": {}}})"),
            "dir/tokenizer.json:1:11: model: unsupported model type \"WordLevel\" (only BPE)");
  EXPECT_EQ(
      error_of(R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
      "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}})"),
      "dir/tokenizer.json:2:24: pre_tokenizer: bad regex /(unclosed/ at offset 9: missing closing "
      "parenthesis");
}

// An id too large for the tables of ids (found by fuzz_tokenizer: a vocabulary id of 2^31 and
// more made the table of tokens grow past what a vector holds, an abort), in the vocabulary
// and among the added tokens.
TEST(TokenizerComponents, IdsPastTheLimitAreErrors) {
  auto error_of = [](const std::string& text) -> std::string {
    try {
      Tokenizer::from_json(text, "t.json");
    } catch (const prism::Error& e) {
      const std::string what = e.what();
      return what.substr(what.find(": ") + 2);
    }
    return "no error";
  };
  for (const char* id : {"2147483648", "4294967296", "18446744073709551615", "16777216"}) {
    SCOPED_TRACE(id);
    EXPECT_EQ(error_of(std::string(R"({"model": {"type": "BPE", "vocab": {"a": )") + id +
                       R"(}, "merges": []}})"),
              "model.vocab.a: expected a token id (an integer from 0 to 16777215), got " +
                  std::string(id));
    EXPECT_EQ(
        error_of(std::string(R"({"added_tokens": [{"id": )") + id +
                 R"(, "content": "x"}], "model": {"type": "BPE", "vocab": {}, "merges": []}})"),
        "added_tokens[0].id: expected a token id (an integer from 0 to 16777215), got " +
            std::string(id));
  }
  EXPECT_EQ(error_of(R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})"),
            "model.vocab.a: expected a token id (an integer from 0 to 16777215), got -1");
  // The post-processors' ids and their shapes.
  const std::string model = R"("model": {"type": "BPE", "vocab": {"a": 0}, "merges": []})";
  EXPECT_EQ(error_of(R"({"post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 4294967296],
      "sep": ["[SEP]", 2]}, )" +
                     model + "}"),
            "post_processor.cls[1]: expected a token id (an integer from 0 to 16777215), got "
            "4294967296");
  EXPECT_EQ(error_of(R"({"post_processor": {"type": "BertProcessing", "cls": 5,
      "sep": ["[SEP]", 2]}, )" +
                     model + "}"),
            "post_processor.cls: expected [token, id]");
  EXPECT_EQ(error_of(R"({"post_processor": {"type": "TemplateProcessing", "single": {"a": 1},
      "special_tokens": {}}, )" +
                     model + "}"),
            "post_processor.single: expected a list");
  EXPECT_EQ(error_of(R"({"post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>"}}],
      "special_tokens": {"<s>": {"ids": ["one"]}}}, )" +
                     model + "}"),
            "post_processor.special_tokens.<s>.ids[0]: expected a token id (an integer from 0 to "
            "16777215), got \"one\"");
  // The largest id is fine.
  EXPECT_EQ(error_of(R"({"model": {"type": "BPE", "vocab": {"a": 16777215}, "merges": []}})"),
            "no error");
}

// Fields of the wrong JSON type are one error naming the field, not a JSON library exception
// (found by fuzz_tokenizer: fuzz/corpus/tokenizer/regression-fdb5abc83b37 and -2d0721091589).
TEST(TokenizerComponents, FieldsOfTheWrongTypeAreErrors) {
  auto error_of = [](const std::string& text, const std::string& config = {}) -> std::string {
    try {
      Tokenizer::from_json(text, "t.json", config, "c.json");
    } catch (const prism::Error& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string bpe = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
  EXPECT_EQ(error_of(R"({"model": {"type": "BPE", "dropout": [0.1], "vocab": {}, "merges": []}})"),
            "t.json:1:38: model.dropout: expected a number or null");
  EXPECT_EQ(error_of(R"({"model": {"type": "BPE", "dropout": 0.1, "vocab": {}, "merges": []}})"),
            "t.json:1:38: model.dropout: BPE dropout is for training; inference expects none");
  EXPECT_EQ(error_of(bpe, R"({"chat_template": [{"name": "default", "template": "x"}, 3]})"),
            "c.json:1:58: chat_template[1]: expected {\"name\": ..., \"template\": ...}");
  EXPECT_EQ(error_of(bpe, R"({"chat_template": [{"name": 7, "template": "x"}]})"),
            "c.json:1:29: chat_template[0].name: expected a string");
  EXPECT_EQ(error_of(bpe, R"({"chat_template": [{"name": "default", "template": null}]})"),
            "no error");
  // A number past double's range (seed regression-2d0721091589).
  EXPECT_EQ(error_of(R"({"model": {"type": "BPE", "dropout": 9e999, "vocab": {}, "merges": []}})"),
            "t.json: malformed JSON: number overflow parsing '9e999'");
  EXPECT_EQ(error_of(bpe, R"({"bos_token": {"content": 5}})"),
            "c.json:1:15: bos_token: expected a token string or {\"content\": ...}");
}

TEST(TokenizerComponents, StreamingNeverSplitsACharacter) {
  // Byte-fallback pieces of one emoji arrive one id at a time; nothing comes out until the
  // character is whole.
  std::string vocab = R"({"<unk>": 0)";
  for (int b = 0; b < 256; ++b) vocab += fmt::format(R"(, "<0x{:02X}>": {})", b, b + 1);
  vocab += R"(, "▁": 257, "h": 258, "i": 259, "▁h": 260, "▁hi": 261})";
  auto tokenizer = Tokenizer::from_json(
      R"({"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
          "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>", "vocab": )" +
          vocab + R"(, "merges": ["▁ h", "▁h i"]},
          "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]}})",
      "stream.json");
  auto ids = tokenizer.encode(" hi🦙");
  ASSERT_EQ(ids.size(), 5u);
  StreamingDetokenizer stream(tokenizer);
  EXPECT_EQ(stream.push(ids[0]), " hi");
  EXPECT_EQ(stream.push(ids[1]), "");
  EXPECT_EQ(stream.push(ids[2]), "");
  EXPECT_EQ(stream.push(ids[3]), "");
  EXPECT_EQ(stream.push(ids[4]), "🦙");
  EXPECT_EQ(stream.finish(), "");
  // A character cut short at the end comes out as U+FFFD, once.
  StreamingDetokenizer cut(tokenizer);
  EXPECT_EQ(cut.push(ids[1]), "");
  EXPECT_EQ(cut.finish(), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace prism::llm
