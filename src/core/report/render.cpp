// The HTML page of the report: the template with uPlot, the page's script and styles and
// the data JSON put in place of its {{...}} markers. The assets are byte arrays compiled
// in by cmake/EmbedFiles.cmake.
#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

#include "file_output.h"
#include "precprobe/error.h"
#include "precprobe/report.h"

extern const unsigned char precprobe_embed_report_html[];
extern const std::size_t precprobe_embed_report_html_size;
extern const unsigned char precprobe_embed_report_css[];
extern const std::size_t precprobe_embed_report_css_size;
extern const unsigned char precprobe_embed_report_heatmap_js[];
extern const std::size_t precprobe_embed_report_heatmap_js_size;
extern const unsigned char precprobe_embed_report_js[];
extern const std::size_t precprobe_embed_report_js_size;
extern const unsigned char precprobe_embed_uPlot_iife_min_js[];
extern const std::size_t precprobe_embed_uPlot_iife_min_js_size;
extern const unsigned char precprobe_embed_uPlot_min_css[];
extern const std::size_t precprobe_embed_uPlot_min_css_size;

namespace precprobe {
namespace {

std::string_view asset(const unsigned char* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// JSON inside <script type="application/json">: a "</script>" or "<!--" in a string (an op
// or parameter name, a path) would end the block. '<' only occurs inside JSON strings, where
// the escape \u003c means the same character.
std::string script_safe_json(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 16);
  for (char c : json) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string render_report(std::string_view data_json, std::string_view title) {
  const std::string_view tmpl =
      asset(precprobe_embed_report_html, precprobe_embed_report_html_size);
  const std::string safe_title = html_escape(title);
  const std::string safe_json = script_safe_json(data_json);
  std::string out;
  out.reserve(tmpl.size() + safe_json.size() + precprobe_embed_uPlot_iife_min_js_size +
              precprobe_embed_report_js_size + precprobe_embed_report_heatmap_js_size + 8192);
  // One pass over the template: inserted text is never scanned for markers again.
  size_t pos = 0;
  while (pos < tmpl.size()) {
    const size_t open = tmpl.find("{{", pos);
    const size_t close = open == std::string_view::npos ? open : tmpl.find("}}", open);
    if (close == std::string_view::npos) {
      out.append(tmpl.substr(pos));
      break;
    }
    out.append(tmpl.substr(pos, open - pos));
    const std::string_view key = tmpl.substr(open + 2, close - open - 2);
    if (key == "TITLE") {
      out += safe_title;
    } else if (key == "DATA") {
      out += safe_json;
    } else if (key == "UPLOT_JS") {
      out += asset(precprobe_embed_uPlot_iife_min_js, precprobe_embed_uPlot_iife_min_js_size);
    } else if (key == "UPLOT_CSS") {
      out += asset(precprobe_embed_uPlot_min_css, precprobe_embed_uPlot_min_css_size);
    } else if (key == "REPORT_HEATMAP_JS") {
      out += asset(precprobe_embed_report_heatmap_js, precprobe_embed_report_heatmap_js_size);
    } else if (key == "REPORT_JS") {
      out += asset(precprobe_embed_report_js, precprobe_embed_report_js_size);
    } else if (key == "REPORT_CSS") {
      out += asset(precprobe_embed_report_css, precprobe_embed_report_css_size);
    } else {
      out.append(tmpl.substr(open, close + 2 - open));  // not a marker: keep as written
    }
    pos = close + 2;
  }
  return out;
}

void write_report(const ReportOptions& options, const std::string& path) {
  const std::string title =
      options.title.empty() ? "precprobe report: " + options.dump : options.title;
  const std::string html = render_report(build_report_data(options), title);
  try {
    detail::write_whole_file(path, html, path + ".tmp", /*durable=*/false);
  } catch (const Error& e) {
    throw Error(std::string("report: ") + e.what());
  }
}

}  // namespace precprobe
