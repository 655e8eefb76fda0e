# CUDA tests: built only when the fused statistics kernel is (PRECPROBE_WITH_CUDA
# with a CUDA LibTorch); they need a GPU to check anything and say so (WARN) without one, or
# fail when PRECPROBE_REQUIRE_CUDA is set, as scripts/gpu-check.sh sets it.
#   test_cuda_stats        every dtype and layout against a float64 CPU recomputation
#   test_cuda_debugger     planted overflow origin, on_anomaly replay on CUDA
#   test_cuda_determinism  compare --exact of two seeded CUDA runs
#   test_cuda_sync         no host synchronisation in an L1 / overflow_check step
#   grad_scaler_sequence   precprobe::GradScaler's CSV for grad_scaler_compare.py (not a test)
#   precprobe_sync_counter the LD_PRELOAD shim counting the CUDA runtime's blocking calls
if(TARGET precprobe_cuda_kernel)
  foreach(_t test_cuda_stats test_cuda_debugger test_cuda_determinism test_cuda_sync)
    precprobe_add_test(${CMAKE_CURRENT_LIST_DIR}/${_t}.cpp precprobe::precprobe fmt::fmt
                       nlohmann_json::nlohmann_json PkgConfig::ZSTD PkgConfig::XXHASH)
    target_include_directories(${_t} PRIVATE ${PROJECT_SOURCE_DIR}/src/probe)
    precprobe_reuse_torch_pch(${_t})
  endforeach()
  add_dependencies(test_cuda_determinism precprobe_cli)
  target_link_libraries(test_cuda_sync PRIVATE ${CMAKE_DL_LIBS})

  add_executable(grad_scaler_sequence ${CMAKE_CURRENT_LIST_DIR}/grad_scaler_sequence.cpp)
  target_link_libraries(grad_scaler_sequence PRIVATE precprobe::precprobe)
  set_target_properties(grad_scaler_sequence PROPERTIES
                        RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
  precprobe_target(grad_scaler_sequence)
  precprobe_reuse_torch_pch(grad_scaler_sequence)

  add_library(precprobe_sync_counter SHARED ${CMAKE_CURRENT_LIST_DIR}/sync_counter.cpp)
  target_link_libraries(precprobe_sync_counter PRIVATE ${CMAKE_DL_LIBS})
  set_target_properties(precprobe_sync_counter PROPERTIES
                        LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)
  precprobe_target(precprobe_sync_counter)
endif()
