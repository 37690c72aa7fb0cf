// Turns every ```cpp block of a Markdown file into a GoogleTest case, so that the
// documentation's examples are compiled and run by the test suite.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: extract_snippets DOC.md SUITE OUT.cpp\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << "extract_snippets: cannot read " << argv[1] << "\n";
    return 1;
  }
  std::ostringstream out;
  out << "// Generated from " << argv[1] << " by extract_snippets: do not edit.\n"
      << "#include <gtest/gtest.h>\n#include <map>\n#include <string>\n"
      << "#include \"prism/backends/registry.h\"\n#include \"prism/nn/nn.h\"\n"
      << "namespace prism {\nnamespace {\n";
  std::string line;
  int count = 0, line_no = 0;
  bool inside = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (!inside && line == "```cpp") {
      inside = true;
      out << "TEST(" << argv[2] << ", Snippet" << ++count << ") {\n#line " << line_no + 1 << " \""
          << argv[1] << "\"\n";
    } else if (inside && line == "```") {
      inside = false;
      out << "}\n";
    } else if (inside) {
      out << line << "\n";
    }
  }
  out << "}  // namespace\n}  // namespace prism\n";
  if (inside || count == 0) {
    std::cerr << "extract_snippets: " << argv[1] << ": "
              << (inside ? "unclosed block" : "no cpp blocks") << "\n";
    return 1;
  }
  std::ofstream(argv[3]) << out.str();
  return 0;
}
