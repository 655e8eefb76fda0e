# The Fashion-MNIST example, fp32 with range statistics, then `precprobe precision --to bf16`:
# every op must fit (exit 0, every verdict "fits", no module kept in fp32). Then the same
# training under bf16 autocast (--bf16, with precprobe::GradScaler): no op output may hold NaN
# or Inf and no step may be skipped, which is what "fits" predicts.
cmake_policy(SET CMP0054 NEW)
file(MAKE_DIRECTORY ${DUMP})
file(WRITE ${DUMP}/range.json "{\"statistics\": {\"range\": true}}\n")
set(common --steps ${STEPS} --log-every 0 --overwrite --seed 1234 --threads 1)
execute_process(COMMAND ${EXAMPLE} ${common} --config ${DUMP}/range.json --dump ${DUMP}/fp32
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "example (fp32) failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${CLI} precision ${DUMP}/fp32 --to bf16 OUTPUT_VARIABLE text)
message("${text}")
execute_process(COMMAND ${CLI} precision ${DUMP}/fp32 --to bf16 --json RESULT_VARIABLE rc
                OUTPUT_VARIABLE json)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "precision --to bf16 of the fp32 run: exit ${rc}, expected 0")
endif()
string(JSON n LENGTH "${json}" ops)
if(n LESS 20)
  message(FATAL_ERROR "precision --to bf16 judged only ${n} ops")
endif()
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  string(JSON verdict GET "${json}" ops ${i} verdict)
  if(NOT verdict STREQUAL "fits")
    string(JSON name GET "${json}" ops ${i} op)
    message(FATAL_ERROR "precision --to bf16: ${name} is ${verdict}, expected fits")
  endif()
endforeach()

execute_process(COMMAND ${EXAMPLE} ${common} --bf16 --dump ${DUMP}/bf16
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "example (--bf16) failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${CLI} summary ${DUMP}/bf16 --json OUTPUT_VARIABLE summary)
string(JSON nonfinite GET "${summary}" nonfinite_op_records)
string(JSON skipped GET "${summary}" scaler skipped)
string(JSON records GET "${summary}" op_records)
message("--bf16 run: ${records} op records, ${nonfinite} with NaN/Inf outputs, ${skipped} skipped steps")
if(NOT nonfinite EQUAL 0 OR NOT skipped EQUAL 0 OR records LESS 1000)
  message(FATAL_ERROR "the --bf16 run does not confirm the prediction: ${nonfinite} op records "
                      "with NaN/Inf outputs, ${skipped} skipped steps, ${records} records")
endif()
