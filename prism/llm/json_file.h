// Reading files and parsing JSON with errors that name the file, line and column.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace prism::llm {

// The whole file; throws prism::Error naming the path when it cannot be read.
std::string read_text_file(const std::string& path);

// Parses `text`; a syntax error throws prism::Error as "source:line:column: message".
nlohmann::json parse_json(std::string_view text, std::string_view source);

// Line and column (both from 1, the column counted in characters) of a byte offset.
struct TextPosition {
  size_t line = 1;
  size_t column = 1;
};
TextPosition position_of(std::string_view text, size_t byte_offset);

// Where the value at `path` ("normalizer.normalizers[1].type") starts in the JSON `text`, or
// nullopt when the path is not there. Used to give errors about a value's meaning a line and a
// column too.
std::optional<TextPosition> locate_json_path(std::string_view text, std::string_view path);

}  // namespace prism::llm
