// Terminal styling, tables, progress and formatting for the precprobe commands.
#include "cli_common.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> before fmt 11)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "precprobe/error.h"

namespace precprobe::cli {

Terminal Terminal::detect() {
  Terminal t;
  t.color = isatty(STDOUT_FILENO) != 0 && std::getenv("NO_COLOR") == nullptr;
  t.progress = isatty(STDERR_FILENO) != 0;
  return t;
}

std::string paint(const Terminal& term, Tone tone, const std::string& text) {
  if (!term.color || tone == Tone::kPlain) return text;
  const char* code = "";
  switch (tone) {
    case Tone::kBold:
      code = "1";
      break;
    case Tone::kDim:
      code = "2";
      break;
    case Tone::kRed:
      code = "31";
      break;
    case Tone::kGreen:
      code = "32";
      break;
    case Tone::kYellow:
      code = "33";
      break;
    case Tone::kCyan:
      code = "36";
      break;
    case Tone::kPlain:
      break;
  }
  return fmt::format("\033[{}m{}\033[0m", code, text);
}

void Table::add(std::vector<std::string> row, Tone tone) {
  row.resize(header_.size());
  rows_.emplace_back(std::move(row), tone);
}

namespace {

// "12", "-3.5e-07", ".5", "150%", "nan", "inf": right-aligned. "-" (no value) is not.
bool numeric(const std::string& s) {
  if (s == "nan" || s == "inf" || s == "-inf") return true;
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i < s.size() && s[i] == '.') ++i;
  return i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]));
}

}  // namespace

void Table::print(std::ostream& out, const Terminal& term, const std::string& indent) const {
  std::vector<size_t> width(header_.size(), 0);
  for (size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
  for (const auto& [row, tone] : rows_) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& row, bool header) {
    std::string s = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      const bool right = !header && numeric(row[c]);
      const std::string pad(width[c] - row[c].size(), ' ');
      s += right ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");
      if (c + 1 < row.size()) s += "  ";
    }
    s.erase(s.find_last_not_of(' ') + 1);
    return s;
  };
  out << paint(term, Tone::kBold, line(header_, true)) << '\n';
  for (const auto& [row, tone] : rows_) out << paint(term, tone, line(row, false)) << '\n';
}

Progress::Progress(const Terminal& term, std::string what)
    : enabled_(term.progress), what_(std::move(what)) {}

Progress::~Progress() {
  if (drawn_) std::fputs("\r\033[K", stderr);
}

ProgressFn Progress::callback() {
  if (!enabled_) return {};
  return [this](uint64_t n) {
    using namespace std::chrono;
    const int64_t now = duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
    if (now - last_ms_ < 100) return;
    last_ms_ = now;
    drawn_ = true;
    std::fprintf(stderr, "\r\033[Kreading %s: %llu records", what_.c_str(),
                 static_cast<unsigned long long>(n));
    std::fflush(stderr);
  };
}

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.6g}", v);
}

std::string num(int64_t v) { return std::to_string(v); }

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string arg_str(const Arg& a) {
  if (!a.tensor) return display_value(a.value);  // 0.2, not 0.20000000000000001
  const TensorStats& t = *a.tensor;
  std::string s = fmt::format("{} {} min {} max {} mean {} norm {}", t.dtype, shape_str(t.shape),
                              num(t.min), num(t.max), num(t.mean), num(t.norm));
  if (t.nan) s += fmt::format(" nan {}", t.nan);
  if (t.pinf) s += fmt::format(" +inf {}", t.pinf);
  if (t.ninf) s += fmt::format(" -inf {}", t.ninf);
  if (!t.param.empty()) s += " (" + t.param + ")";
  return s;
}

namespace {

// A stream that does not start with a zstd frame is a foreign file (a PNG renamed
// ops.jsonl.zst, a stray text file): reading it would report 0 records and let a command
// answer "nothing found", so it is an input error. An empty stream is legitimate (killed
// before its first frame); a readable prefix with a cut tail is reported by the reader.
void check_stream_files(const std::string& rank_dir) {
  for (StreamKind kind : kAllStreams) {
    const std::string file = DumpReader::stream_path(rank_dir, kind);
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) continue;
    if (!std::filesystem::is_regular_file(file, ec))
      throw Error(fmt::format("{}: not a regular file", file));
    std::FILE* f = std::fopen(file.c_str(), "rb");
    if (f == nullptr) throw Error(fmt::format("{}: cannot open for reading", file));
    unsigned char magic[4] = {0, 0, 0, 0};
    const size_t n = std::fread(magic, 1, sizeof magic, f);
    std::fclose(f);
    if (n == 0) continue;
    if (!starts_with_zstd_frame(magic, n))
      throw Error(fmt::format(
          "{}: not a precprobe stream (expected zstd frames; the file is foreign or corrupt)",
          file));
  }
}

}  // namespace

std::unique_ptr<DumpReader> open_dump(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error(fmt::format("'{}': no such file or directory", path));
  if (!std::filesystem::is_directory(path, ec))
    throw Error(fmt::format("'{}' is not a directory (a dump is a directory)", path));
  auto reader = std::make_unique<DumpReader>(path);
  for (const RankInfo& rank : reader->ranks()) check_stream_files(rank.dir);
  return reader;
}

void print_json(const nlohmann::json& j) {
  std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
}

}  // namespace precprobe::cli
