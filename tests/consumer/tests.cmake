# Consumer projects: precprobe installed to a prefix and found with find_package, and
# precprobe vendored with add_subdirectory. Both build a program and run it.
if(PRECPROBE_WITH_TORCH AND PRECPROBE_INSTALL)
  set(_prefix "${PROJECT_BINARY_DIR}/consumer/prefix")
  set(_gen -G "${CMAKE_GENERATOR}")
  set(_launcher "")
  if(CMAKE_CXX_COMPILER_LAUNCHER)
    set(_launcher "-DCMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER}")
  endif()
  add_test(NAME consumer.install
           COMMAND ${CMAKE_COMMAND} --install ${PROJECT_BINARY_DIR} --prefix ${_prefix})
  set_tests_properties(consumer.install PROPERTIES FIXTURES_SETUP precprobe_installed)

  set(_fp_build "${PROJECT_BINARY_DIR}/consumer/find_package")
  add_test(NAME consumer.find_package.build
           COMMAND ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}
                   ${CMAKE_CTEST_COMMAND} --build-and-test
                   ${CMAKE_CURRENT_LIST_DIR}/find_package ${_fp_build}
                   --build-generator "${CMAKE_GENERATOR}"
                   --build-options -DCMAKE_PREFIX_PATH=${_prefix} -DCMAKE_BUILD_TYPE=Release
                                   ${_launcher}
                   --test-command ${_fp_build}/consumer ${_fp_build}/dump)
  set_tests_properties(consumer.find_package.build PROPERTIES
                       FIXTURES_REQUIRED precprobe_installed FIXTURES_SETUP consumer_release_dump
                       TIMEOUT 900)

  # A Debug build of a program that vendors precprobe (CMake's Debug: no NDEBUG, -O0 -g, the
  # default of many IDE projects) writes the dump the Release build writes: the same op
  # records, inputs included, bit for bit. The probe's sources are compiled here a second
  # time, at -O0 in unity batches (the cheapest compile of them).
  set(_dbg_build "${PROJECT_BINARY_DIR}/consumer/add_subdirectory_debug")
  add_test(NAME consumer.debug.build
           COMMAND ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}
                   ${CMAKE_CTEST_COMMAND} --build-and-test
                   ${CMAKE_CURRENT_LIST_DIR}/add_subdirectory ${_dbg_build}
                   --build-generator "${CMAKE_GENERATOR}" --build-target consumer
                   --build-options -DPRECPROBE_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                                   -DCMAKE_BUILD_TYPE=Debug -DPRECPROBE_UNITY_BUILD=ON
                                   -DPRECPROBE_BUILD_TOOLS=OFF ${_launcher}
                   --test-command ${_dbg_build}/consumer ${_dbg_build}/dump)
  set_tests_properties(consumer.debug.build PROPERTIES FIXTURES_SETUP consumer_debug_dump
                       TIMEOUT 1800 LABELS consumer_debug)
  if(TARGET precprobe_cli)
    add_test(NAME consumer.debug.same_dump
             COMMAND precprobe_cli compare --exact ${_fp_build}/dump ${_dbg_build}/dump)
    set_tests_properties(consumer.debug.same_dump PROPERTIES
                         FIXTURES_REQUIRED "consumer_release_dump;consumer_debug_dump")
  endif()

  # The vendored tree's CMake, targets, include paths and link: configured in full, the
  # torch-free consumer built and run (a core-only build of the subproject, in unity batches
  # when the outer build is). The full
  # consumer, which compiles the probe's LibTorch sources a second time, is labelled slow.
  set(_as_build "${PROJECT_BINARY_DIR}/consumer/add_subdirectory")
  add_test(NAME consumer.add_subdirectory.build
           COMMAND ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}
                   ${CMAKE_CTEST_COMMAND} --build-and-test
                   ${CMAKE_CURRENT_LIST_DIR}/add_subdirectory ${_as_build}
                   --build-generator "${CMAKE_GENERATOR}" --build-target consumer_core
                   --build-options -DPRECPROBE_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                                   -DCMAKE_BUILD_TYPE=Release -DCONSUMER_CORE_ONLY=ON
                                   -DPRECPROBE_UNITY_BUILD=${PRECPROBE_UNITY_BUILD}
                                   ${_launcher}
                   --test-command ${_as_build}/consumer_core ${_as_build}/dump)
  set_tests_properties(consumer.add_subdirectory.build PROPERTIES TIMEOUT 600)
  set(_as_full "${PROJECT_BINARY_DIR}/consumer/add_subdirectory_full")
  add_test(NAME consumer.add_subdirectory.full
           COMMAND ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}
                   ${CMAKE_CTEST_COMMAND} --build-and-test
                   ${CMAKE_CURRENT_LIST_DIR}/add_subdirectory ${_as_full}
                   --build-generator "${CMAKE_GENERATOR}"
                   --build-options -DPRECPROBE_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                                   -DCMAKE_BUILD_TYPE=Release
                                   -DPRECPROBE_UNITY_BUILD=${PRECPROBE_UNITY_BUILD} ${_launcher}
                   --test-command ${_as_full}/consumer ${_as_full}/dump)
  set_tests_properties(consumer.add_subdirectory.full PROPERTIES TIMEOUT 2400 LABELS slow)
endif()
