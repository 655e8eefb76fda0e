# The Python module's tests: pytest (Debian's python3-pytest) on the built package, as one
# ctest entry, with the C++ twin of their small model (state_tool.cpp) and the CLI beside it.
if(TARGET precprobe_python AND TARGET precprobe_cli)
  add_executable(precprobe_pytest_tool ${CMAKE_CURRENT_LIST_DIR}/state_tool.cpp)
  target_link_libraries(precprobe_pytest_tool PRIVATE precprobe::precprobe)
  precprobe_target(precprobe_pytest_tool)
  precprobe_reuse_torch_pch(precprobe_pytest_tool)
  add_test(NAME python:pytest
           COMMAND ${PRECPROBE_PYTHON_EXECUTABLE} -m pytest -q -p no:cacheprovider
                   ${CMAKE_CURRENT_LIST_DIR}
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(python:pytest PROPERTIES TIMEOUT 900 ENVIRONMENT
    "PYTHONPATH=${PROJECT_BINARY_DIR}/python;PRECPROBE_CLI=$<TARGET_FILE:precprobe_cli>;PRECPROBE_TEST_TOOL=$<TARGET_FILE:precprobe_pytest_tool>;PRECPROBE_SOURCE_DIR=${PROJECT_SOURCE_DIR};OMP_NUM_THREADS=1")
  add_dependencies(precprobe_pytest_tool precprobe_python precprobe_cli)
  # Under AddressSanitizer the module needs the ASan runtime loaded before anything else in
  # an interpreter that is not instrumented; Python's own allocations are not ours to check.
  if(PRECPROBE_SANITIZE MATCHES "address")
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libasan.so
                    OUTPUT_VARIABLE _pp_asan OUTPUT_STRIP_TRAILING_WHITESPACE)
    set_property(TEST python:pytest APPEND PROPERTY ENVIRONMENT
                 "LD_PRELOAD=${_pp_asan}" "ASAN_OPTIONS=detect_leaks=0")
  endif()
  # PyTorch's OpInfo database through the debugger, every sample (tests/python/opinfo_sweep.py;
  # the bounded sweep runs inside python:pytest). Hours on a small machine: labelled slow, so
  # that `ctest -LE slow` (scripts/test.sh, scripts/libtorch2-suite.sh) leaves it out, and not
  # named python:* (libtorch2-suite.sh selects ^python:). Run it with `ctest -L sweep`.
  add_test(NAME opinfo.full
           COMMAND ${PRECPROBE_PYTHON_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/opinfo_sweep.py --full
                   --expect-known --json ${PROJECT_BINARY_DIR}/opinfo_full.json
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(opinfo.full PROPERTIES TIMEOUT 28800 LABELS "sweep;slow" ENVIRONMENT
    "PYTHONPATH=${PROJECT_BINARY_DIR}/python;OMP_NUM_THREADS=1")
  if(PRECPROBE_SANITIZE MATCHES "address")
    set_property(TEST opinfo.full APPEND PROPERTY ENVIRONMENT
                 "LD_PRELOAD=${_pp_asan}" "ASAN_OPTIONS=detect_leaks=0")
  endif()
  if(TARGET train_fashion_mnist)  # the example twin's test (test_example_twin.py)
    set_property(TEST python:pytest APPEND PROPERTY ENVIRONMENT
                 "PRECPROBE_EXAMPLE=$<TARGET_FILE:train_fashion_mnist>")
    add_dependencies(precprobe_pytest_tool train_fashion_mnist)
  endif()
endif()
