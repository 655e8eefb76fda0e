# Transformers written the way people write them (tests/transformers/README.md): the LibTorch
# programs tfm_gpt and tfm_encoder, built into bin/ beside the examples, and the pytest that
# runs them and the PyTorch programs of python/ under the debugger and holds every command's
# answer to issue 66 (masks are not overflows; the fully masked row is named where it is born;
# each op in the module whose forward ran it). Also in scripts/libtorch2-suite.sh's selection.
include_guard(GLOBAL)
if(PRECPROBE_WITH_TORCH AND TARGET precprobe::precprobe)
  foreach(name tfm_gpt tfm_encoder)
    add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/cpp/${name}.cpp)
    target_link_libraries(${name} PRIVATE precprobe::precprobe)
    set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
    precprobe_target(${name})
    precprobe_reuse_torch_pch(${name})
  endforeach()
endif()

# The pytest (test_transformers.py), one ctest entry per side so that `ctest -j2` runs them side
# by side: transformers.cpp runs the LibTorch programs (any python3 with pytest and zstandard),
# transformers.python the PyTorch programs on the built module.
if(TARGET precprobe_cli AND TARGET tfm_gpt)
  if(PRECPROBE_PYTHON_EXECUTABLE)
    set(_tfm_python "${PRECPROBE_PYTHON_EXECUTABLE}")
  else()
    find_program(_tfm_python python3)
  endif()
  if(_tfm_python)
    set(_tfm_env "PRECPROBE_CLI=$<TARGET_FILE:precprobe_cli>"
                 "PRECPROBE_TFM_BIN=${PROJECT_BINARY_DIR}/bin" "OMP_NUM_THREADS=1")
    add_test(NAME transformers.cpp
             COMMAND ${_tfm_python} -m pytest -q -p no:cacheprovider
                     ${CMAKE_CURRENT_LIST_DIR}/test_transformers.py
             WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
    set_tests_properties(transformers.cpp PROPERTIES TIMEOUT 900
                         ENVIRONMENT "${_tfm_env};TFM_SIDE=cpp")
    if(TARGET precprobe_python)
      add_test(NAME transformers.python
               COMMAND ${_tfm_python} -m pytest -q -p no:cacheprovider
                       ${CMAKE_CURRENT_LIST_DIR}/test_transformers.py
               WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
      set_tests_properties(transformers.python PROPERTIES TIMEOUT 900 ENVIRONMENT
        "${_tfm_env};TFM_SIDE=python;PYTHONPATH=${PROJECT_BINARY_DIR}/python;PRECPROBE_TFM_PYTHON=${_tfm_python}")
      if(PRECPROBE_SANITIZE MATCHES "address")
        execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libasan.so
                        OUTPUT_VARIABLE _tfm_asan OUTPUT_STRIP_TRAILING_WHITESPACE)
        set_property(TEST transformers.python APPEND PROPERTY ENVIRONMENT
                     "LD_PRELOAD=${_tfm_asan}" "ASAN_OPTIONS=detect_leaks=0")
      endif()
    endif()
  endif()
endif()
