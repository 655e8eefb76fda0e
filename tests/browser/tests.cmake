# The HTML report rendered in headless Chromium (Debian's `chromium`), driven by Playwright
# (playwright-core from npm, tests/browser/package-lock.json). Dumps come from the real
# DumpWriter (precprobe_make_dump) and the probe (the CLI's golden dumps in tests/data/cli), reports
# from the real CLI. Missing chromium or node
# fails the test with a message saying what to install: scripts/install-deps.sh does.
# The sanitizer builds (scripts/test.sh) skip it: the main build already renders the same pages.
if(PRECPROBE_BUILD_TOOLS AND NOT PRECPROBE_SANITIZE)
  add_executable(precprobe_make_dump ${CMAKE_CURRENT_LIST_DIR}/make_dump.cpp)
  target_link_libraries(precprobe_make_dump PRIVATE precprobe::core)
  precprobe_target(precprobe_make_dump)

  set(_dir "${PROJECT_BINARY_DIR}/browser")
  add_test(NAME browser.npm_ci
           COMMAND ${CMAKE_COMMAND} -DSRC=${CMAKE_CURRENT_LIST_DIR}
                   -P ${CMAKE_CURRENT_LIST_DIR}/npm_ci.cmake)
  set_tests_properties(browser.npm_ci PROPERTIES FIXTURES_SETUP precprobe_browser TIMEOUT 600)

  add_test(NAME browser.report
           COMMAND ${CMAKE_COMMAND} -E env
                   PRECPROBE_CLI=$<TARGET_FILE:precprobe_cli>
                   PRECPROBE_MAKE_DUMP=$<TARGET_FILE:precprobe_make_dump>
                   PRECPROBE_MAKE_ANOMALY_DUMP=$<TARGET_FILE:precprobe_make_anomaly_dump>
                   PRECPROBE_BROWSER_OUT=${_dir}
                   PRECPROBE_GOLDEN=${PROJECT_SOURCE_DIR}/tests/data/cli
                   node ${CMAKE_CURRENT_LIST_DIR}/report.test.mjs)
  # ~30 s in a Release build; the sanitizer builds run the writer and the CLI much slower.
  set(_timeout 600)
  if(PRECPROBE_SANITIZE)
    set(_timeout 1500)
  endif()
  set_tests_properties(browser.report PROPERTIES FIXTURES_REQUIRED precprobe_browser
                       TIMEOUT ${_timeout} RUN_SERIAL ON)
endif()
