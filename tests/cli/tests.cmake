# CLI end-to-end: the `precprobe` tool on the small dumps in tests/data/cli/.
#
# Those dumps are written by the real probe (tests/cli/make_golden_dumps.cpp: a tiny MLP
# trained for 3 steps under the PrecisionDebugger, GradScaler and gradient monitor) and
# checked in, so the CLI tests also run in a torch-free build. Regenerating them is a step
# by hand (needs PRECPROBE_WITH_TORCH), followed by the docs whose output they show:
#   ninja -C build precprobe_make_golden_dumps precprobe_cli
#   build/tests/precprobe_make_golden_dumps tests/data/cli
#   scripts/render_cli_doc.py build/bin/precprobe      # docs/cli.md from docs/cli.md.in
#   ctest --test-dir build -R 'cli|hostile'            # then commit tests/data/cli and docs
# The records come out the same on every run (fixed weights and batches, one thread,
# deterministic algorithms); meta.json's times, host and pid differ.
# The checked-in dumps are format_version 1 and stay so: they are the tests of reading
# version 1 (test_cli's "every command reads format_version 1 and 2 alike" rewrites them at
# version 2 and compares every command's output). The generator now writes version 2, so
# regenerating replaces them with version 2 dumps: keep the version 1 ones (e.g. generate
# into another directory) unless the version 1 tests move elsewhere. tests/data/cli/range (range
# statistics, format_version 2; `precprobe precision` in test_cli_precision and docs/cli.md) is
# written alone: build/tests/precprobe_make_golden_dumps tests/data/cli range
if(TARGET precprobe::precprobe)
  add_executable(precprobe_make_golden_dumps ${CMAKE_CURRENT_LIST_DIR}/make_golden_dumps.cpp)
  target_link_libraries(precprobe_make_golden_dumps PRIVATE precprobe::precprobe)
  precprobe_target(precprobe_make_golden_dumps)
  precprobe_reuse_torch_pch(precprobe_make_golden_dumps)
endif()

if(TARGET precprobe_cli)
  # One executable per topic (test_cli.cpp says which); helpers in cli_test_util.h.
  foreach(_t test_cli test_cli_compare test_cli_history_export test_cli_report_check
             test_cli_summary_verdict test_cli_run_state
             test_cli_precision)
    precprobe_add_test(${CMAKE_CURRENT_LIST_DIR}/${_t}.cpp nlohmann_json::nlohmann_json
                       precprobe::core)
    add_dependencies(${_t} precprobe_cli)
    target_compile_definitions(${_t} PRIVATE PRECPROBE_CLI="$<TARGET_FILE:precprobe_cli>")
  endforeach()
endif()

# compare on real runs of the example: oneDNN vs im2col convolutions (and 1 vs 2 threads) is
# rounding noise, not divergence;
# a planted 1e-3 relative change of one op at step 3 is named exactly.
if(TARGET precprobe_cli AND TARGET train_fashion_mnist)
  foreach(mode rounding perturb pair)
    add_test(NAME compare_e2e_${mode}
             COMMAND ${CMAKE_COMMAND} -DEXAMPLE=$<TARGET_FILE:train_fashion_mnist>
                     -DCLI=$<TARGET_FILE:precprobe_cli> -DMODE=${mode} -DSTEPS=60 -DPSTEP=3
                     -DDUMP=${CMAKE_CURRENT_BINARY_DIR}/compare_e2e_${mode}
                     -P ${CMAKE_CURRENT_LIST_DIR}/run_compare_e2e.cmake)
    set_tests_properties(compare_e2e_${mode} PROPERTIES TIMEOUT 300 LABELS "cli;e2e")
  endforeach()
  add_test(NAME compare_e2e_bf16
           COMMAND ${CMAKE_COMMAND} -DEXAMPLE=$<TARGET_FILE:train_fashion_mnist>
                   -DCLI=$<TARGET_FILE:precprobe_cli> -DMODE=bf16 -DSTEPS=100
                   -DDUMP=${CMAKE_CURRENT_BINARY_DIR}/compare_e2e_bf16
                   -P ${CMAKE_CURRENT_LIST_DIR}/run_compare_e2e.cmake)
  set_tests_properties(compare_e2e_bf16 PROPERTIES TIMEOUT 600 LABELS "cli;e2e")
endif()

# precision on a real run of the example: its fp32 dump predicts that everything fits bf16,
# and its --bf16 run (CPU autocast) confirms: no NaN/Inf, no skipped step.
if(TARGET precprobe_cli AND TARGET train_fashion_mnist)
  add_test(NAME precision_e2e
           COMMAND ${CMAKE_COMMAND} -DEXAMPLE=$<TARGET_FILE:train_fashion_mnist>
                   -DCLI=$<TARGET_FILE:precprobe_cli> -DSTEPS=50
                   -DDUMP=${CMAKE_CURRENT_BINARY_DIR}/precision_e2e
                   -P ${CMAKE_CURRENT_LIST_DIR}/run_precision_e2e.cmake)
  set_tests_properties(precision_e2e PROPERTIES TIMEOUT 300 LABELS "cli;e2e")
endif()

# The replayed-anomaly side of the CLI (summary's "anomalies", `precprobe repro`) on a dump
# written by hand (anomaly_dump.h); torch-free.
if(TARGET precprobe_cli)
  precprobe_add_test(${CMAKE_CURRENT_LIST_DIR}/test_repro.cpp nlohmann_json::nlohmann_json
                     precprobe::core PkgConfig::ZSTD)
  add_dependencies(test_repro precprobe_cli)
  target_compile_definitions(test_repro PRIVATE PRECPROBE_CLI="$<TARGET_FILE:precprobe_cli>")
endif()

# repro_e2e: the program `precprobe repro` writes, built against this build's LibTorch and
# run (one compile of <ATen/ATen.h>, ~1 min). By default on the hand-made dump (exp(100) in
# float32 must print +inf 1); point it at a real on_anomaly dump with
#   cmake -DPRECPROBE_REPRO_E2E_DUMP=/path/to/dump [-DPRECPROBE_REPRO_E2E_ARGS="--rank;1"] .
set(PRECPROBE_REPRO_E2E_DUMP "" CACHE PATH "on_anomaly dump for the repro_e2e test (empty: hand-made)")
set(PRECPROBE_REPRO_E2E_ARGS "" CACHE STRING "extra arguments of precprobe repro in repro_e2e (;-list)")
if(TARGET precprobe_cli)  # torch-free; the browser test renders its report too
  add_executable(precprobe_make_anomaly_dump ${CMAKE_CURRENT_LIST_DIR}/make_anomaly_dump.cpp)
  target_link_libraries(precprobe_make_anomaly_dump PRIVATE precprobe::core PkgConfig::ZSTD)
  precprobe_target(precprobe_make_anomaly_dump)
endif()
# The TSan build skips it (CI time: the same program, the same LibTorch); the ASan build,
# the test command's LibTorch 1.13 stage, runs it (the program it writes is not sanitized).
if(TARGET precprobe_cli AND PRECPROBE_WITH_TORCH AND NOT PRECPROBE_SANITIZE MATCHES "thread")
  add_test(NAME repro_e2e
           COMMAND ${CMAKE_COMMAND} -DCLI=$<TARGET_FILE:precprobe_cli>
                   -DMAKE_DUMP=$<TARGET_FILE:precprobe_make_anomaly_dump>
                   -DDUMP=${PRECPROBE_REPRO_E2E_DUMP} "-DREPRO_ARGS=${PRECPROBE_REPRO_E2E_ARGS}"
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/repro_e2e -DTORCH_DIR=${Torch_DIR}
                   -DGENERATOR=${CMAKE_GENERATOR} -DLAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER}
                   -P ${CMAKE_CURRENT_LIST_DIR}/run_repro_e2e.cmake)
  set_tests_properties(repro_e2e PROPERTIES TIMEOUT 600 LABELS "cli;e2e")
endif()
