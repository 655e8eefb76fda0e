# The docs kept honest (torch-free, so the core build runs them too):
#   docs.links    every relative link and image of README.md, BENCHMARKS.md and docs/*.md
#                 points at a file of the tree, every #anchor at a heading (check_links.py);
#   docs.cli      docs/cli.md is what scripts/render_cli_doc.py makes with the CLI as built,
#                 and every output README.md and docs/cli.md.in show by hand is the CLI's
#                 (check_cli_doc.py).
# Both run with the Python standard library alone (Debian's /usr/bin/python3 first).
find_program(PRECPROBE_PYTHON3 python3 HINTS /usr/bin NO_DEFAULT_PATH)
if(NOT PRECPROBE_PYTHON3)
  find_program(PRECPROBE_PYTHON3 python3)
endif()
if(PRECPROBE_PYTHON3)
  add_test(NAME docs.links
           COMMAND ${PRECPROBE_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/check_links.py
                   ${PROJECT_SOURCE_DIR})
  set_tests_properties(docs.links PROPERTIES TIMEOUT 60 LABELS docs)
  if(TARGET precprobe_cli AND TARGET precprobe_make_anomaly_dump AND NOT PRECPROBE_SANITIZE)
    add_test(NAME docs.cli
             COMMAND ${PRECPROBE_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/check_cli_doc.py
                     ${PROJECT_SOURCE_DIR} $<TARGET_FILE:precprobe_cli>
                     $<TARGET_FILE:precprobe_make_anomaly_dump>)
    set_tests_properties(docs.cli PROPERTIES TIMEOUT 120 LABELS docs)
  endif()
endif()
