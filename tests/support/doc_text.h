// Reading a doc and a test source as lines, for the tests that check a doc's code block is
// the program they compile (test_doc_examples, test_readme_example).
#pragma once

#include <cctype>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "precprobe_catch.h"

namespace precprobe::test {

/// The whole text of a file; the test fails when it cannot be read.
inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// `line` without the white space around it.
inline std::string trim(const std::string& line) {
  size_t a = 0, b = line.size();
  while (a < b && std::isspace(static_cast<unsigned char>(line[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(line[b - 1]))) --b;
  return line.substr(a, b - a);
}

/// The lines (trimmed, blank lines kept) after the first line that trims to `open`, up to the
/// next that trims to `close`.
inline std::vector<std::string> lines_between(const std::string& text, const std::string& open,
                                              const std::string& close) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (!inside) {
      inside = t == open;
    } else if (t == close) {
      break;
    } else {
      out.push_back(t);
    }
  }
  return out;
}

}  // namespace precprobe::test
