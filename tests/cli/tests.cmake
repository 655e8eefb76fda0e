# CLI end-to-end: the `precprobe` tool on the small dumps in tests/data/cli/.
# precprobe_make_golden_dumps rewrites those dumps (run it by hand, then commit):
#   build/tests/precprobe_make_golden_dumps tests/data/cli
if(TARGET precprobe_cli)
  add_executable(precprobe_make_golden_dumps ${CMAKE_CURRENT_LIST_DIR}/make_golden_dumps.cpp)
  target_include_directories(precprobe_make_golden_dumps PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
  target_link_libraries(precprobe_make_golden_dumps PRIVATE precprobe::core)
  precprobe_target(precprobe_make_golden_dumps)

  precprobe_add_test(${CMAKE_CURRENT_LIST_DIR}/test_cli.cpp nlohmann_json::nlohmann_json
                     precprobe::core)
  add_dependencies(test_cli precprobe_cli)
  target_compile_definitions(test_cli PRIVATE PRECPROBE_CLI="$<TARGET_FILE:precprobe_cli>")
endif()
