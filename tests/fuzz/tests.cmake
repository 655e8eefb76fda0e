# Bounded fuzzing runs (PRECPROBE_FUZZ_SECONDS each, default 30) seeded with tests/fuzz/corpus
# and the golden dumps. New inputs go to the build directory; the seeds are never modified.
if(PRECPROBE_BUILD_FUZZERS)
  set(PRECPROBE_FUZZ_SECONDS 30 CACHE STRING "Seconds each fuzz target runs under ctest")
  foreach(name frames records meta config)
    set(_work "${PROJECT_BINARY_DIR}/fuzz-corpus/${name}")
    file(MAKE_DIRECTORY ${_work})
    add_test(NAME fuzz.${name}
             COMMAND fuzz_${name} ${_work} ${CMAKE_CURRENT_LIST_DIR}/corpus/${name}
                     -max_total_time=${PRECPROBE_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048
                     -max_len=65536 -print_final_stats=1)
    set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT 600)
  endforeach()
endif()
