# Reliability: the CLI on hostile files (torch-free), and the probe in a training child
# process that is killed, signalled, throws, runs out of disk, runs ops from several threads
# and runs long (docs/reliability.md).
if(TARGET precprobe_cli)
  precprobe_add_test(${CMAKE_CURRENT_LIST_DIR}/test_cli_hostile.cpp precprobe::core)
  add_dependencies(test_cli_hostile precprobe_cli)
  target_compile_definitions(test_cli_hostile PRIVATE
    PRECPROBE_CLI="$<TARGET_FILE:precprobe_cli>")
endif()
