# Bounded fuzzing runs (PRECPROBE_FUZZ_SECONDS each, default 30) of every fuzz_<unit>,
# seeded with tests/fuzz/corpus/<unit>. New inputs go to the build directory; the checked-in
# seeds are never modified.
if(PRECPROBE_BUILD_FUZZERS)
  set(PRECPROBE_FUZZ_SECONDS 30 CACHE STRING "Seconds each fuzz target runs under ctest")
  file(GLOB _fuzz_sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_LIST_DIR}/fuzz_*.cpp")
  foreach(src ${_fuzz_sources})
    get_filename_component(target "${src}" NAME_WE)
    string(REPLACE "fuzz_" "" unit "${target}")
    set(_work "${PROJECT_BINARY_DIR}/fuzz-corpus/${unit}")
    file(MAKE_DIRECTORY ${_work})
    set(_dict "")
    if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/${unit}.dict")
      set(_dict "-dict=${CMAKE_CURRENT_LIST_DIR}/${unit}.dict")
    endif()
    add_test(NAME fuzz.${unit}
             COMMAND ${target} ${_work} ${CMAKE_CURRENT_LIST_DIR}/corpus/${unit} ${_dict}
                     -max_total_time=${PRECPROBE_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048
                     -max_len=65536 -print_final_stats=1)
    set_tests_properties(fuzz.${unit} PROPERTIES LABELS fuzz TIMEOUT 600)
  endforeach()
endif()
