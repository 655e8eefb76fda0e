# xversion.compare: trains the example 30 steps here, compares the dump OTHER (another
# LibTorch's run) with it, and requires that at least MIN_PERMILLE per mille of OTHER's ops are
# paired with an op of this run despite the op-sequence differences between versions, and that
# no paired op is classified divergent (differences within the rounding-noise bound only).
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
execute_process(COMMAND "${EXAMPLE}" --steps 30 --dump "${OUT}/dump"
                OUTPUT_FILE "${OUT}/train.log" ERROR_FILE "${OUT}/train.log" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(READ "${OUT}/train.log" log)
  message(FATAL_ERROR "the example failed (${rc}):\n${log}")
endif()

# --first: the pairing and every op's classification, without the per-op table (fast to read).
execute_process(COMMAND "${CLI}" compare "${OTHER}" "${OUT}/dump" --first --json
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
file(WRITE "${OUT}/compare.json" "${out}")
# 0: no divergent op, 1: one found; 2: an error.
if(NOT (rc EQUAL 0 OR rc EQUAL 1))
  message(FATAL_ERROR "precprobe compare failed (${rc}): ${err}")
endif()
string(JSON matched GET "${out}" matched)
string(JSON ops_other GET "${out}" ops_a)
string(JSON ops_here GET "${out}" ops_b)
string(JSON divergent GET "${out}" divergent_ops)
string(JSON noise GET "${out}" noise_ops)
if(ops_other EQUAL 0)
  message(FATAL_ERROR "no op records in ${OTHER}")
endif()
math(EXPR permille "1000 * ${matched} / ${ops_other}")
message(STATUS "aligned ${matched} of ${ops_other} ops of ${OTHER} (${permille} per mille; "
               "${ops_here} ops here); ${noise} differ within rounding noise, ${divergent} "
               "divergent")
if(permille LESS MIN_PERMILLE)
  message(FATAL_ERROR "only ${permille} per mille of the other run's ops aligned "
                      "(need ${MIN_PERMILLE}); see ${OUT}/compare.json")
endif()
if(NOT divergent EQUAL 0)
  string(JSON first_op GET "${out}" op)
  string(JSON first_step GET "${out}" step)
  message(FATAL_ERROR "${divergent} op(s) classified divergent between the two LibTorch "
                      "versions, the first ${first_op} at step ${first_step}: a real difference "
                      "or a gap in the noise model; see ${OUT}/compare.json")
endif()
