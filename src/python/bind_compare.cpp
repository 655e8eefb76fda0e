// precprobe.compare: the verdict of `precprobe compare A B --json` from Python, computed by the
// same core function the CLI calls (compare_dumps) with the same options, so that the two
// agree on which op is first and on what is divergent (tests/ports checks it on every pair).
//
// Threads: any Python thread; the GIL is released while the dumps are read.
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "bindings.h"
#include "precprobe/analysis.h"
#include "precprobe/reader.h"

namespace py = pybind11;

namespace precprobe {
namespace python {

void bind_compare(py::module_& m) {
  m.def(
      "_compare",
      [](const std::string& a, const std::string& b, bool first, bool exact, bool by_module,
         std::optional<int64_t> step, std::optional<int> rank, double rtol, double noise_factor) {
        std::string text;
        {
          py::gil_scoped_release no_gil;
          DumpReader ra(a), rb(b);
          CompareOptions opt;
          opt.first = first;
          opt.exact = exact;
          opt.by_module = by_module;
          opt.step = step;
          opt.rank = rank;
          opt.rtol = rtol;
          opt.noise_factor = noise_factor;
          // As the CLI's --json: every op kept, unless --first or --exact asks for the
          // divergent ones only.
          opt.keep_ops = first || exact ? KeepOps::kDivergent : KeepOps::kAll;
          const CompareResult r = compare_dumps(ra, rb, opt);
          nlohmann::json j = r.to_json();
          j["run_a"] = run_state(ra).to_json();
          j["run_b"] = run_state(rb).to_json();
          text = j.dump();
        }
        return text;
      },
      py::arg("a"), py::arg("b"), py::arg("first"), py::arg("exact"), py::arg("by_module"),
      py::arg("step"), py::arg("rank"), py::arg("rtol"), py::arg("noise_factor"));
  // The op records of a dump, binary or JSON Lines, as the JSON lines of docs/dump-format.md.
  m.def(
      "_read_ops",
      [](const std::string& dump, std::optional<int> rank) {
        std::string text;
        {
          py::gil_scoped_release no_gil;
          DumpReader reader(dump);
          RecordFilter filter;
          if (rank) filter.ranks = {*rank};
          reader.for_each_op(filter, [&](const OpRecord& r) {
            append_json(r, text);
            return true;
          });
        }
        return py::bytes(text);
      },
      py::arg("dump"), py::arg("rank"));
}

}  // namespace python
}  // namespace precprobe
