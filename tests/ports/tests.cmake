# The LibTorch side of the port pairs (tests/ports/README.md): port_cnn, port_lstm,
# port_transformer, port_vae, built into bin/ beside the examples. tests/CMakeLists.txt
# includes every tests/*/tests.cmake; the guard makes a second include (e.g. an explicit one
# inside if(PRECPROBE_WITH_TORCH)) harmless, and a torch-free build skips them.
include_guard(GLOBAL)
if(PRECPROBE_WITH_TORCH AND TARGET precprobe::precprobe)
  foreach(name port_cnn port_lstm port_transformer port_vae)
    add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/cpp/${name}.cpp)
    target_link_libraries(${name} PRIVATE precprobe::precprobe)
    set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
    precprobe_target(${name})
    precprobe_reuse_torch_pch(${name})
  endforeach()
endif()
