# The differential oracle (docs/reliability.md): one seeded program (oracle_train.cpp) run
# under configurations that must not show in its dump, compared with `precprobe compare
# --exact`. Statistics are a function of the values: async or sync statistics, 1 or 2
# intra-op threads, a replayed step or the same step recorded as it ran, must all agree.
if(TARGET precprobe::precprobe AND TARGET precprobe_cli)
  add_executable(precprobe_oracle_train ${CMAKE_CURRENT_LIST_DIR}/oracle_train.cpp)
  target_link_libraries(precprobe_oracle_train PRIVATE precprobe::precprobe)
  precprobe_target(precprobe_oracle_train)
  precprobe_reuse_torch_pch(precprobe_oracle_train)
  add_executable(precprobe_oracle_check ${CMAKE_CURRENT_LIST_DIR}/oracle_check.cpp)
  target_link_libraries(precprobe_oracle_check PRIVATE precprobe::precprobe PkgConfig::ZSTD)
  target_include_directories(precprobe_oracle_check PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  precprobe_target(precprobe_oracle_check)
  precprobe_reuse_torch_pch(precprobe_oracle_check)
  # (L2 on LibTorch 2.x once aborted with heap corruption: the value histogram of the
  # INT64_MAX that 2.x's deterministic mode writes into new int64 tensors; test_stats has it.)
  # Each case under three kernel choices (run_oracle.cmake, KERNELS): oneDNN's convolution
  # and this CPU's ATen kernels; LibTorch's own convolution (what a CPU without AVX-512 runs
  # for bfloat16); and that with ATen's kernels forced down to their default capability.
  set(_oracle_levels L1 L2)
  foreach(kernels native no_mkldnn cpu_default)
    set(_suffix "")
    if(NOT kernels STREQUAL "native")
      set(_suffix ".${kernels}")
    endif()
    foreach(level ${_oracle_levels})
      add_test(NAME oracle.${level}${_suffix}
               COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:precprobe_oracle_train>
                       -DCLI=$<TARGET_FILE:precprobe_cli> -DLEVEL=${level} -DMODE=always
                       -DKERNELS=${kernels}
                       -DCHECK=$<TARGET_FILE:precprobe_oracle_check>
                       -DDUMP=${CMAKE_CURRENT_BINARY_DIR}/oracle_${level}_${kernels}
                       -P ${CMAKE_CURRENT_LIST_DIR}/run_oracle.cmake)
      set_tests_properties(oracle.${level}${_suffix} PROPERTIES TIMEOUT 600 LABELS "oracle;e2e")
    endforeach()
    add_test(NAME oracle.on_anomaly${_suffix}
             COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:precprobe_oracle_train>
                     -DCLI=$<TARGET_FILE:precprobe_cli> -DLEVEL=L2 -DMODE=on_anomaly
                     -DKERNELS=${kernels}
                     -DDUMP=${CMAKE_CURRENT_BINARY_DIR}/oracle_on_anomaly_${kernels}
                     -P ${CMAKE_CURRENT_LIST_DIR}/run_oracle.cmake)
    set_tests_properties(oracle.on_anomaly${_suffix} PROPERTIES TIMEOUT 600 LABELS "oracle;e2e")
  endforeach()
endif()
