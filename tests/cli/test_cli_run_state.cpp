// A run that did not stop, as every command says it: dumps written here with the core's
// DumpWriter (steps 0..3, step_end events for steps 0..2) that stopped, crashed (crash.json)
// or never stopped (meta.json "running"); the module of overflow's origin, and the modules
// every command names for the ops of an attention block's training step.
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "core/temp_dir.h"
#include "precprobe/dump_format.h"
#include "precprobe/op_watch.h"

using namespace precprobe::cli_test;  // NOLINT(google-build-using-namespace): test helpers
using precprobe::test::TempDir;

namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }

precprobe::TensorStats stats(double v, const std::string& param = "") {
  precprobe::TensorStats t;
  t.dtype = "Float";
  t.shape = {2};
  t.numel = 2;
  t.pos = 2;
  t.min = t.max = t.mean = t.norm = v;
  t.param = param;
  return t;
}

// Steps 0..3 of three ops each (an addmm reading mlp.fc1.weight, a relu, an addmm reading
// mlp.fc2.weight: the relu runs in mlp's forward), step_end for steps 0..2; with `nan_at` >= 0
// the relu of that step outputs a NaN from finite inputs.
void write_dump(const std::string& dir, const std::string& state, int64_t nan_at = -1) {
  precprobe::WriterOptions o;
  o.dir = dir + "/rank0";
  precprobe::DumpWriter w(o);
  precprobe::RunMeta m;
  m.format_version = precprobe::kDumpFormatVersion;
  m.rank = 0;
  m.world_size = 1;
  m.state = state;
  m.step_end_events = true;
  w.write_meta(m);
  for (int64_t s = 0; s < 4; ++s) {
    precprobe::OpRecord a;
    a.step = s;
    a.op = "aten::addmm";
    a.inputs.push_back({stats(1, "mlp.fc1.weight"), ""});
    a.outputs.push_back({stats(2), ""});
    precprobe::OpRecord r = a;
    r.seq = 1;
    r.op = "aten::relu";
    r.inputs = {{stats(2), ""}};
    precprobe::OpRecord b = a;
    b.seq = 2;
    b.call = 1;
    b.inputs = {{stats(2), ""}, {stats(1, "mlp.fc2.weight"), ""}};
    if (s == nan_at) {
      r.outputs[0].tensor->nan = 1;
      b.inputs[0].tensor->nan = 1;
      b.outputs[0].tensor->nan = 1;
    }
    w.submit(std::move(a));
    w.submit(std::move(r));
    w.submit(std::move(b));
    if (s < 3 || state == "stopped") w.end_step(s);
  }
  w.flush(true);
}

void write_crash(const std::string& dir) {
  std::ofstream(dir + "/rank0/crash.json")
      << R"({"signal":11,"signal_name":"SIGSEGV","code":1,"address":"0x0","step":3,)"
         R"("op":"aten::mul","thr":0,"tid":7,"thread_name":"train","time":1})";
}

}  // namespace

TEST_CASE("every command says a crashed run crashed, and how far it is complete",
          "[cli][run_state]") {
  TempDir tmp("cli_crashed");
  const std::string dir = (tmp.path() / "crashed").string(), ok = (tmp.path() / "ok").string();
  write_dump(dir, "running");
  write_crash(dir);
  write_dump(ok, "stopped");
  const std::string said =
      "the run crashed: SIGSEGV at step 3 in aten::mul (thread 0); complete through step 2";

  const Run summary = run("summary " + q(dir));
  CHECK(summary.status == 0);
  CHECK_THAT(summary.out, Catch::Matchers::ContainsSubstring("run           " + said));
  CHECK_THAT(summary.out,
             Catch::Matchers::ContainsSubstring(
                 "data          partial: complete through step 2 (the run did not stop)"));
  CHECK_THAT(summary.out, !Catch::Matchers::ContainsSubstring("data          complete\n"));
  const json sj = run_json("summary " + q(dir), 0);
  CHECK(sj["run"]["crashed"] == true);
  CHECK(sj["run"]["ranks"][0]["crash"]["op"] == "aten::mul");

  const Run overflow = run("overflow " + q(dir));
  CHECK(overflow.status == 1);
  CHECK_THAT(overflow.out,
             Catch::Matchers::ContainsSubstring(
                 "No NaN/Inf in any recorded op of steps 0..3 (step 3 only in part),"));
  CHECK_THAT(overflow.out, Catch::Matchers::ContainsSubstring("but " + said));
  const json oj = run_json("overflow " + q(dir), 1);
  CHECK(oj["found"] == false);
  CHECK(oj["run"]["complete_through"] == 2);
  CHECK(oj["steps"]["max"] == 3);

  const Run check = run("check " + q(dir));
  CHECK(check.status == 1);
  CHECK_THAT(check.out, Catch::Matchers::ContainsSubstring("run.stopped: " + said));

  const Run compare = run("compare " + q(ok) + " " + q(dir) + " --exact");
  CHECK(compare.status == 1);
  CHECK_THAT(compare.out, Catch::Matchers::ContainsSubstring("B: " + said));
  const json cj = run_json("compare " + q(ok) + " " + q(dir) + " --exact", 1);
  CHECK(cj["run_a"]["stopped"] == true);
  CHECK(cj["run_b"]["stopped"] == false);

  const std::string html = (tmp.path() / "r.html").string();
  CHECK(run("report " + q(dir) + " -o " + q(html)).status == 0);
  const json data = report_data(html);
  CHECK(data["runs"][0]["summary"]["run"]["text"] == said);
  CHECK(data["overflow"]["run"]["crashed"] == true);
}

TEST_CASE("a run that never stopped, and one that did", "[cli][run_state]") {
  TempDir tmp("cli_running");
  const std::string dir = (tmp.path() / "running").string(), ok = (tmp.path() / "ok").string();
  write_dump(dir, "running");
  write_dump(ok, "stopped");
  const Run summary = run("summary " + q(dir));
  CHECK_THAT(summary.out,
             Catch::Matchers::ContainsSubstring(
                 "run           the run did not stop \u2014 crashed or still running; complete "
                 "through step 2"));
  CHECK(run("overflow " + q(dir)).status == 1);
  CHECK(run("check " + q(dir)).status == 1);

  const Run clean = run("overflow " + q(ok));
  CHECK(clean.status == 0);
  CHECK_THAT(clean.out,
             Catch::Matchers::ContainsSubstring("No NaN/Inf in any recorded op of steps 0..3."));
  const Run ok_summary = run("summary " + q(ok));
  CHECK_THAT(ok_summary.out, Catch::Matchers::ContainsSubstring("data          complete"));
  CHECK_THAT(ok_summary.out, !Catch::Matchers::ContainsSubstring("run           "));
  CHECK(run("compare " + q(ok) + " " + q(ok) + " --exact").status == 0);
}

TEST_CASE("overflow names the module of the origin", "[cli][overflow]") {
  TempDir tmp("cli_module");
  const std::string dir = (tmp.path() / "nan").string();
  write_dump(dir, "stopped", 2);
  const Run overflow = run("overflow " + q(dir));
  CHECK(overflow.status == 1);
  CHECK_THAT(overflow.out, Catch::Matchers::ContainsSubstring("  module  mlp\n"));
  const json j = run_json("overflow " + q(dir), 1);
  CHECK(j["module"] == "mlp");  // between mlp.fc1 and mlp.fc2: mlp's own forward
  CHECK(j["step"] == 2);
  const json c = run_json("check " + q(dir), 1);
  bool said = false;
  for (const json& item : c["items"])
    if (item["id"] == "mp.overflow")
      said = item["evidence"].get<std::string>().find("in module mlp (rank 0, step 2") !=
             std::string::npos;
  CHECK(said);
}

namespace {

// Three steps of an attention block's training step (docs/cli.md, "Modules"), with the live op
// watchpoints: ln1, qkv, a div and a softmax in the attention's own forward, proj, the
// residual add, the head, the loss; its backward; clipping; SGD's update and the optimizer's
// arithmetic. With `nan`, step 2's div makes a NaN from finite inputs.
void write_block_dump(const std::string& dir, bool nan) {
  precprobe::WriterOptions o;
  o.dir = dir + "/rank0";
  o.watch = precprobe::OpWatchOptions{};
  precprobe::DumpWriter w(o);
  precprobe::RunMeta m;
  m.format_version = precprobe::kDumpFormatVersion;
  m.rank = 0;
  m.world_size = 1;
  m.state = "stopped";
  m.step_end_events = true;
  m.ops_grad_mode = true;
  m.config = {{"watch", precprobe::OpWatchOptions{}.to_json_value()}};
  w.write_meta(m);
  struct Spec {
    const char* op;
    const char* param;
    int64_t sn;
    precprobe::Direction dir;
    bool grad;  // forward: the grad mode; an optimizer's ops run without
  };
  const auto F = precprobe::Direction::kForward, B = precprobe::Direction::kBackward;
  const std::vector<Spec> ops = {{"aten::layer_norm", "b0.ln1.weight", 0, F, true},
                                 {"aten::linear", "b0.attn.qkv.weight", 1, F, true},
                                 {"aten::div", "", 2, F, true},
                                 {"aten::softmax", "", 3, F, true},
                                 {"aten::linear", "b0.attn.proj.weight", 4, F, true},
                                 {"aten::add", "", 5, F, true},
                                 {"aten::linear", "head.weight", 6, F, true},
                                 {"aten::mse_loss", "", 7, F, true},
                                 {"aten::mse_loss_backward", "", 7, B, true},
                                 {"aten::mm", "head.weight", 6, B, true},
                                 {"aten::_softmax_backward_data", "", 3, B, true},
                                 {"aten::clamp", "", -1, F, true},
                                 {"aten::add_", "head.weight", -1, F, false},
                                 {"aten::mul_", "", -1, F, false}};
  for (int64_t step = 0; step < 3; ++step) {
    std::map<std::string, int64_t> calls;
    for (size_t k = 0; k < ops.size(); ++k) {
      const Spec& sp = ops[k];
      precprobe::OpRecord r;
      r.step = step;
      r.seq = static_cast<int64_t>(k);
      r.op = sp.op;
      r.dir = sp.dir;
      r.seqnr = sp.sn;
      r.call = calls[std::string(sp.op) + (sp.dir == F ? "f" : "b")]++;
      if (sp.dir == F && !sp.grad) r.grad = false;
      precprobe::TensorStats p = stats(0.5, sp.param);
      precprobe::TensorStats x = stats(1.0 + static_cast<double>(k));
      x.requires_grad = sp.dir == F && sp.grad;
      r.inputs = {{sp.param[0] != 0 && sp.op[std::string(sp.op).size() - 1] == '_' ? p : x, ""}};
      if (sp.param[0] != 0 && r.inputs[0].tensor->param.empty()) r.inputs.push_back({p, ""});
      r.outputs = {{x, ""}};
      if (nan && step == 2 && std::string(sp.op) == "aten::div") {
        r.outputs[0].tensor->nan = 1;
        r.outputs[0].tensor->pos = 1;
      }
      w.submit(std::move(r));
    }
    w.end_step(step);
  }
  w.flush(true);
}

}  // namespace

TEST_CASE("every command names the module whose forward ran the op", "[cli][modules]") {
  TempDir tmp("cli_modules");
  const std::string dir = (tmp.path() / "nan").string(), ok = (tmp.path() / "ok").string();
  write_block_dump(dir, true);
  write_block_dump(ok, false);

  // summary --by module: each place once, in order of first appearance.
  const json s = run_json("summary " + q(dir) + " --by module --json", 0);
  std::vector<std::string> names;
  for (const json& mod : s["modules"]) {
    names.push_back(mod["module"].get<std::string>());
    if (mod["module"] == "b0.attn") {
      CHECK(mod["ops"] == 3 * 3);  // div, softmax, softmax's backward, per step
      CHECK(mod["nonfinite_ops"] == 1);
      CHECK(mod["first_nonfinite_step"] == 2);
    } else {
      CHECK(mod["nonfinite_ops"] == 0);
    }
  }
  // The residual add after b0.attn.proj and before head: b0's (the child of the top that holds
  // proj).
  CHECK(names == std::vector<std::string>{"b0.ln1", "b0.attn.qkv", "b0.attn", "b0.attn.proj", "b0",
                                          "head", "(top level)", "(after backward)",
                                          "(optimizer)"});

  // overflow and check: the div between qkv and proj is b0.attn's, not b0.attn.qkv's.
  const json o = run_json("overflow " + q(dir), 1);
  CHECK(o["name"] == "aten::div.0.forward");
  CHECK(o["module"] == "b0.attn");
  const json c = run_json("check " + q(dir), 1);
  bool said = false;
  for (const json& item : c["items"])
    if (item["id"] == "mp.overflow")
      said = item["evidence"].get<std::string>().find(
                 "aten::div.0.forward in module b0.attn (rank 0, step 2") != std::string::npos;
  CHECK(said);

  // watch: the hit the run wrote live (held until proj placed the div) is the one recomputed.
  const json wj = run_json("watch " + q(dir) + " --json", 1);
  REQUIRE(wj["hits"].size() == 1);
  CHECK(wj["hits"][0]["module"] == "b0.attn");
  CHECK(wj["hits"][0]["record"] == "aten::div.0.forward");
  CHECK(wj["live"] == true);
  CHECK(wj["recorded"] == 1);
  CHECK(wj["same_as_live"] == true);

  // compare --by module against the clean run: the first divergent module.
  const json cmp = run_json("compare " + q(dir) + " " + q(ok) + " --first --by module", 1);
  CHECK(cmp["name"] == "aten::div.0.forward");
  CHECK(cmp["first_module"] == "b0.attn");

  // The report carries the same.
  const std::string html = (tmp.path() / "r.html").string();
  REQUIRE(run("report " + q(dir) + " -o " + q(html)).status == 0);
  const json data = report_data(html);
  CHECK(data["op_watch"]["hits"][0]["module"] == "b0.attn");
}
