// The HTML report's torch-free parts: downsampling, the page template, and the data built
// from a dump written with the real DumpWriter (values checked against hand computation).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "precprobe/report.h"
#include "precprobe/writer.h"
#include "precprobe_catch.h"
#include "report/downsample.h"

// Min/max/max-of-bucket values are copies of inputs, so exact comparison is the check.
#pragma GCC diagnostic ignored "-Wfloat-equal"

namespace fs = std::filesystem;
using nlohmann::json;
using precprobe::report::bucket_size;
using precprobe::report::downsample;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path p = fs::path(PRECPROBE_BINARY_DIR) / "test_report" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// The data JSON embedded in a rendered page.
json embedded_data(const std::string& html) {
  const std::string open = R"(<script type="application/json" id="precprobe-data">)";
  const size_t a = html.find(open);
  REQUIRE(a != std::string::npos);
  const size_t b = html.find("</script>", a);
  REQUIRE(b != std::string::npos);
  return json::parse(html.substr(a + open.size(), b - a - open.size()));
}

}  // namespace

TEST_CASE("bucket_size covers n points with at most max buckets", "[report]") {
  CHECK(bucket_size(0, 10) == 1);
  CHECK(bucket_size(10, 10) == 1);
  CHECK(bucket_size(11, 10) == 2);
  CHECK(bucket_size(100000, 2000) == 50);
  CHECK(bucket_size(100001, 2000) == 51);
  CHECK(bucket_size(5, 0) == 5);
}

TEST_CASE("downsample keeps each bucket's min and max, so a one-point spike survives", "[report]") {
  std::vector<int64_t> step;
  std::vector<double> v;
  for (int i = 0; i < 1000; ++i) {
    step.push_back(100 + i);
    v.push_back(1.0);
  }
  v[537] = 1e6;   // spike
  v[538] = -3.0;  // dip right after it
  v[900] = std::numeric_limits<double>::quiet_NaN();
  auto b = downsample(step, v, 10);
  REQUIRE(b.size == 100);
  REQUIRE(b.step.size() == 10);
  CHECK(b.step[5] == 600);
  CHECK(*b.max[5] == 1e6);
  CHECK(*b.min[5] == -3.0);
  CHECK(*b.max[4] == 1.0);
  CHECK(*b.min[9] == 1.0);  // the NaN is left out
  // A bucket of NaN only has neither.
  auto all_nan = downsample({1, 2}, {NAN, NAN}, 1);
  CHECK_FALSE(all_nan.min[0].has_value());
  CHECK_FALSE(all_nan.max[0].has_value());
  // Fewer points than buckets: one point each, last bucket may be short.
  auto small = downsample({5, 6, 7}, {3, 1, 2}, 2);
  REQUIRE(small.step == std::vector<int64_t>{5, 7});
  CHECK(*small.min[0] == 1);
  CHECK(*small.max[0] == 3);
  CHECK(*small.max[1] == 2);
}

TEST_CASE("render_report inlines everything and keeps the data block closed", "[report]") {
  const std::string data = R"({"runs":[{"path":"</script><script>alert(1)</script> <!--"}]})";
  const std::string html = precprobe::render_report(data, "a <b> & \"c\"");
  CHECK(html.find("{{") == std::string::npos);
  CHECK(html.find("<title>a &lt;b&gt; &amp; &quot;c&quot;</title>") != std::string::npos);
  // uPlot and the page script are inline; nothing is loaded from anywhere.
  CHECK(html.find("uPlot") != std::string::npos);
  CHECK(html.find("precprobeReport") != std::string::npos);
  CHECK(html.find("src=") == std::string::npos);
  CHECK(html.find("href=\"http") == std::string::npos);
  CHECK(html.find("<link") == std::string::npos);
  // Exactly the three <script> blocks of the template: the data could not open another.
  size_t scripts = 0;
  for (size_t p = html.find("<script"); p != std::string::npos; p = html.find("<script", p + 1))
    ++scripts;
  CHECK(scripts == 3);
  CHECK(embedded_data(html) == json::parse(data));
  // The embedded assets are the files byte for byte (cmake/EmbedFiles.cmake).
  for (const char* asset :
       {"third_party/uplot/uPlot.iife.min.js", "third_party/uplot/uPlot.min.css",
        "src/core/report/assets/report.js", "src/core/report/assets/report_heatmap.js",
        "src/core/report/assets/report.css"}) {
    std::ifstream f(fs::path(PRECPROBE_SOURCE_DIR) / asset, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    INFO(asset);
    REQUIRE(ss.str().size() > 1000);
    CHECK(html.find(ss.str()) != std::string::npos);
  }
}

namespace {

// 40 steps: a scaler backing off at steps 10 and 11 and growing at 30, two parameters'
// gradient norms (an Inf at step 10), a loss spike at step 25, three aten::add ops a step
// (NaN outputs at step 10, seq 1 and 2). `bump` adds to the output max of step 5, seq 2.
void write_test_dump(const fs::path& dir, double bump) {
  {
    precprobe::WriterOptions wo;
    wo.dir = (dir / "rank0").string();
    precprobe::DumpWriter w(wo);
    w.write_meta(R"({"format_version":1,"rank":0,"world_size":1,"seed":{"seed":7}})");
    double scale = 1024;
    for (int64_t step = 0; step < 40; ++step) {
      precprobe::ScalerRecord s;
      s.step = step;
      s.scale_before = scale;
      s.skipped = step == 10 || step == 11;
      s.found_inf = s.skipped;
      if (s.skipped) {
        scale /= 2;
        s.event = "backoff";
      } else if (step == 30) {
        scale *= 2;
        s.event = "growth";
      }
      s.scale_after = scale;
      w.submit(std::move(s));
      for (int p = 0; p < 2; ++p) {
        precprobe::GradRecord g;
        g.step = step;
        g.param = p ? "b" : "w";
        g.grad_norm = 1.0 + static_cast<double>(step) + 100.0 * p;
        g.grad_inf = (step == 10 && p == 1) ? 1 : 0;
        if (step == 20 && p == 0) g.watch = {"w_norm"};
        w.submit(std::move(g));
      }
      precprobe::ScalarRecord loss;
      loss.step = step;
      loss.name = "loss";
      loss.value = step == 25 ? 99.0 : 1.0 / (1.0 + static_cast<double>(step));
      w.submit(std::move(loss));
      for (int64_t seq = 0; seq < 3; ++seq) {
        precprobe::OpRecord r;
        r.step = step;
        r.seq = seq;
        r.op = "aten::add";
        r.call = seq;
        precprobe::Arg out;
        out.tensor = precprobe::TensorStats{};
        out.tensor->dtype = "Float";
        out.tensor->numel = 4;
        out.tensor->min = -static_cast<double>(seq) - 0.5;
        out.tensor->max = static_cast<double>(step) + (step == 5 && seq == 2 ? bump : 0.0);
        out.tensor->nan = (step == 10 && seq > 0) ? 1 : 0;  // two ops of step 10
        r.outputs.push_back(out);
        w.submit(std::move(r));
      }
    }
  }
}

}  // namespace

TEST_CASE("report data from a dump: scale history, heat map, loss, non-finite ops", "[report]") {
  const fs::path dir = fresh_dir("dump");
  write_test_dump(dir, 0);
  precprobe::ReportOptions o;
  o.dump = dir.string();
  o.max_points = 16;  // 40 points -> buckets of 3
  o.heatmap_columns = 16;
  const json d = json::parse(precprobe::build_report_data(o));

  const json& s = d["scale"];
  CHECK(s["n"] == 40);
  CHECK(s["bucket"] == 3);
  REQUIRE(s["step"].size() == 14);
  CHECK(s["step"][3] == 9);
  // Bucket 3 = steps 9, 10, 11: scale 1024 before the two backoffs, then 512.
  CHECK(s["max"][3] == 1024.0);
  CHECK(s["min"][3] == 512.0);
  CHECK(s["skipped"][3] == 2);
  CHECK(s["skipped_total"] == 2);
  CHECK(s["backoffs"] == 2);
  CHECK(s["growths"] == 1);
  CHECK(s["min"][13] == 512.0);  // 256 * 2 after the growth at step 30 (steps 39: one point)

  const json& g = d["grads"];
  CHECK(g["params"] == json::array({"w", "b"}));
  CHECK(g["bucket"] == 3);
  CHECK(g["steps"][3] == 9);
  CHECK(g["norm"][0][3] == 12.0);   // max(1+9, 1+10, 1+11)
  CHECK(g["norm"][1][0] == 103.0);  // max(101, 102, 103)
  CHECK(g["bad"][1][3] == 1);
  CHECK(g["bad"][0][3] == 0);
  REQUIRE(g["watch"].size() == 1);
  CHECK(g["watch"][0]["step"] == 20);
  CHECK(g["watch"][0]["param"] == "w");

  const json& l = d["loss"];
  CHECK(l["n"] == 40);
  CHECK(l["max"][8] == 99.0);  // steps 24..26 hold the spike

  const json& nf = d["nonfinite"];
  CHECK(nf["steps"] == 40);
  CHECK(nf["steps_with"] == 1);
  CHECK(nf["ops"][3] == 2.0);  // bucket of steps 9..11
  CHECK(nf["ops"][2] == 0.0);

  const json& top = d["top_ops"]["by_abs_max"];
  CHECK(d["top_ops"]["ops_total"] == 120);
  // Largest finite |output|: step 39's outputs (max 39); NaN-holding ones still count their
  // finite part. Ties keep any order; the first row's value is exact.
  REQUIRE(top.size() == 120);
  CHECK(top[0]["abs_max"] == 39.0);
  CHECK(top[0]["step"] == 39);
  CHECK(top[119]["abs_max"] == 0.5);  // step 0, seq 0: max(|-0.5|, |0|)

  CHECK(d["runs"][0]["ranks"][0]["meta"]["seed"]["seed"] == 7);
  CHECK(d["runs"][0]["steps"]["count"] == 40);

  // The CLI's analyses, embedded as their to_json() gives them.
  const json& sum = d["runs"][0]["summary"];
  CHECK(sum["op_records"] == 120);
  CHECK(sum["nonfinite_op_records"] == 2);
  CHECK(sum["steps"]["count"] == 40);  // per-step list replaced by its length
  const json& ov = d["overflow"];
  CHECK(ov["found"] == true);
  CHECK(ov["step"] == 10);
  CHECK(ov["seq"] == 1);  // seq 1 and 2 went NaN from no non-finite input: the first is blamed
  CHECK(ov["name"] == "aten::add.1.forward");
  CHECK(d["compare"].is_null());
}

TEST_CASE("report data with --compare: first divergent op, per-op error of its step", "[report]") {
  const fs::path a = fresh_dir("cmp_a"), b = fresh_dir("cmp_b");
  write_test_dump(a, 1.0);  // step 5, seq 2: max 6 instead of 5
  write_test_dump(b, 0);
  precprobe::ReportOptions o;
  o.dump = a.string();
  o.compare = b.string();
  const json d = json::parse(precprobe::build_report_data(o));
  const json& c = d["compare"];
  REQUIRE(c.is_object());
  CHECK(c["result"]["matched"] == 120);
  CHECK(c["result"]["found"] == true);
  CHECK(c["first"]["step"] == 5);
  CHECK(c["first"]["seq"] == 2);
  CHECK(c["step"] == 5);  // the chart shows the first divergent op's step
  const json& p = c["per_op"];
  REQUIRE(p["index"].size() == 3);
  CHECK(p["first_pos"] == 2);
  // Errors relative to the tensor's magnitude: |6 - 5| / max(|-2.5|, 6, |-2.5|, 5) = 1/6.
  CHECK(p["value"][2].get<double>() == Approx(1.0 / 6));
  // Ops 0 and 1 are equal: drawn at the floor, a tenth of the smallest non-zero error.
  CHECK(p["value"][0].get<double>() == Approx(1.0 / 60));
  CHECK(p["floor"].get<double>() == Approx(1.0 / 60));
  CHECK(c["rows"].size() == 120);
  CHECK(c["rows_total"] == 120);
  CHECK_FALSE(c["rows"][0].contains("args"));
  REQUIRE(d["top_ops"]["by_error"].size() == 120);
  CHECK(d["top_ops"]["by_error"][0]["step"] == 5);
  CHECK(d["top_ops"]["by_error"][0]["seq"] == 2);
  REQUIRE(d["runs"].size() == 2);
  CHECK(d["runs"][1]["path"] == b.string());
  // --step picks another step's ops; no divergent op there.
  o.step = 7;
  const json d7 = json::parse(precprobe::build_report_data(o));
  CHECK(d7["compare"]["step"] == 7);
  CHECK(d7["compare"]["per_op"]["first_pos"].is_null());
}

TEST_CASE("write_report writes one page and names an unwritable path", "[report]") {
  const fs::path dir = fresh_dir("write");
  {
    precprobe::WriterOptions wo;
    wo.dir = (dir / "rank0").string();
    precprobe::DumpWriter w(wo);
    w.write_meta(R"({"format_version":1})");
  }
  precprobe::ReportOptions o;
  o.dump = dir.string();
  const fs::path out = dir / "r.html";
  precprobe::write_report(o, out.string());
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  CHECK(ss.str().rfind("<!DOCTYPE html>", 0) == 0);
  CHECK_FALSE(fs::exists(out.string() + ".tmp"));
  CHECK_THROWS_WITH(precprobe::write_report(o, (dir / "no/such/dir/r.html").string()),
                    Catch::Matchers::ContainsSubstring("no/such/dir/r.html"));
}
