# Multi-process tests: launch 2 and 4 ranks of examples/ddp_fashion_mnist on loopback and
# read their dumps back. Needs the probe and the examples.
if(PRECPROBE_WITH_TORCH AND PRECPROBE_BUILD_EXAMPLES AND PRECPROBE_BUILD_TOOLS)
  add_executable(test_distributed ${CMAKE_CURRENT_LIST_DIR}/test_distributed.cpp
                                  $<TARGET_OBJECTS:precprobe_catch_main>)
  target_include_directories(test_distributed PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(test_distributed PRIVATE Catch2::Catch2 precprobe::core
                                         nlohmann_json::nlohmann_json)
  target_compile_definitions(test_distributed PRIVATE
    PRECPROBE_DDP_BIN="$<TARGET_FILE:ddp_fashion_mnist>"
    PRECPROBE_LAUNCH="${PROJECT_SOURCE_DIR}/scripts/launch_ddp.sh"
    PRECPROBE_CLI="$<TARGET_FILE:precprobe_cli>"
    PRECPROBE_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_dependencies(test_distributed ddp_fashion_mnist precprobe_cli)
  precprobe_target(test_distributed)
  catch_discover_tests(test_distributed TEST_PREFIX "test_distributed:" PROPERTIES TIMEOUT 900
                                        RUN_SERIAL TRUE)
endif()
