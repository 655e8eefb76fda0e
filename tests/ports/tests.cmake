# The LibTorch side of the port pairs (tests/ports/README.md): port_cnn, port_lstm,
# port_transformer, port_vae, port_gan, port_lm, built into bin/ beside the examples. tests/CMakeLists.txt
# includes every tests/*/tests.cmake; the guard makes a second include (e.g. an explicit one
# inside if(PRECPROBE_WITH_TORCH)) harmless, and a torch-free build skips them.
include_guard(GLOBAL)
if(PRECPROBE_WITH_TORCH AND TARGET precprobe::precprobe)
  foreach(name port_cnn port_lstm port_transformer port_vae port_gan port_lm)
    add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/cpp/${name}.cpp)
    target_link_libraries(${name} PRIVATE precprobe::precprobe)
    set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
    precprobe_target(${name})
    precprobe_reuse_torch_pch(${name})
  endforeach()
endif()

# The pairs compared: tests/ports/test_ports.py, pytest on the built Python module and CLI; also
# in scripts/libtorch2-suite.sh's selection (LibTorch 2.6: Python's Adam updates exp_avg with
# lerp_, its multi-head attention projects q, k, v otherwise than LibTorch's C++).
if(TARGET precprobe_python AND TARGET precprobe_cli AND TARGET port_cnn)
  add_test(NAME ports.pairs
           COMMAND ${PRECPROBE_PYTHON_EXECUTABLE} -m pytest -q -p no:cacheprovider
                   ${CMAKE_CURRENT_LIST_DIR}/test_ports.py
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(ports.pairs PROPERTIES TIMEOUT 900 ENVIRONMENT
    "PYTHONPATH=${PROJECT_BINARY_DIR}/python;PRECPROBE_CLI=$<TARGET_FILE:precprobe_cli>;PRECPROBE_PORTS_BIN=${PROJECT_BINARY_DIR}/bin;OMP_NUM_THREADS=1")
  if(PRECPROBE_SANITIZE MATCHES "address")
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libasan.so
                    OUTPUT_VARIABLE _pp_ports_asan OUTPUT_STRIP_TRAILING_WHITESPACE)
    set_property(TEST ports.pairs APPEND PROPERTY ENVIRONMENT
                 "LD_PRELOAD=${_pp_ports_asan}" "ASAN_OPTIONS=detect_leaks=0")
  endif()
endif()
