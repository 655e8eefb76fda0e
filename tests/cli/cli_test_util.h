// What the CLI end-to-end tests share: running the built `precprobe`, the golden dumps of
// tests/data/cli/, parsers for its CSV, JSON Lines and report output, and the model of
// make_golden_dumps.cpp computed in double (test_cli*.cpp).
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "frame_stream.h"
#include "precprobe/reader.h"
#include "precprobe/writer.h"
#include "precprobe_catch.h"
#include "support/cli_run.h"

namespace precprobe::cli_test {

using nlohmann::json;

inline const std::string kData = std::string(PRECPROBE_TEST_DATA_DIR) + "/cli/";

struct Run : test::CliRun {
  json parse() const { return json::parse(out); }
};

// Runs precprobe with `args`; with `merge_stderr` the output holds stderr too.
inline Run run(const std::string& args, bool merge_stderr = false) {
  return Run{test::run_cli(args, merge_stderr)};
}

inline std::string dump(const std::string& name) { return "'" + kData + name + "'"; }

// `precprobe <args> --json`, requiring exit status `status`.
inline json run_json(const std::string& args, int status) {
  Run r = run(args + " --json");
  INFO(args << "\n" << r.out.substr(0, 2000));
  REQUIRE(r.status == status);
  return r.parse();
}

// RFC 4180 CSV: quoted fields may hold commas, quotes ("") and newlines.
inline std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(field);
      field.clear();
    } else if (c == '\n') {
      row.push_back(field);
      field.clear();
      rows.push_back(row);
      row.clear();
    } else {
      field += c;
    }
  }
  if (!field.empty() || !row.empty()) {
    row.push_back(field);
    rows.push_back(row);
  }
  return rows;
}

// A CSV table as rows of column name -> text.
inline std::vector<std::map<std::string, std::string>> csv_table(const std::string& text,
                                                                 std::vector<std::string>* header) {
  auto rows = parse_csv(text);
  REQUIRE_FALSE(rows.empty());
  *header = rows[0];
  std::vector<std::map<std::string, std::string>> out;
  for (size_t i = 1; i < rows.size(); ++i) {
    INFO("row " << i);
    REQUIRE(rows[i].size() == header->size());
    std::map<std::string, std::string> m;
    for (size_t k = 0; k < header->size(); ++k) m[(*header)[k]] = rows[i][k];
    out.push_back(std::move(m));
  }
  return out;
}

inline std::vector<json> jsonl(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

// The tests read results through non-const json objects: a missing key then reads as null
// and fails the check, where a const operator[] would be undefined behaviour.

// The data block of a report page (docs/report.md).
inline json report_data(const std::string& file) {
  std::ifstream in(file);
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string open = "<script type=\"application/json\" id=\"precprobe-data\">";
  const size_t a = html.find(open);
  REQUIRE(a != std::string::npos);
  const size_t b = html.find("</script>", a);
  REQUIRE(b != std::string::npos);
  return json::parse(html.substr(a + open.size(), b - a - open.size()));
}

inline json* find_item(json& check, const std::string& id) {
  for (auto& i : check["items"])
    if (i["id"] == id) return &i;
  return nullptr;
}

// ---- the model of make_golden_dumps.cpp, computed here in double ------------------------

constexpr double kX[4][4] = {
    {1.5, -0.5, 0.5, -1.5}, {-0.5, 1.5, -1.5, 0.5}, {0.5, -1.5, 1.5, -0.5}, {-1.5, 0.5, -0.5, 1.5}};
constexpr int kY[4] = {0, 1, 2, 0};
constexpr double kW1[8][4] = {
    {0.6, -0.2, 0.2, -0.6}, {0.5, -0.3, 0.3, -0.5}, {0.4, 0.1, 0.2, -0.4}, {0.3, -0.4, 0.1, -0.3},
    {-0.3, 0.5, -0.4, 0.2}, {-0.2, 0.6, -0.5, 0.1}, {0.2, 0.3, -0.6, 0.4}, {-0.5, -0.2, 0.4, 0.3}};
constexpr double kB1[8] = {0.1, -0.1, 0.05, 0.0, 0.1, -0.05, 0.0, 0.1};
constexpr double kW2[3][8] = {{0.8, 0.7, 0.6, 0.5, 0.5, 0.4, 0.5, 0.3},
                              {-0.4, 0.3, -0.2, 0.5, -0.3, 0.4, -0.5, 0.2},
                              {0.2, -0.5, 0.4, -0.3, 0.1, -0.2, 0.3, -0.6}};
constexpr double kB2[3] = {0.0, 0.1, -0.1};

// Step 0 runs on the initial weights (every step's batch is the same 4 rows, rotated).
struct Forward {
  double pre_min = INFINITY, pre_max = -INFINITY;      // fc1's addmm output
  double act_max = 0;                                  // relu output
  double logit_min = INFINITY, logit_max = -INFINITY;  // fc2's addmm output
  double loss = 0;                                     // mean cross-entropy
  double row0_sum = 0;                                 // max over rows of fc2 row 0 (no bias)
};

inline Forward forward_step0() {
  Forward f;
  for (int r = 0; r < 4; ++r) {
    double h[8];
    for (int i = 0; i < 8; ++i) {
      double pre = kB1[i];
      for (int j = 0; j < 4; ++j) pre += kW1[i][j] * kX[r][j];
      f.pre_min = std::min(f.pre_min, pre);
      f.pre_max = std::max(f.pre_max, pre);
      h[i] = std::max(pre, 0.0);
      f.act_max = std::max(f.act_max, h[i]);
    }
    double z[3], zmax = -INFINITY;
    for (int k = 0; k < 3; ++k) {
      double dot = 0;
      for (int i = 0; i < 8; ++i) dot += kW2[k][i] * h[i];
      if (k == 0) f.row0_sum = std::max(f.row0_sum, dot);
      z[k] = dot + kB2[k];
      zmax = std::max(zmax, z[k]);
      f.logit_min = std::min(f.logit_min, z[k]);
      f.logit_max = std::max(f.logit_max, z[k]);
    }
    double sum = 0;
    for (double v : z) sum += std::exp(v - zmax);
    f.loss += (zmax + std::log(sum) - z[kY[r]]) / 4;
  }
  return f;
}

// Summary figures used by several tests.
inline json summary(const std::string& name) { return run_json("summary " + dump(name), 0); }

inline const std::vector<std::string> kOpsColumns = {
    "step",  "rank",  "seq",  "name",  "op",  "overload", "call",  "dir",   "depth", "thread",
    "scope", "node",  "io",   "index", "li",  "dtype",    "shape", "numel", "nan",   "pinf",
    "ninf",  "zero",  "neg",  "pos",   "min", "max",      "mean",  "norm",  "hash",  "param",
    "rg",    "value", "grad", "sn",    "bg",  "opt",      "mod"};

}  // namespace precprobe::cli_test
