// The free functions of the extension module: the state file (precprobe/state.h), seed_all
// (precprobe/seed.h), Scope (precprobe/scope.h), and two helpers the Python side uses for
// work that must not appear in a dump as the program's ops: copies of optimizer state (the
// "on_anomaly" snapshot of a Python optimizer) and the GradScaler watch's one-pass gradient
// check (the C++ GradScaler's loop, grad_loops.h).
//
// Threads: any Python thread (GIL held on entry); Scope objects are per thread, entered and
// left on the same thread.
#include <ATen/record_function.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bindings.h"
#include "precprobe/error.h"
#include "precprobe/scope.h"
#include "precprobe/seed.h"
#include "precprobe/state.h"
#include "support/grad_loops.h"

namespace py = pybind11;

namespace precprobe {
namespace python {
namespace {

// Our own ATen calls: not recorded by the debugger, no autograd.
struct Quiet {
  at::RecordFunctionGuard no_callbacks{false};
  at::NoGradGuard no_grad;
};

/// `with precprobe.Scope("encoder"):` — a precprobe::Scope alive between __enter__ and
/// __exit__, on the thread that entered it.
class PyScope {
 public:
  explicit PyScope(std::string name) : name_(std::move(name)) {}
  PyScope& enter() {
    if (scope_) throw Error("precprobe: Scope('" + name_ + "') is already entered");
    scope_.emplace(name_);
    thread_ = std::this_thread::get_id();
    return *this;
  }
  void exit() {
    // The path is the entering thread's: popped on another thread, it would cut that
    // thread's scopes instead.
    if (scope_ && thread_ != std::this_thread::get_id())
      throw Error("precprobe: Scope('" + name_ +
                  "') must be left on the thread that entered it, not another thread");
    scope_.reset();
  }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::optional<Scope> scope_;
  std::thread::id thread_;
};

/// dst[i].copy_(src[i]) for every i, unobserved.
void quiet_copy(const std::vector<at::Tensor>& dst, const std::vector<at::Tensor>& src) {
  if (dst.size() != src.size())
    throw Error("precprobe: _quiet_copy: " + std::to_string(dst.size()) + " targets for " +
                std::to_string(src.size()) + " sources");
  Quiet quiet;
  for (size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
}

/// Clones, unobserved.
std::vector<at::Tensor> quiet_clone(const std::vector<at::Tensor>& src) {
  Quiet quiet;
  std::vector<at::Tensor> out;
  out.reserve(src.size());
  for (const at::Tensor& t : src) out.push_back(t.detach().clone());
  return out;
}

/// Per gradient: (non-finite, sum of squares of the finite values, the same after a
/// multiplication by inv_scale rounded to the gradient's dtype): what the C++ GradScaler logs,
/// from one read of each gradient; nothing is written.
std::vector<std::tuple<bool, double, double>> grad_check(const std::vector<at::Tensor>& grads,
                                                         double inv_scale) {
  Quiet quiet;
  std::vector<std::tuple<bool, double, double>> out;
  out.reserve(grads.size());
  const float inv = static_cast<float>(inv_scale);
  for (const at::Tensor& g0 : grads) {
    if (!g0.defined()) {
      out.emplace_back(false, 0.0, 0.0);
      continue;
    }
    at::Tensor g = g0.is_sparse() ? g0.coalesce()._values() : g0;
    if (g.device().is_cpu() && detail::fused_dtype_supported(g.scalar_type())) {
      detail::UnscaleAcc acc;
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, g.scalar_type(), "grad_check", [&] {
        detail::for_each_span<scalar_t>(g, [&](scalar_t* p, int64_t n, int64_t stride) {
          detail::unscale_span<scalar_t, false>(p, n, stride, inv, acc);
        });
      });
      out.emplace_back(acc.non_finite, acc.sumsq_scaled, acc.sumsq_unscaled);
      continue;
    }
    // Other devices and dtypes: ATen in float64 (one host read per gradient).
    at::Tensor x = g.to(at::kDouble);
    at::Tensor finite = x.isfinite();
    at::Tensor xf = x.where(finite, at::zeros({}, x.options()));
    at::Tensor y = (g.to(at::kFloat) * inv).to(g.scalar_type()).to(at::kDouble);
    at::Tensor yf = y.where(y.isfinite(), at::zeros({}, y.options()));
    out.emplace_back(!finite.all().item<bool>(), xf.pow(2).sum().item<double>(),
                     yf.pow(2).sum().item<double>());
  }
  return out;
}

std::map<std::string, std::string> to_metadata(const py::object& m) {
  std::map<std::string, std::string> out;
  if (m.is_none()) return out;
  for (const auto& item : py::dict(m)) out[py::str(item.first)] = py::str(item.second);
  return out;
}

}  // namespace

void bind_tools(py::module_& m) {
  m.def(
      "_save_state",
      [](const NamedTensors& tensors, const std::string& path, const py::object& metadata) {
        auto meta = to_metadata(metadata);
        py::gil_scoped_release no_gil;
        save_state(tensors, path, meta);
      },
      py::arg("tensors"), py::arg("path"), py::arg("metadata") = py::none());
  m.def(
      "_load_state",
      [](const NamedTensors& tensors, const std::string& path, bool strict) {
        LoadResult r;
        {
          py::gil_scoped_release no_gil;
          r = load_state(tensors, path, strict);
        }
        return std::make_pair(r.missing_keys, r.unexpected_keys);
      },
      py::arg("tensors"), py::arg("path"), py::arg("strict") = true);
  m.def(
      "_read_state",
      [](const std::string& path) {
        std::map<std::string, std::string> meta;
        NamedTensors t;
        {
          py::gil_scoped_release no_gil;
          t = read_state(path, &meta);
        }
        return std::make_pair(t, meta);
      },
      py::arg("path"));

  py::class_<SeedReport>(m, "SeedReport")
      .def_readonly("seed", &SeedReport::seed)
      .def_readonly("deterministic", &SeedReport::deterministic)
      .def_readonly("intra_op_threads", &SeedReport::intra_op_threads)
      .def_readonly("torch_version", &SeedReport::torch_version)
      .def_property_readonly("applied",
                             [](const SeedReport& r) {
                               std::vector<std::pair<std::string, std::string>> out;
                               for (const auto& s : r.applied) out.emplace_back(s.name, s.value);
                               return out;
                             })
      .def_property_readonly("skipped",
                             [](const SeedReport& r) {
                               std::vector<std::pair<std::string, std::string>> out;
                               for (const auto& s : r.skipped) out.emplace_back(s.name, s.reason);
                               return out;
                             })
      .def_readonly("warnings", &SeedReport::warnings)
      .def("_add_applied",
           [](SeedReport& r, const std::string& name, const std::string& value) {
             r.applied.push_back({name, value});
           })
      .def("summary", &SeedReport::summary)
      .def("to_json", &SeedReport::to_json)
      .def("__str__", &SeedReport::to_string)
      .def("__repr__",
           [](const SeedReport& r) { return "<precprobe.SeedReport " + r.summary() + ">"; });
  m.def(
      "_seed_all",
      [](uint64_t seed, bool deterministic, bool warn_only, int num_threads) {
        SeedOptions o;
        o.seed = seed;
        o.deterministic = deterministic;
        o.warn_only = warn_only;
        o.num_threads = num_threads;
        return seed_all(o);
      },
      py::arg("seed"), py::arg("deterministic"), py::arg("warn_only"), py::arg("num_threads"));

  py::class_<PyScope>(m, "Scope", R"doc(Names a region of code: op records made inside carry the
scope path ("encoder/block1"), which the "scope" config key selects by.

    with precprobe.Scope("encoder"):
        h = encoder(x)

Per thread; nest freely.)doc")
      .def(py::init<std::string>(), py::arg("name"))
      .def("__enter__", &PyScope::enter, py::return_value_policy::reference_internal)
      .def("__exit__", [](PyScope& s, const py::args&) { s.exit(); })
      .def_property_readonly("name", &PyScope::name)
      .def_static("current_path", [] { return Scope::current_path(); });

  m.def(
      "_report_error", [](const std::string& message) { report_error(message); },
      py::arg("message"));
  m.def("_error_count", [] { return error_count(); });
  m.def("_quiet_copy", &quiet_copy, py::arg("dst"), py::arg("src"));
  m.def("_quiet_clone", &quiet_clone, py::arg("src"));
  m.def("_grad_check", &grad_check, py::arg("grads"), py::arg("inv_scale"));
}

}  // namespace python
}  // namespace precprobe
