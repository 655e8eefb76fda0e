# Reliability: the CLI on hostile files (torch-free), and the probe in a training child
# process that is killed, signalled, throws, runs out of disk, runs ops from several threads
# and runs long (docs/reliability.md).
if(TARGET precprobe_cli)
  precprobe_add_test(${CMAKE_CURRENT_LIST_DIR}/test_cli_hostile.cpp precprobe::core)
  add_dependencies(test_cli_hostile precprobe_cli)
  target_compile_definitions(test_cli_hostile PRIVATE
    PRECPROBE_CLI="$<TARGET_FILE:precprobe_cli>")
endif()

if(PRECPROBE_WITH_TORCH)
  add_executable(precprobe_reliability_child ${CMAKE_CURRENT_LIST_DIR}/reliability_child.cpp)
  find_package(ZLIB REQUIRED)  # examples/fashion_mnist.h reads the gzipped idx files
  target_link_libraries(precprobe_reliability_child PRIVATE precprobe::precprobe ZLIB::ZLIB)
  # The writer's test hook (src/core/dump_files.h): the crash flush that cannot finish.
  target_include_directories(precprobe_reliability_child PRIVATE ${PROJECT_SOURCE_DIR}/src/core)
  precprobe_target(precprobe_reliability_child)
  precprobe_reuse_torch_pch(precprobe_reliability_child)

  # The drivers are torch-free: they run the child and read its dumps with DumpReader
  # (test_crash: crashes, SIGKILL and a run still running, also through the CLI).
  foreach(t test_reliability test_crash)
    precprobe_add_test(${CMAKE_CURRENT_LIST_DIR}/${t}.cpp precprobe::core
                       nlohmann_json::nlohmann_json)
    add_dependencies(${t} precprobe_reliability_child)
    target_compile_definitions(${t} PRIVATE
      PRECPROBE_RELIABILITY_CHILD="$<TARGET_FILE:precprobe_reliability_child>")
  endforeach()
  if(TARGET precprobe_cli)
    add_dependencies(test_crash precprobe_cli)
    target_compile_definitions(test_crash PRIVATE PRECPROBE_CLI="$<TARGET_FILE:precprobe_cli>")
  endif()
endif()
