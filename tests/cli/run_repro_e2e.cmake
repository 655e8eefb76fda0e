# repro_e2e: `precprobe repro` on an on_anomaly dump, then the program it writes built with
# cmake against the same LibTorch and run; its output must show the non-finite values.
#   -DCLI=precprobe  -DWORK=scratch dir  -DTORCH_DIR=...  -DGENERATOR=...  [-DLAUNCHER=ccache]
#   -DMAKE_DUMP=precprobe_make_anomaly_dump: writes the hand-made dump (DUMP empty)
#   -DDUMP=path      a real dump instead (cmake -DPRECPROBE_REPRO_E2E_DUMP=path)
#   -DREPRO_ARGS="--step 37"  extra arguments of `precprobe repro` (;-list)
#   -DEXPECT=regex   what the program must print (default below)
cmake_minimum_required(VERSION 3.18)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

if(NOT DUMP)
  set(DUMP "${WORK}/dump")
  execute_process(COMMAND "${MAKE_DUMP}" "${DUMP}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${MAKE_DUMP} ${DUMP} failed (${rc})")
  endif()
  # exp(100) overflows float32: one +Inf among [2, 2]; the largest finite is e.
  if(NOT EXPECT)
    set(EXPECT "out0: Float \\[2, 2\\] nan 0 \\+inf 1 -inf 0 max\\|finite\\| 2\\.71828")
  endif()
endif()
if(NOT EXPECT)
  # A real dump: some output of the origin op holds NaN or Inf.
  set(EXPECT "out[0-9]+(\\[[0-9]+\\])?: [A-Za-z0-9]+ \\[[0-9, ]*\\] nan [0-9]+ \\+inf [0-9]+ -inf [0-9]+ ")
  set(EXPECT_NONFINITE ON)
endif()

set(src "${WORK}/repro/repro.cpp")
execute_process(COMMAND "${CLI}" repro "${DUMP}" ${REPRO_ARGS} -o "${src}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "precprobe repro:\n${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "precprobe repro ${DUMP} failed (${rc})")
endif()

set(launcher "")
if(LAUNCHER)
  set(launcher "-DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${WORK}/repro" -B "${WORK}/repro/build"
                        -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release "-DTorch_DIR=${TORCH_DIR}"
                        ${launcher}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the generated project failed (${rc}):\n${out}${err}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${WORK}/repro/build"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the generated repro.cpp failed (${rc}):\n${out}${err}")
endif()

execute_process(COMMAND "${WORK}/repro/build/repro"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "repro:\n${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the generated program exited with ${rc}")
endif()
if(NOT out MATCHES "outputs:\n")
  message(FATAL_ERROR "the program printed no outputs")
endif()
string(REGEX REPLACE ".*outputs:\n" "" outputs "${out}")
string(REGEX REPLACE "recorded in the dump:.*" "" outputs "${outputs}")
if(NOT outputs MATCHES "${EXPECT}")
  message(FATAL_ERROR "the program's outputs do not match '${EXPECT}'")
endif()
if(EXPECT_NONFINITE AND NOT outputs MATCHES "(nan [1-9]|inf [1-9])")
  message(FATAL_ERROR "no output of the replayed op holds NaN/Inf")
endif()
