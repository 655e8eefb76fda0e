// export_table: flat tables for spreadsheets and pandas. One column set per stream, the
// same in CSV and JSON Lines; NaN/Inf are empty cells in CSV and null in JSON.
#include <fmt/compile.h>
#include <fmt/format.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <ostream>

#include "json_util.h"
#include "source.h"

namespace precprobe {
namespace {

using analysis_detail::RecordSource;
// A row is a list of (column, cell); cells are formatted straight to text (a JSON
// document per row would cost several times the decoding itself on large dumps).
struct Cell {
  enum Kind : uint8_t { kNull, kInt, kDouble, kFloat32, kBool, kString, kShape } kind = kNull;
  int64_t i = 0;
  double d = 0;
  std::string s;
  const std::vector<int64_t>* shape = nullptr;
};

Cell cell(int64_t v) { return Cell{Cell::kInt, v, 0, {}, nullptr}; }
Cell cell(int v) { return cell(int64_t{v}); }
Cell cell(uint32_t v) { return cell(int64_t{v}); }
Cell cell(double v) { return std::isfinite(v) ? Cell{Cell::kDouble, 0, v, {}, nullptr} : Cell{}; }
// mean and norm: the shortest text of their float32 rounding, as the dump has them
// (docs/dump-format.md), so the table holds the same numbers as a reader of the dump's text.
Cell cell_float32(double v) {
  if (!std::isfinite(v)) return Cell{};
  return std::isfinite(static_cast<float>(v)) ? Cell{Cell::kFloat32, 0, v, {}, nullptr} : cell(v);
}
Cell cell(bool v) { return Cell{Cell::kBool, v ? 1 : 0, 0, {}, nullptr}; }
Cell cell(std::string v) { return Cell{Cell::kString, 0, 0, std::move(v), nullptr}; }
Cell cell(const char* v) { return cell(std::string(v)); }
Cell cell(const std::vector<int64_t>& v) { return Cell{Cell::kShape, 0, 0, {}, &v}; }

using Row = std::vector<std::pair<const char*, Cell>>;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ";") + x;
  return s;
}

std::string hex(uint64_t h) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += fmt::format("\\u{:04x}", u);
    } else {
      out += c;
    }
  }
  out += '"';
}

// Numbers and shapes as JSON text; fmt's "{}" is the shortest text that round-trips.
// Formatted in place: a temporary string per cell cost a third of the export's time.
void value_text(std::string& out, const Cell& c) {
  auto to = std::back_inserter(out);
  switch (c.kind) {
    case Cell::kNull:
      out += "null";
      break;
    case Cell::kInt: {
      const fmt::format_int text(c.i);
      out.append(text.data(), text.size());
      break;
    }
    case Cell::kDouble:
      fmt::format_to(to, FMT_COMPILE("{}"), c.d);
      break;
    case Cell::kFloat32:
      fmt::format_to(to, FMT_COMPILE("{}"), static_cast<float>(c.d));
      break;
    case Cell::kBool:
      out += c.i ? "true" : "false";
      break;
    case Cell::kString:
      json_string(out, c.s);
      break;
    case Cell::kShape:
      out += '[';
      for (size_t i = 0; i < c.shape->size(); ++i) {
        if (i > 0) out += ',';
        const fmt::format_int text((*c.shape)[i]);
        out.append(text.data(), text.size());
      }
      out += ']';
      break;
  }
}

// RFC 4180: quote a field holding a comma, quote or line break; double inner quotes.
void csv_field(std::string& out, const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) {
    out += s;
    return;
  }
  out += '"';
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  out += '"';
}

class TableWriter {
 public:
  TableWriter(ExportFormat format, std::ostream& out) : format_(format), out_(out) {}
  void write(const Row& row) {
    line_.clear();
    if (format_ == ExportFormat::kJsonl) {
      line_ += '{';
      for (size_t k = 0; k < row.size(); ++k) {
        line_ += k ? ",\"" : "\"";  // column names are plain identifiers
        line_ += row[k].first;
        line_ += "\":";
        value_text(line_, row[k].second);
      }
      line_ += "}\n";
    } else {
      if (rows_ == 0) {
        for (size_t k = 0; k < row.size(); ++k) {
          if (k) line_ += ',';
          csv_field(line_, row[k].first);
        }
        line_ += '\n';
      }
      for (size_t k = 0; k < row.size(); ++k) {
        if (k) line_ += ',';
        const Cell& c = row[k].second;
        if (c.kind == Cell::kString) {
          csv_field(line_, c.s);
        } else if (c.kind == Cell::kShape && c.shape->size() > 1) {
          line_ += '"';  // "[2,3]": the commas need quotes
          value_text(line_, c);
          line_ += '"';
        } else if (c.kind != Cell::kNull) {
          value_text(line_, c);  // numbers, booleans, shapes of one dimension: no quotes
        }
      }
      line_ += '\n';
    }
    out_.write(line_.data(), static_cast<std::streamsize>(line_.size()));
    ++rows_;
  }
  uint64_t rows() const { return rows_; }

 private:
  ExportFormat format_;
  std::ostream& out_;
  std::string line_;
  uint64_t rows_ = 0;
};

Row op_row(const OpRecord& r, const std::string& name, const char* io, int index, const Arg* arg) {
  Row row{{"step", cell(r.step)},   {"rank", cell(r.rank)},
          {"seq", cell(r.seq)},     {"name", cell(name)},
          {"op", cell(r.op)},       {"overload", cell(r.overload)},
          {"call", cell(r.call)},   {"dir", cell(std::string(to_string(r.dir)))},
          {"depth", cell(r.depth)}, {"thread", cell(r.thread)},
          {"scope", cell(r.scope)}, {"node", cell(r.node)},
          {"io", cell(io)},         {"index", cell(index)}};
  const TensorStats* t = arg && arg->tensor ? &*arg->tensor : nullptr;
  row.emplace_back("li", cell(t ? t->list_index : int64_t{-1}));
  row.emplace_back("dtype", cell(t ? t->dtype : std::string()));
  row.emplace_back("shape", t ? cell(t->shape) : Cell{});
  const auto count = [&](int64_t TensorStats::*f) { return t ? cell(t->*f) : Cell{}; };
  const auto stat = [&](double TensorStats::*f) { return t ? cell(t->*f) : Cell{}; };
  row.emplace_back("numel", count(&TensorStats::numel));
  row.emplace_back("nan", count(&TensorStats::nan));
  row.emplace_back("pinf", count(&TensorStats::pinf));
  row.emplace_back("ninf", count(&TensorStats::ninf));
  row.emplace_back("zero", count(&TensorStats::zero));
  row.emplace_back("neg", count(&TensorStats::neg));
  row.emplace_back("pos", count(&TensorStats::pos));
  row.emplace_back("min", stat(&TensorStats::min));
  row.emplace_back("max", stat(&TensorStats::max));
  row.emplace_back("mean", t ? cell_float32(t->mean) : Cell{});
  row.emplace_back("norm", t ? cell_float32(t->norm) : Cell{});
  row.emplace_back("hash", t && t->hash ? cell(hex(*t->hash)) : Cell{});
  row.emplace_back("param", cell(t ? t->param : std::string()));
  row.emplace_back("rg", cell(t ? t->requires_grad : false));
  row.emplace_back("value", cell(arg && !t ? arg->value : std::string()));
  row.emplace_back("grad", r.grad ? cell(*r.grad) : Cell{});  // the op's grad mode; empty: unknown
  row.emplace_back("sn", r.seqnr >= 0 ? cell(r.seqnr) : Cell{});  // links a forward op and its node
  row.emplace_back("bg", cell(r.background));
  row.emplace_back("opt", cell(r.optimizer));
  row.emplace_back("mod", cell(r.module));  // placed by the probe (overflow_check records)
  return row;
}

void export_ops(RecordSource& src, TableWriter& w) {
  src.ops([&](const OpRecord& r) {
    const std::string name = r.name();
    if (r.inputs.empty() && r.outputs.empty()) w.write(op_row(r, name, "", -1, nullptr));
    for (size_t i = 0; i < r.inputs.size(); ++i)
      w.write(op_row(r, name, "input", static_cast<int>(i), &r.inputs[i]));
    for (size_t i = 0; i < r.outputs.size(); ++i)
      w.write(op_row(r, name, "output", static_cast<int>(i), &r.outputs[i]));
    return true;
  });
}

void export_scaler(RecordSource& src, TableWriter& w) {
  src.scaler([&](const ScalerRecord& r) {
    w.write(Row{{"step", cell(r.step)},
                {"rank", cell(r.rank)},
                {"optimizer", cell(r.optimizer)},
                {"group", cell(r.group)},
                {"found_inf", cell(r.found_inf)},
                {"skipped", cell(r.skipped)},
                {"scale", cell(r.scale_before)},
                {"scale_next", cell(r.scale_after)},
                {"tracker", cell(r.growth_tracker)},
                {"event", cell(r.event)},
                {"nonfinite_params", cell(r.nonfinite_params)},
                {"bad_params", cell(join(r.bad_params))},
                {"grad_norm_scaled", cell(r.grad_norm_scaled)},
                {"grad_norm", cell(r.grad_norm)}});
    return true;
  });
}

void export_grads(RecordSource& src, TableWriter& w) {
  src.grads([&](const GradRecord& r) {
    w.write(Row{{"step", cell(r.step)},
                {"rank", cell(r.rank)},
                {"param", cell(r.param)},
                {"has_grad", cell(r.has_grad)},
                {"grad_norm", cell(r.grad_norm)},
                {"grad_abs_max", cell(r.grad_abs_max)},
                {"grad_abs_mean", cell(r.grad_abs_mean)},
                {"grad_nan", cell(r.grad_nan)},
                {"grad_inf", cell(r.grad_inf)},
                {"weight_norm", cell(r.weight_norm)},
                {"update_ratio", cell(r.update_ratio)},
                {"watch", cell(join(r.watch))}});
    return true;
  });
}

void export_events(RecordSource& src, TableWriter& w) {
  src.scalars([&](const ScalarRecord& r) {
    w.write(Row{{"step", cell(r.step)},
                {"rank", cell(r.rank)},
                {"name", cell(r.name)},
                {"value", cell(r.value)}});
    return true;
  });
}

uint64_t export_from(RecordSource& src, StreamKind stream, ExportFormat format, std::ostream& out) {
  TableWriter w(format, out);
  switch (stream) {
    case StreamKind::kOps:
      export_ops(src, w);
      break;
    case StreamKind::kScaler:
      export_scaler(src, w);
      break;
    case StreamKind::kGrads:
      export_grads(src, w);
      break;
    case StreamKind::kEvents:
      export_events(src, w);
      break;
  }
  return w.rows();
}

}  // namespace

uint64_t export_table(DumpReader& reader, StreamKind stream, ExportFormat format, std::ostream& out,
                      const ReadOptions& read) {
  analysis_detail::ReaderSource src(reader, read);
  return export_from(src, stream, format, out);
}

uint64_t export_table(const DumpData& data, StreamKind stream, ExportFormat format,
                      std::ostream& out) {
  analysis_detail::DataSource src(data);
  return export_from(src, stream, format, out);
}

}  // namespace precprobe
