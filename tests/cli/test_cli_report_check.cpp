// End to end: `precprobe report` and `check` on the golden dumps of tests/data/cli/, and
// every command on format_version 1 and 2 alike (see test_cli.cpp).
#include "cli/cli_test_util.h"

using namespace precprobe::cli_test;  // NOLINT(google-build-using-namespace): test helpers

TEST_CASE("report: one HTML page carrying the analyses", "[cli][report]") {
  const std::string dir = std::string(PRECPROBE_BINARY_DIR) + "/";
  Run r = run("report " + dump("overflow") + " -o '" + dir + "test_cli_overflow.html'");
  REQUIRE(r.status == 0);
  json d = report_data(dir + "test_cli_overflow.html");
  CHECK(d["format"] == "precprobe-report");
  CHECK(d["overflow"]["name"] == "aten::addmm.1.forward");
  CHECK(d["overflow"]["step"] == 1);
  // Loss and loss scale of rank 0 (docs/report.md): its loss is NaN at step 1, when its
  // scaler skipped and backed off.
  CHECK(d["loss"]["n"] == 3);
  CHECK(d["loss"]["max"][1].is_null());
  CHECK(d["loss"]["max"][0].get<double>() == Approx(forward_step0().loss).epsilon(1e-6));
  CHECK(d["scale"]["rank"] == 0);
  CHECK(d["scale"]["backoffs"] == 1);
  CHECK(d["scale"]["growths"] == 0);
  CHECK(d["scale"]["skipped"] == json::array({0, 1, 0}));
  // Non-finite ops per step, all ranks: none at step 0, zero_grad's four aten::detach_ of
  // the NaN gradients at step 2, the rest at step 1.
  CHECK(d["nonfinite"]["ops"][0] == 0.0);
  CHECK(d["nonfinite"]["ops"][2] == 4.0);
  CHECK(d["nonfinite"]["ops"][1].get<int64_t>() + 4 ==
        summary("overflow")["nonfinite_op_records"].get<int64_t>());
  // The op watchpoints as `precprobe watch --json` gives them: the overflow at fc2's linear,
  // then in the loss (outside the model: a module of its own, "(top level)").
  CHECK(d["op_watch"]["hits_total"] == 2);
  CHECK(d["op_watch"]["hits"][0]["watch"] == "tensor_overflow");
  CHECK(d["op_watch"]["hits"][0]["record"] == "aten::linear.0.forward");
  CHECK(d["op_watch"]["hits"][0]["module"] == "fc2");
  CHECK(d["op_watch"]["hits"][1]["record"] == "aten::cross_entropy_loss.0.forward");
  CHECK(d["op_watch"]["hits"][1]["module"] == "(top level)");
  CHECK(d["op_watch"]["first_nonfinite_step"] == 1);

  Run c = run("report " + dump("diverged_1pct") + " --compare " + dump("clean") + " -o '" + dir +
              "test_cli_compare.html'");
  REQUIRE(c.status == 0);
  json dc = report_data(dir + "test_cli_compare.html");
  CHECK(dc["runs"].size() == 2);
  CHECK(dc["compare"]["first"]["name"] == "aten::mul.0.forward");
  CHECK(dc["compare"]["first"]["step"] == 1);

  Run t = run("report " + dump("truncated") + " -o '" + dir + "test_cli_truncated.html'");
  REQUIRE(t.status == 0);
  json dt = report_data(dir + "test_cli_truncated.html");
  bool truncated = false;
  for (auto& s : dt["runs"][0]["streams"]) truncated |= s["truncated"].get<bool>();
  CHECK(truncated);
}

TEST_CASE("check: the checklist on the probe's own records", "[cli][check]") {
  json c = run_json("check " + dump("clean"), 0);
  CHECK(c["problem"] == false);
  CHECK(c["path"].get<std::string>().find("clean") != std::string::npos);
  REQUIRE(c["items"].size() == 17);
  const std::map<std::string, std::string> prefix = {
      {"run", "run."}, {"data", "data."},    {"hyper-parameters", "hp."},
      {"api", "api."}, {"numerics", "num."}, {"mixed precision", "mp."}};
  for (auto& item : c["items"]) {
    const std::string id = item["id"];
    INFO(id);
    REQUIRE(prefix.count(item["group"]) == 1);
    CHECK(id.rfind(prefix.at(item["group"]), 0) == 0);
    CHECK_FALSE(item["title"].get<std::string>().empty());
    CHECK(item["figures"].is_object());
  }
  const std::map<std::string, std::string> verdicts = {
      {"run.stopped", "ok"},           {"data.missing_values", "ok"},
      {"data.class_imbalance", "ok"},  {"data.inputs_not_normalised", "ok"},
      {"data.no_shuffling", "ok"},     {"data.ignore_index", "n/a"},
      {"hp.learning_rate", "n/a"},     {"hp.loss_trend", "n/a"},
      {"api.train_eval_mode", "ok"},   {"api.frozen_weights", "ok"},
      {"api.init_weights", "ok"},      {"api.module_hash", "n/a"},
      {"api.replicas", "n/a"},         {"num.op_watch", "ok"},
      {"mp.overflow", "ok"},           {"mp.grad_scaler", "ok"},
      {"mp.clip_before_unscale", "ok"}};  // no gradient read between scale() and unscale_
  for (auto& [id, verdict] : verdicts) {
    INFO(id);
    json* item = find_item(c, id);
    REQUIRE(item != nullptr);
    CHECK((*item)["verdict"] == verdict);
  }
  // 3 batches of 4 x 4 inputs; labels 0, 1, 2, 0 each step: 6, 3, 3.
  json& missing = *find_item(c, "data.missing_values");
  CHECK(missing["figures"]["batches"] == 3.0);
  CHECK(missing["figures"]["elements"] == 48.0);
  json& imbalance = *find_item(c, "data.class_imbalance");
  CHECK(imbalance["figures"]["classes"] == 3.0);
  CHECK(imbalance["figures"]["max"] == 6.0);
  CHECK(imbalance["figures"]["min"] == 3.0);
  CHECK(imbalance["figures"]["ratio"] == 2.0);
  // Every feature column holds -1.5, -0.5, 0.5, 1.5: mean 0, std sqrt(1.25).
  json& norm = *find_item(c, "data.inputs_not_normalised");
  CHECK(norm["figures"]["mean_ch0"] == 0.0);
  CHECK(norm["figures"]["std_ch0"].get<double>() == Approx(std::sqrt(1.25)));
  // Batches of 4 are too small to judge label mixing; the label order never repeats.
  CHECK((*find_item(c, "data.no_shuffling"))["evidence"].get<std::string>().find(
            "no batch has 8 labelled targets") != std::string::npos);
  CHECK((*find_item(c, "hp.loss_trend"))["evidence"].get<std::string>().find("3 loss values") !=
        std::string::npos);

  json o = run_json("check " + dump("overflow"), 1);
  CHECK(o["problem"] == true);
  json& ov = *find_item(o, "mp.overflow");
  CHECK(ov["verdict"] == "problem");
  CHECK(ov["evidence"].get<std::string>().find("aten::addmm.1.forward") != std::string::npos);
  for (auto& item : o["items"])
    if (item["id"] != "mp.overflow") CHECK(item["verdict"] != "problem");
  // The op watchpoints' hits are the overflow itself (tensor_overflow in fc2, then in the
  // loss), not a second problem.
  json& ow = *find_item(o, "num.op_watch");
  CHECK(ow["verdict"] == "ok");
  CHECK(ow["figures"]["hits"] == 2.0);
  CHECK(
      ow["evidence"].get<std::string>().find(
          "2 tensor_overflow hit(s), the overflow itself (mp.overflow), first in fc2 at step 1") !=
      std::string::npos);

  // The module hash recorded at start, from its two 32-bit halves in the events stream.
  uint64_t hi = 0, lo = 0;
  for (auto& e : jsonl(run("export " + dump("clean") + " --format jsonl --stream events").out)) {
    if (e["name"] == "check/model/hash_hi") hi = static_cast<uint64_t>(e["value"].get<double>());
    if (e["name"] == "check/model/hash_lo") lo = static_cast<uint64_t>(e["value"].get<double>());
  }
  REQUIRE(hi != 0);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>((hi << 32) | lo));
  json match = run_json("check " + dump("clean") + " --module-hash " + hex, 0);
  CHECK((*find_item(match, "api.module_hash"))["verdict"] == "ok");
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(((hi << 32) | lo) ^ 1));
  json other = run_json("check " + dump("clean") + " --module-hash " + hex, 1);
  CHECK((*find_item(other, "api.module_hash"))["verdict"] == "problem");

  Run human = run("check " + dump("overflow"));
  CHECK(human.status == 1);
  CHECK(human.out.find("1 problem(s) found.") != std::string::npos);
}

namespace {

// The golden dump `name` (written by the probe at format_version 1) written again by the
// current DumpWriter, record for record: the same run at format_version 2.
std::string rewrite_v2(const std::string& name) {
  const std::string out = std::string(PRECPROBE_BINARY_DIR) + "/test_cli_v2/" + name;
  precprobe::DumpReader reader(kData + name);
  for (const precprobe::RankInfo& rank : reader.ranks()) {
    precprobe::WriterOptions o;
    o.dir = out + "/rank" + std::to_string(rank.rank);
    o.overwrite = true;
    precprobe::DumpWriter w(o);
    json meta = json::parse(rank.meta_json);
    REQUIRE(meta["format_version"] == 1);
    meta["format_version"] = precprobe::dump_format_version(precprobe::OpsEncoding::kJsonLines);
    w.write_meta(meta.dump());
    precprobe::RecordFilter only;
    only.ranks = {rank.rank};
    reader.for_each_op(
        only, [&](const precprobe::OpRecord& r) { return w.submit(precprobe::OpRecord(r)); });
    reader.for_each_scaler(only, [&](const precprobe::ScalerRecord& r) {
      return w.submit(precprobe::ScalerRecord(r));
    });
    reader.for_each_grad(
        only, [&](const precprobe::GradRecord& r) { return w.submit(precprobe::GradRecord(r)); });
    reader.for_each_scalar(only, [&](const precprobe::ScalarRecord& r) {
      return w.submit(precprobe::ScalarRecord(r));
    });
    w.close();
  }
  return out;
}

// Output of `args` with the v2 copy's path written as the golden dump's.
std::string normalized(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

// JSON without what differs between a dump and its rewrite by construction: the version
// number itself, the frame count of each stream (the writer cuts frames by time and count),
// the frames summary passed over by their digests (the rewrite has digests, the checked-in
// dumps none: this test also shows that reading by digests gives every command's answer)
// and the config's dump_path.
void drop_encoding_keys(json& j) {
  if (j.is_object()) {
    for (const char* k : {"format_version", "frames", "frames_passed", "dump_path"}) j.erase(k);
    for (auto& [k, v] : j.items()) drop_encoding_keys(v);
  } else if (j.is_array()) {
    for (auto& v : j) drop_encoding_keys(v);
  }
}

}  // namespace

TEST_CASE("every command reads format_version 1 and 2 alike", "[cli][format]") {
  std::map<std::string, std::string> v2;
  for (const char* name : {"clean", "overflow", "diverged_1pct", "extra_op"}) {
    v2[name] = rewrite_v2(name);
    json meta = json::parse(std::ifstream(v2[name] + "/rank0/meta.json"));
    CHECK(meta["format_version"] == 2);
  }
  // The v2 overflow dump holds NaN statistics as null, the v1 one as "nan".
  const auto text_of = [](const std::string& file) {
    precprobe::FrameReader r;
    std::string error, frame, all;
    REQUIRE(r.open(file, &error));
    while (r.next(frame)) all += frame;
    return all;
  };
  const std::string ops_v1 = text_of(kData + "overflow/rank0/ops.jsonl.zst");
  const std::string ops_v2 = text_of(v2["overflow"] + "/rank0/ops.jsonl.zst");
  CHECK(ops_v1.find("\"max\":\"nan\"") != std::string::npos);
  CHECK(ops_v2.find("\"max\":null") != std::string::npos);
  for (const char* v1_only : {"\"min\":\"nan\"", "\"mean\":\"nan\"", "\"v\":\"nan\""})
    CHECK(ops_v2.find(v1_only) == std::string::npos);
  CHECK(ops_v2.find("\"v\":null,\"v_nonfinite\":\"nan\"") != std::string::npos);
  CHECK(std::count(ops_v1.begin(), ops_v1.end(), '\n') ==
        std::count(ops_v2.begin(), ops_v2.end(), '\n'));
  for (const auto& [name, dir] : v2) {
    CAPTURE(name);
    const std::string a = dump(name), b = "'" + dir + "'";
    std::vector<std::string> commands = {"summary", "overflow", "grads", "scale", "check"};
    for (const std::string& c : commands) {
      CAPTURE(c);
      Run x = run(c + " " + a + " --json"), y = run(c + " " + b + " --json");
      CHECK(x.status == y.status);
      json jx = json::parse(x.out), jy = json::parse(normalized(y.out, dir, kData + name));
      drop_encoding_keys(jx);
      drop_encoding_keys(jy);
      CHECK(jx == jy);
      // Human output too (it names no frame counts except in summary's stream table).
      if (c != "summary") {
        Run hx = run(c + " " + a), hy = run(c + " " + b);
        CHECK(hx.out == normalized(hy.out, dir, kData + name));
      }
    }
    for (const char* stream : {"ops", "scaler", "grads", "events"}) {
      CAPTURE(stream);
      for (const char* format : {"jsonl", "csv"}) {
        const std::string args = std::string(" --format ") + format + " --stream " + stream;
        Run x = run("export " + a + args), y = run("export " + b + args);
        CHECK(x.status == 0);
        CHECK(x.out == y.out);
      }
    }
    Run cx = run("compare " + a + " " + dump("clean") + " --json");
    Run cy = run("compare " + b + " '" + v2["clean"] + "' --json");
    CHECK(cx.status == cy.status);
    json jcx = json::parse(cx.out);
    json jcy = json::parse(
        normalized(normalized(cy.out, dir, kData + name), v2["clean"], kData + "clean"));
    drop_encoding_keys(jcx);
    drop_encoding_keys(jcy);
    CHECK(jcx == jcy);
    const std::string html = std::string(PRECPROBE_BINARY_DIR) + "/test_cli_v2/" + name;
    REQUIRE(run("report " + a + " -o '" + html + ".v1.html'").status <= 1);
    REQUIRE(run("report " + b + " -o '" + html + ".v2.html'").status <= 1);
    json rx = report_data(html + ".v1.html");
    json ry = json::parse(normalized(report_data(html + ".v2.html").dump(), dir, kData + name));
    drop_encoding_keys(rx);
    drop_encoding_keys(ry);
    CHECK(rx == ry);
  }
}
