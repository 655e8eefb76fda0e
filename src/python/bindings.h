// The parts of the precprobe._precprobe extension module, each bound by its own file and
// called once from PYBIND11_MODULE (python_module.cpp) with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

namespace precprobe {
namespace python {

/// _Debugger, _ModelSpec (bind_debugger.cpp).
void bind_debugger(pybind11::module_& m);
/// save_state, load_state, read_state, seed_all, Scope, the quiet tensor helpers
/// (bind_tools.cpp).
void bind_tools(pybind11::module_& m);
/// compare: the CLI's compare verdict as JSON text (bind_compare.cpp).
void bind_compare(pybind11::module_& m);

}  // namespace python
}  // namespace precprobe
