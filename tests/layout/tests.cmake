# The source tree's layout: the probe's rooms and what each may include, files of at most 600
# lines (check_layout.cmake). Torch-free: it runs in every build.
add_test(NAME layout.rooms
         COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
                 -P ${CMAKE_CURRENT_LIST_DIR}/check_layout.cmake)
set_tests_properties(layout.rooms PROPERTIES LABELS layout)
