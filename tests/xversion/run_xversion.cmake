# xversion.compare: trains the example 30 steps here, compares the dump OTHER (another
# LibTorch's run) with it, and requires that at least MIN_PERMILLE per mille of OTHER's ops are paired
# with an op of this run despite the op-sequence differences between versions.
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
execute_process(COMMAND "${EXAMPLE}" --steps 30 --dump "${OUT}/dump"
                OUTPUT_FILE "${OUT}/train.log" ERROR_FILE "${OUT}/train.log" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(READ "${OUT}/train.log" log)
  message(FATAL_ERROR "the example failed (${rc}):\n${log}")
endif()

execute_process(COMMAND "${CLI}" compare "${OTHER}" "${OUT}/dump" --json
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
file(WRITE "${OUT}/compare.json" "${out}")
# 0: nothing differs, 1: differences found (expected across versions); 2: an error.
if(NOT (rc EQUAL 0 OR rc EQUAL 1))
  message(FATAL_ERROR "precprobe compare failed (${rc}): ${err}")
endif()
string(JSON matched GET "${out}" matched)
string(JSON n_unmatched LENGTH "${out}" unmatched)
set(only_other 0)
set(only_here 0)
if(n_unmatched GREATER 0)
  math(EXPR last "${n_unmatched} - 1")
  foreach(i RANGE ${last})
    string(JSON side GET "${out}" unmatched ${i} side)
    if(side STREQUAL "a")
      math(EXPR only_other "${only_other} + 1")
    else()
      math(EXPR only_here "${only_here} + 1")
    endif()
  endforeach()
endif()
math(EXPR total "${matched} + ${only_other}")
if(total EQUAL 0)
  message(FATAL_ERROR "no op records in ${OTHER}")
endif()
math(EXPR permille "1000 * ${matched} / ${total}")
message(STATUS "aligned ${matched} of ${total} ops of ${OTHER} (${permille} per mille); "
               "${only_other} only there, ${only_here} only here; compare exit ${rc}")
if(permille LESS MIN_PERMILLE)
  message(FATAL_ERROR "only ${permille} per mille of the other run's ops aligned "
                      "(need ${MIN_PERMILLE}); "
                      "see ${OUT}/compare.json")
endif()
