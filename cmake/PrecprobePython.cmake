# Finds what precprobe's Python module needs: an interpreter whose `torch` package has the
# same LibTorch major.minor as the one found by find_package(Torch), pybind11 (Debian's
# pybind11-dev) and torch's libtorch_python. Sets PRECPROBE_PYTHON_FOUND, and when it is false
# PRECPROBE_PYTHON_WHY (what was missing).
#   PRECPROBE_PYTHON_EXECUTABLE  the interpreter (default: the first of /usr/bin/python3 and
#                                python3 on PATH that imports torch)
set(PRECPROBE_PYTHON_FOUND OFF)
set(PRECPROBE_PYTHON_WHY "")

function(_precprobe_torch_version exe out)
  execute_process(COMMAND "${exe}" -c "import torch; print(torch.__version__)"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE v ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(rc EQUAL 0)
    set(${out} "${v}" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

set(_pp_candidates "")
if(PRECPROBE_PYTHON_EXECUTABLE)
  list(APPEND _pp_candidates "${PRECPROBE_PYTHON_EXECUTABLE}")
else()
  if(EXISTS /usr/bin/python3)
    list(APPEND _pp_candidates /usr/bin/python3)
  endif()
  find_program(_pp_path_python python3)
  if(_pp_path_python)
    list(APPEND _pp_candidates "${_pp_path_python}")
  endif()
endif()
set(_pp_exe "")
foreach(c ${_pp_candidates})
  _precprobe_torch_version("${c}" _pp_torch)
  if(_pp_torch)
    set(_pp_exe "${c}")
    break()
  endif()
endforeach()

string(REGEX MATCH "^[0-9]+\\.[0-9]+" _pp_libtorch_mm "${Torch_VERSION}")
if(NOT _pp_exe)
  string(REPLACE ";" ", " _pp_tried "${_pp_candidates}")
  set(PRECPROBE_PYTHON_WHY
      "no Python interpreter that imports torch (tried: ${_pp_tried}); Debian: apt-get install python3-torch")
else()
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _pp_torch_mm "${_pp_torch}")
  if(_pp_libtorch_mm AND NOT _pp_torch_mm STREQUAL _pp_libtorch_mm)
    set(PRECPROBE_PYTHON_WHY "${_pp_exe}'s torch is ${_pp_torch}, LibTorch is ${Torch_VERSION}")
  endif()
endif()
if(NOT PRECPROBE_PYTHON_WHY)
  set(PYTHON_EXECUTABLE "${_pp_exe}" CACHE FILEPATH "The interpreter of the Python module" FORCE)
  # CMake 3.27 on warns about pybind11's own FindPythonLibsNew (CMP0148): pybind11 then finds
  # the interpreter with CMake's FindPython, given the same one.
  if(NOT CMAKE_VERSION VERSION_LESS 3.27)
    set(PYBIND11_FINDPYTHON ON)
    set(Python_EXECUTABLE "${_pp_exe}")
    # A CUDA LibTorch's config (Caffe2's cuda.cmake, hashing libnvrtc) runs
    # find_package(Python COMPONENTS Interpreter) in this scope: pybind11 then skips its own
    # find, and pybind11_add_module fails on an unknown python_add_library. Find the part
    # a module needs here.
    find_package(Python COMPONENTS Interpreter Development.Module QUIET)
    if(NOT Python_Development.Module_FOUND)
      set(PRECPROBE_PYTHON_WHY
          "no Python headers for ${_pp_exe} (Debian: apt-get install python3-dev)")
    endif()
  endif()
  if(NOT PRECPROBE_PYTHON_WHY)
    find_package(pybind11 CONFIG QUIET)
    if(NOT pybind11_FOUND)
      set(PRECPROBE_PYTHON_WHY "no pybind11 (Debian: apt-get install pybind11-dev python3-dev)")
    endif()
  endif()
endif()
if(NOT PRECPROBE_PYTHON_WHY)
  find_library(PRECPROBE_TORCH_PYTHON_LIBRARY torch_python HINTS "${TORCH_INSTALL_PREFIX}/lib")
  if(NOT PRECPROBE_TORCH_PYTHON_LIBRARY)
    set(PRECPROBE_PYTHON_WHY "no libtorch_python beside ${TORCH_INSTALL_PREFIX}")
  endif()
endif()
if(NOT PRECPROBE_PYTHON_WHY)
  set(PRECPROBE_PYTHON_FOUND ON)
  set(PRECPROBE_PYTHON_EXECUTABLE "${_pp_exe}" CACHE FILEPATH
      "The Python interpreter of precprobe's Python module and its tests" FORCE)
endif()
