// export_table: flat tables for spreadsheets and pandas. One column set per stream, the
// same in CSV and JSON Lines; NaN/Inf are empty cells in CSV and null in JSON.
#include <cinttypes>
#include <cstdio>
#include <ostream>

#include "json_util.h"
#include "source.h"

namespace precprobe {
namespace {

using analysis_detail::number;
using analysis_detail::RecordSource;
using Row = nlohmann::ordered_json;

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

// RFC 4180: quote a field holding a comma, quote or line break; double inner quotes.
std::string csv_field(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "";
  std::string s = v.is_string() ? v.get<std::string>() : analysis_detail::dump(v);
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

class TableWriter {
 public:
  TableWriter(ExportFormat format, std::ostream& out) : format_(format), out_(out) {}
  void write(const Row& row) {
    if (format_ == ExportFormat::kJsonl) {
      out_ << analysis_detail::dump(row) << '\n';
    } else {
      if (rows_ == 0) write_csv_line(row, /*header=*/true);
      write_csv_line(row, /*header=*/false);
    }
    ++rows_;
  }
  uint64_t rows() const { return rows_; }

 private:
  void write_csv_line(const Row& row, bool header) {
    bool first = true;
    for (auto it = row.begin(); it != row.end(); ++it) {
      out_ << (first ? "" : ",") << (header ? csv_field(it.key()) : csv_field(it.value()));
      first = false;
    }
    out_ << '\n';
  }
  ExportFormat format_;
  std::ostream& out_;
  uint64_t rows_ = 0;
};

Row op_row(const OpRecord& r, const char* io, int index, const Arg* arg) {
  Row row{{"step", r.step},
          {"rank", r.rank},
          {"seq", r.seq},
          {"name", r.name()},
          {"op", r.op},
          {"overload", r.overload},
          {"dir", std::string(to_string(r.dir))},
          {"depth", r.depth},
          {"thread", r.thread},
          {"scope", r.scope},
          {"node", r.node},
          {"io", io},
          {"index", index}};
  const TensorStats* t = arg && arg->tensor ? &*arg->tensor : nullptr;
  row["li"] = t ? t->list_index : -1;
  row["dtype"] = t ? t->dtype : "";
  row["shape"] = t ? Row(t->shape) : Row();
  for (const char* k : {"numel", "nan", "pinf", "ninf", "zero", "neg", "pos"}) row[k] = nullptr;
  for (const char* k : {"min", "max", "mean", "norm", "hash"}) row[k] = nullptr;
  if (t) {
    row["numel"] = t->numel;
    row["nan"] = t->nan;
    row["pinf"] = t->pinf;
    row["ninf"] = t->ninf;
    row["zero"] = t->zero;
    row["neg"] = t->neg;
    row["pos"] = t->pos;
    row["min"] = number(t->min);
    row["max"] = number(t->max);
    row["mean"] = number(t->mean);
    row["norm"] = number(t->norm);
    if (t->hash) row["hash"] = hex(*t->hash);
  }
  row["param"] = t ? t->param : "";
  row["rg"] = t ? t->requires_grad : false;
  row["value"] = arg && !t ? arg->value : "";
  return row;
}

void export_ops(RecordSource& src, TableWriter& w) {
  src.ops([&](const OpRecord& r) {
    if (r.inputs.empty() && r.outputs.empty()) w.write(op_row(r, "", -1, nullptr));
    for (size_t i = 0; i < r.inputs.size(); ++i)
      w.write(op_row(r, "input", static_cast<int>(i), &r.inputs[i]));
    for (size_t i = 0; i < r.outputs.size(); ++i)
      w.write(op_row(r, "output", static_cast<int>(i), &r.outputs[i]));
    return true;
  });
}

void export_scaler(RecordSource& src, TableWriter& w) {
  src.scaler([&](const ScalerRecord& r) {
    w.write(Row{{"step", r.step},
                {"rank", r.rank},
                {"optimizer", r.optimizer},
                {"group", r.group},
                {"found_inf", r.found_inf},
                {"skipped", r.skipped},
                {"scale", number(r.scale_before)},
                {"scale_next", number(r.scale_after)},
                {"tracker", r.growth_tracker},
                {"event", r.event},
                {"nonfinite_params", r.nonfinite_params},
                {"bad_params", join(r.bad_params)},
                {"grad_norm_scaled", number(r.grad_norm_scaled)},
                {"grad_norm", number(r.grad_norm)}});
    return true;
  });
}

void export_grads(RecordSource& src, TableWriter& w) {
  src.grads([&](const GradRecord& r) {
    w.write(Row{{"step", r.step},
                {"rank", r.rank},
                {"param", r.param},
                {"has_grad", r.has_grad},
                {"grad_norm", number(r.grad_norm)},
                {"grad_abs_max", number(r.grad_abs_max)},
                {"grad_abs_mean", number(r.grad_abs_mean)},
                {"grad_nan", r.grad_nan},
                {"grad_inf", r.grad_inf},
                {"weight_norm", number(r.weight_norm)},
                {"update_ratio", number(r.update_ratio)},
                {"watch", join(r.watch)}});
    return true;
  });
}

void export_events(RecordSource& src, TableWriter& w) {
  src.scalars([&](const ScalarRecord& r) {
    w.write(Row{{"step", r.step}, {"rank", r.rank}, {"name", r.name}, {"value", number(r.value)}});
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
