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
  set(_oracle_levels L1 L2)
  foreach(level ${_oracle_levels})
    add_test(NAME oracle.${level}
             COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:precprobe_oracle_train>
                     -DCLI=$<TARGET_FILE:precprobe_cli> -DLEVEL=${level} -DMODE=always
                     -DCHECK=$<TARGET_FILE:precprobe_oracle_check>
                     -DDUMP=${CMAKE_CURRENT_BINARY_DIR}/oracle_${level}
                     -P ${CMAKE_CURRENT_LIST_DIR}/run_oracle.cmake)
    set_tests_properties(oracle.${level} PROPERTIES TIMEOUT 300 LABELS "oracle;e2e")
  endforeach()
  if("L2" IN_LIST _oracle_levels)
    add_test(NAME oracle.on_anomaly
             COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:precprobe_oracle_train>
                     -DCLI=$<TARGET_FILE:precprobe_cli> -DLEVEL=L2 -DMODE=on_anomaly
                     -DDUMP=${CMAKE_CURRENT_BINARY_DIR}/oracle_on_anomaly
                     -P ${CMAKE_CURRENT_LIST_DIR}/run_oracle.cmake)
    set_tests_properties(oracle.on_anomaly PROPERTIES TIMEOUT 300 LABELS "oracle;e2e")
  endif()
endif()
