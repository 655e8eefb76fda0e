// precprobe._precprobe._Debugger: PrecisionDebugger for Python. The Python class
// precprobe.PrecisionDebugger (python/precprobe/_debugger.py) wraps it; this file owns the
// crossing of models and optimizers:
//   - a torch.nn.Module arrives as its named_modules() / named_parameters() / named_buffers()
//     lists and becomes a MirrorModule (mirror.h) holding the same tensors;
//   - a torch.optim optimizer arrives as the list of its parameters and becomes a proxy
//     torch::optim::SGD (lr 0, never stepped) over them: "on_anomaly" checks those
//     parameters' gradients and snapshots them; the Python optimizer's own state is
//     snapshot by the Python side (_optim.py), which run_step's fn restores on a replay.
// The GIL is released around every call into the debugger (the statistics worker may free a
// tensor whose Python object needs the GIL) and re-taken only to run Python code (run_step's
// fn). A recursive mutex, taken after the GIL is released, serialises the calls: the C++
// debugger is driven from one thread at a time, and fn may call back (log_scalar) on the same
// thread.
//
// Threads: any Python thread; calls are serialised (the training loop's thread is meant).
#include <torch/extension.h>
#include <torch/optim/sgd.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bindings.h"
#include "mirror.h"
#include "precprobe/debugger.h"
#include "precprobe/error.h"
#include "precprobe/op_watch.h"
#include "precprobe/records.h"

namespace py = pybind11;

namespace precprobe {
namespace python {
namespace {

/// The losses of a step, as C++ run_step() takes them: fn's tensor is "the loss"; the
/// tensors of a tuple or list it returns are several ("loss/0", "loss/1", ...; its other
/// elements, an accuracy say, are not losses); None: no loss (only gradients are checked).
std::vector<at::Tensor> losses_of(const py::object& result, bool& several) {
  several = false;
  if (result.is_none()) return {};
  if (THPVariable_Check(result.ptr())) return {THPVariable_Unpack(result.ptr())};
  if (py::isinstance<py::tuple>(result) || py::isinstance<py::list>(result)) {
    std::vector<at::Tensor> out;
    for (py::handle item : py::sequence(result)) {
      if (THPVariable_Check(item.ptr())) out.push_back(THPVariable_Unpack(item.ptr()));
    }
    if (!out.empty()) {
      several = true;
      return out;
    }
  }
  throw py::type_error(
      "precprobe: run_step(fn): fn must return the loss tensor, a tuple or list holding its "
      "losses (tensors), or None; it returned " +
      std::string(py::str(py::type::of(result).attr("__name__"))));
}

class PyDebugger {
 public:
  /// Runs f on the debugger: the GIL released first, then the debugger's lock taken.
  template <typename F>
  auto locked(F&& f) {
    py::gil_scoped_release no_gil;
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return f();
  }

  PyDebugger(const std::string& config_path, const std::string& config_json) {
    if (!config_path.empty()) {
      dbg_ = std::make_unique<PrecisionDebugger>(config_path);
    } else {
      dbg_ = std::make_unique<PrecisionDebugger>(DebuggerOptions::from_json(config_json));
    }
  }

  ~PyDebugger() {
    locked([&] { dbg_.reset(); });
  }

  /// `models` empty: no model. `named`: start({"G": g, ...}); else models[0] is the model.
  /// `optimizers`: each optimizer's parameters.
  void start(const std::vector<ModelSpec>& models, bool named,
             const std::vector<std::vector<at::Tensor>>& optimizers) {
    locked([&] { start_locked(models, named, optimizers); });
  }

  void stop() {
    locked([&] { dbg_->stop(); });
  }

  void step() {
    locked([&] { dbg_->step(); });
  }

  void mark_optimizer(bool in_step) {
    locked([&] { dbg_->mark_optimizer(in_step); });
  }

  py::object run_step(const py::function& fn) {
    py::object result;
    bool several = false;
    auto f = [&]() -> std::vector<at::Tensor> {
      py::gil_scoped_acquire gil;
      result = fn();
      return losses_of(result, several);
    };
    locked([&] { dbg_->run_step_losses(f, several); });
    return result;
  }

  void log_scalar(const std::string& name, double value) {
    locked([&] { dbg_->log_scalar(name, value); });
  }

  void observe_batch(const at::Tensor& inputs, const at::Tensor& targets, int64_t epoch,
                     int64_t ignore_index, const std::vector<std::vector<bool>>& training) {
    locked([&] {
      for (size_t i = 0; i < current_.size() && i < training.size(); ++i)
        set_training(*current_[i], specs_.at(current_[i].get()).modules, training[i]);
      dbg_->observe_batch(inputs, targets, epoch, ignore_index);
    });
  }

  /// A record of the GradScaler watch (python/precprobe/_scaler.py) into this rank's dump.
  bool submit_scaler(ScalerRecord r) {
    return locked([&] {
      DumpWriter* w = dbg_->writer();
      if (w == nullptr || !dbg_->started()) return false;
      r.rank = dbg_->rank();
      return w->submit(std::move(r));
    });
  }

  py::dict counters() {
    const DebuggerCounters c = locked([&] { return dbg_->counters(); });
    py::dict d;
    d["ops_seen"] = c.ops_seen;
    d["ops_recorded"] = c.ops_recorded;
    d["tensors_summarised"] = c.tensors_summarised;
    d["tensors_cached"] = c.tensors_cached;
    d["tensors_carried"] = c.tensors_carried;
    d["bytes_summarised"] = c.bytes_summarised;
    d["errors"] = c.errors;
    d["replays"] = c.replays;
    d["snapshot_bytes"] = c.snapshot_bytes;
    d["records_written"] = c.writer.records_written;
    d["records_dropped"] = c.writer.records_dropped;
    return d;
  }

  PrecisionDebugger& get() { return *dbg_; }

 private:
  void start_locked(const std::vector<ModelSpec>& models, bool named,
                    const std::vector<std::vector<at::Tensor>>& optimizers) {
    if (dbg_->started()) return;
    std::vector<std::shared_ptr<torch::nn::Module>> mirrors;
    for (const ModelSpec& spec : models) mirrors.push_back(mirror_for(spec));
    proxies_.clear();
    if (named) {
      for (const auto& params : optimizers) proxies_.push_back(make_proxy(params));
    } else if (!optimizers.empty()) {
      // One model and several optimizers (parameter groups split between them): one proxy
      // over all their parameters; the gradient check and the snapshot are the same.
      std::vector<at::Tensor> all;
      for (const auto& params : optimizers) all.insert(all.end(), params.begin(), params.end());
      proxies_.push_back(make_proxy(all));
    }
    if (named) {
      std::vector<NamedModel> named_models;
      for (size_t i = 0; i < models.size(); ++i)
        named_models.emplace_back(models[i].name, mirrors[i]);
      std::vector<torch::optim::Optimizer*> opts;
      for (auto& p : proxies_) opts.push_back(p.get());
      dbg_->start(std::move(named_models), std::move(opts));
    } else {
      std::shared_ptr<torch::nn::Module> model = mirrors.empty() ? nullptr : mirrors[0];
      if (proxies_.empty()) {
        dbg_->start(model);
      } else {
        dbg_->start(model, *proxies_[0]);
      }
    }
    current_ = std::move(mirrors);
  }

  std::shared_ptr<torch::nn::Module> mirror_for(const ModelSpec& spec) {
    // The same Python model again (a later start): its mirror, so the gradient monitor keeps
    // its history. Mirrors are kept while the debugger lives: the monitor knows a model by
    // its address, which a freed mirror's successor could take.
    for (const auto& m : mirrors_)
      if (m->name() == type_of(spec) && mirror_matches(*m, spec)) return remember(m, spec);
    auto m = build_mirror(spec);
    mirrors_.push_back(m);
    return remember(m, spec);
  }

  std::shared_ptr<torch::nn::Module> remember(const std::shared_ptr<torch::nn::Module>& m,
                                              const ModelSpec& spec) {
    specs_[m.get()] = spec;
    specs_[m.get()].parameters.clear();  // only the module list is needed later
    specs_[m.get()].buffers.clear();
    return m;
  }

  static std::string type_of(const ModelSpec& spec) {
    for (const auto& [path, type] : spec.modules)
      if (path.empty()) return type;
    return "Module";
  }

  static std::unique_ptr<torch::optim::SGD> make_proxy(const std::vector<at::Tensor>& params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.0));
  }

  std::recursive_mutex mu_;
  std::unique_ptr<PrecisionDebugger> dbg_;
  std::vector<std::shared_ptr<torch::nn::Module>> mirrors_;  // every mirror made
  std::map<const torch::nn::Module*, ModelSpec> specs_;
  std::vector<std::shared_ptr<torch::nn::Module>> current_;  // of the running start()
  std::vector<std::unique_ptr<torch::optim::SGD>> proxies_;
};

ScalerRecord scaler_record(const py::dict& d) {
  ScalerRecord r;
  r.step = d["step"].cast<int64_t>();
  r.optimizer = d["opt"].cast<int>();
  r.group = d["group"].cast<int>();
  r.found_inf = d["found_inf"].cast<bool>();
  r.nonfinite_params = d["n_bad"].cast<int64_t>();
  r.bad_params = d["bad"].cast<std::vector<std::string>>();
  r.grad_norm_scaled = d["gn_scaled"].cast<double>();
  r.grad_norm = d["gn"].cast<double>();
  r.scale_before = d["scale"].cast<double>();
  r.scale_after = d["scale_next"].cast<double>();
  r.growth_tracker = d["tracker"].cast<int64_t>();
  r.skipped = d["skipped"].cast<bool>();
  r.event = d["event"].cast<std::string>();
  return r;
}

}  // namespace

void bind_debugger(py::module_& m) {
  py::class_<ModelSpec>(m, "_ModelSpec")
      .def(py::init([](std::string name, ModuleList modules, NamedTensorList parameters,
                       NamedTensorList buffers) {
             return ModelSpec{std::move(name), std::move(modules), std::move(parameters),
                              std::move(buffers)};
           }),
           py::arg("name"), py::arg("modules"), py::arg("parameters"), py::arg("buffers"));

  py::class_<PyDebugger>(m, "_Debugger")
      .def(py::init<const std::string&, const std::string&>(), py::arg("config_path"),
           py::arg("config_json"))
      .def("start", &PyDebugger::start, py::arg("models"), py::arg("named"), py::arg("optimizers"))
      .def("stop", &PyDebugger::stop)
      .def("step", &PyDebugger::step)
      .def("mark_optimizer", &PyDebugger::mark_optimizer, py::arg("in_step"))
      .def("run_step", &PyDebugger::run_step, py::arg("fn"))
      .def("log_scalar", &PyDebugger::log_scalar, py::arg("name"), py::arg("value"))
      .def("observe_batch", &PyDebugger::observe_batch, py::arg("inputs"), py::arg("targets"),
           py::arg("epoch"), py::arg("ignore_index"), py::arg("training"))
      .def("submit_scaler",
           [](PyDebugger& d, const py::dict& r) { return d.submit_scaler(scaler_record(r)); })
      .def("counters", &PyDebugger::counters)
      .def("current_step",
           [](PyDebugger& d) { return d.locked([&] { return d.get().current_step(); }); })
      .def("started", [](PyDebugger& d) { return d.locked([&] { return d.get().started(); }); })
      .def("rank", [](PyDebugger& d) { return d.get().rank(); })
      .def("world_size", [](PyDebugger& d) { return d.get().world_size(); })
      .def("options_json", [](PyDebugger& d) { return d.get().options().to_json(); })
      .def("watch_hits_json",
           [](PyDebugger& d) {
             nlohmann::json j = nlohmann::json::array();
             for (const OpWatchHit& h : d.get().watch_hits()) j.push_back(watch_hit_json(h));
             return j.dump();
           })
      .def("parameter_name", [](PyDebugger& d, const at::Tensor& t) {
        return d.locked([&] { return d.get().parameter_name(t); });
      });
}

}  // namespace python
}  // namespace precprobe
