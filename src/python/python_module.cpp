// PYBIND11_MODULE(_precprobe): the extension module under the precprobe Python package
// (python/precprobe/). At import it checks that it shares one LibTorch with the `torch` package
// of this interpreter — the same LibTorch version, the same C++ ABI and pybind11 ABI (so that
// torch.Tensor crosses as at::Tensor through torch/csrc/utils/pybind.h's caster), and a single
// libtorch_cpu.so mapped in the process — and raises ImportError naming what differs.
// precprobe::Error becomes precprobe.Error (a RuntimeError); LibTorch's c10::Error a
// RuntimeError without its C++ stack trace.
//
// Threads: imported once, on any Python thread (GIL held).
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "bindings.h"
#include "precprobe/error.h"
#include "precprobe/version.h"

namespace py = pybind11;

namespace precprobe {
namespace python {
namespace {

#ifndef PYBIND11_BUILD_ABI
#define PYBIND11_BUILD_ABI ""
#endif

/// Every distinct file mapped into this process whose name holds `needle`.
std::set<std::string> mapped_files(const std::string& needle) {
  std::set<std::string> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find(needle) != std::string::npos) out.insert(path);
  }
  return out;
}

std::string major_minor(const std::string& version) {
  const size_t first = version.find('.');
  if (first == std::string::npos) return version;
  const size_t second = version.find_first_not_of("0123456789", first + 1);
  return version.substr(0, second);
}

/// Raises ImportError when this module and the torch package would not share one LibTorch.
/// pybind11's ABI keys are compared where torch exports them (up to 2.8); pybind11 3 (torch
/// 2.9 on) exports none, and a torch.Tensor crosses through torch's own caster
/// (THPVariable), which needs no pybind11 internals shared: the LibTorch version, the C++
/// ABI and one libtorch_cpu.so in the process are what must match there.
py::dict check_torch(const py::object& torch) {
  py::dict abi;
  const std::string ours = TORCH_VERSION;
  const std::string theirs = py::str(torch.attr("__version__"));
  abi["libtorch_headers"] = ours;
  abi["torch_package"] = theirs;
  std::string problems;
  if (major_minor(ours) != major_minor(theirs))
    problems += "; built against LibTorch " + ours + ", but torch " + theirs + " is imported";
  py::object c = torch.attr("_C");
  const bool cxx11 = c.attr("_GLIBCXX_USE_CXX11_ABI").cast<bool>();
  abi["cxx11_abi"] = bool(_GLIBCXX_USE_CXX11_ABI);
  if (cxx11 != bool(_GLIBCXX_USE_CXX11_ABI))
    problems += std::string("; torch uses _GLIBCXX_USE_CXX11_ABI=") + (cxx11 ? "1" : "0") +
                ", precprobe was built with " + (_GLIBCXX_USE_CXX11_ABI ? "1" : "0");
  const std::pair<const char*, const char*> keys[] = {
      {"_PYBIND11_COMPILER_TYPE", PYBIND11_COMPILER_TYPE},
      {"_PYBIND11_STDLIB", PYBIND11_STDLIB},
      {"_PYBIND11_BUILD_ABI", PYBIND11_BUILD_ABI}};
  for (const auto& [attr, mine] : keys) {
    if (!py::hasattr(c, attr)) continue;
    const std::string t = py::str(c.attr(attr));
    abi[attr + 1] = mine;
    if (t != mine)
      problems +=
          std::string("; pybind11 ") + (attr + 10) + " differs: torch " + t + ", precprobe " + mine;
  }
  const std::set<std::string> libs = mapped_files("libtorch_cpu.so");
  py::list paths;
  for (const auto& p : libs) paths.append(p);
  abi["libtorch_cpu"] = paths;
  if (libs.size() > 1) {
    std::string all;
    for (const auto& p : libs) all += (all.empty() ? "" : ", ") + p;
    problems += "; two LibTorch libraries are loaded (" + all + ")";
  }
  if (!problems.empty()) {
    throw py::import_error(
        "precprobe cannot share LibTorch with this torch package" + problems +
        ". Build precprobe against the LibTorch of the torch you import (Debian: libtorch-dev and "
        "python3-torch of the same version; a wheel: LIBTORCH=$(python3 -c 'import torch; "
        "print(torch.utils.cmake_prefix_path)') scripts/build.sh)");
  }
  return abi;
}

}  // namespace
}  // namespace python
}  // namespace precprobe

PYBIND11_MODULE(_precprobe, m) {
  namespace pp = precprobe::python;
  m.doc() = "precprobe's LibTorch core for Python (use the precprobe package, not this module)";
  py::module_ torch = py::module_::import("torch");
  m.attr("_abi") = pp::check_torch(torch);
  // The same check on any object shaped like the torch module (tests/python/test_import.py).
  m.def("_check_torch", &pp::check_torch, py::arg("torch"));
  m.attr("__version__") = PRECPROBE_VERSION_STRING;

  static py::exception<precprobe::Error> error(m, "Error", PyExc_RuntimeError);
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const precprobe::Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    }
  });
  pp::bind_tools(m);
  pp::bind_compare(m);
  pp::bind_debugger(m);
}
