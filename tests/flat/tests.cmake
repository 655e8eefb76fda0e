# Flat reading without precprobe (docs/dump-format.md, "Reading without precprobe"): the
# pandas recipe and the DuckDB query the page shows are extracted from the page itself and
# run on a format_version 2 dump holding NaN and +-Inf: the probe's overflow golden dump
# (tests/data/cli/overflow, written at format_version 1) rewritten by the current writer,
# plus records with +-Inf in every numeric field (precprobe_rewrite_dump --extra). Both
# compare their table with `precprobe export --format jsonl` on the same dump.
#
# pandas and zstandard come from Debian (python3-pandas python3-zstandard); DuckDB from npm
# (@duckdb/node-api, tests/flat/package-lock.json, installed by the flat.npm_ci fixture).
# Missing pieces fail the tests with a message saying what to install.
if(PRECPROBE_BUILD_TOOLS AND NOT PRECPROBE_SANITIZE)
  add_executable(precprobe_rewrite_dump ${CMAKE_CURRENT_LIST_DIR}/rewrite_dump.cpp)
  target_link_libraries(precprobe_rewrite_dump PRIVATE precprobe::core
                                                       nlohmann_json::nlohmann_json)
  precprobe_target(precprobe_rewrite_dump)

  set(_flat "${PROJECT_BINARY_DIR}/flat")
  add_test(NAME flat.dump
           COMMAND ${CMAKE_COMMAND} -E env
                   $<TARGET_FILE:precprobe_rewrite_dump>
                   ${PROJECT_SOURCE_DIR}/tests/data/cli/overflow ${_flat}/overflow_v2 --extra)
  set_tests_properties(flat.dump PROPERTIES FIXTURES_SETUP precprobe_flat_dump TIMEOUT 120)

  # Debian's interpreter first: pandas comes from python3-pandas, not from a pyenv.
  find_program(PRECPROBE_PYTHON3 python3 HINTS /usr/bin NO_DEFAULT_PATH)
  if(NOT PRECPROBE_PYTHON3)
    find_program(PRECPROBE_PYTHON3 python3)
  endif()
  add_test(NAME flat.pandas
           COMMAND ${PRECPROBE_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/test_pandas.py
                   ${PROJECT_SOURCE_DIR}/docs/dump-format.md ${_flat}/overflow_v2
                   $<TARGET_FILE:precprobe_cli>)
  set_tests_properties(flat.pandas PROPERTIES FIXTURES_REQUIRED precprobe_flat_dump
                       TIMEOUT 300)

  add_test(NAME flat.npm_ci
           COMMAND ${CMAKE_COMMAND} -DSRC=${CMAKE_CURRENT_LIST_DIR} -DLOCK_MAY_LACK_PLATFORMS=ON
                   -P ${PROJECT_SOURCE_DIR}/tests/browser/npm_ci.cmake)
  set_tests_properties(flat.npm_ci PROPERTIES FIXTURES_SETUP precprobe_flat_npm TIMEOUT 600)
  add_test(NAME flat.duckdb
           COMMAND node ${CMAKE_CURRENT_LIST_DIR}/test_duckdb.mjs
                   ${PROJECT_SOURCE_DIR}/docs/dump-format.md ${_flat}/overflow_v2
                   $<TARGET_FILE:precprobe_cli>)
  set_tests_properties(flat.duckdb PROPERTIES
                       FIXTURES_REQUIRED "precprobe_flat_dump;precprobe_flat_npm" TIMEOUT 300)
endif()
