# Runs precprobe_oracle_train under several configurations and requires identical dumps
# under `precprobe compare --exact` (every statistic of every record, and the op sequence).
#   MODE always:     at LEVEL, {async, sync} x {1, 2 intra-op threads}: each async run
#                    against the sync run of the same thread count. 1 against 2 threads is
#                    not bitwise (ATen's bf16 convolution backward sums its weight gradient
#                    per thread): there `compare --first` must find no divergent op, and the
#                    two async runs must differ exactly where the two sync runs do.
#                    Then every statistic of the async run against a float64 recomputation.
#   MODE on_anomaly: the input overflows at step 3; "record": "on_anomaly" replays that
#                    step, whose records must equal step 3 of a run recorded throughout
#                    ("always"), async and sync.
cmake_policy(SET CMP0054 NEW)
# KERNELS: "native" (oneDNN on, ATen's kernels for this CPU), "no_mkldnn" (LibTorch's own
# convolution, as on CPUs without AVX-512 for bfloat16), "cpu_default" (oneDNN off and ATen's
# kernels forced down to ATEN_CPU_CAPABILITY=default): every machine exercises the paths the
# others take (issue 35: an AVX2-only machine read a resize_'s unwritten output).
set(kernel_args)
if(KERNELS STREQUAL "no_mkldnn" OR KERNELS STREQUAL "cpu_default")
  set(kernel_args --mkldnn 0)
endif()
if(KERNELS STREQUAL "cpu_default")
  set(ENV{ATEN_CPU_CAPABILITY} default)
endif()
function(train name)
  execute_process(COMMAND ${PROGRAM} --dump ${DUMP}_${name} --level ${LEVEL} ${kernel_args} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "oracle_train ${name} (${ARGN}) failed (${rc}):\n${out}\n${err}")
  endif()
endfunction()
function(same a b)
  execute_process(COMMAND ${CLI} compare ${DUMP}_${a} ${DUMP}_${b} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${a} vs ${b} ${ARGN}: not identical (exit ${rc}):\n${out}\n${err}")
  endif()
  string(REGEX MATCH "[0-9]+ ops bitwise equal|[0-9]+ match, [0-9]+ noise, [0-9]+ divergent" n "${out}")
  message("${a} vs ${b} ${ARGN}: ${n}")
endfunction()

if(MODE STREQUAL "always")
  foreach(t 1 2)
    train(sync_t${t} --async 0 --threads ${t})
    train(async_t${t} --async 1 --threads ${t})
    same(async_t${t} sync_t${t} --exact)
  endforeach()
  # Two runs with the default configuration (statistics on the worker thread).
  train(async_t1_again --async 1 --threads 1)
  same(async_t1 async_t1_again --exact)
  same(sync_t1 sync_t2 --first)
  same(async_t1 async_t2 --first)
  # Every statistic of the async run against a float64 recomputation of the tensor files a
  # sync run saved at the moment it took its statistics ("task": "tensor").
  train(files --async 0 --threads 1 --tensors)
  same(files sync_t1 --exact)
  execute_process(COMMAND ${CHECK} ${DUMP}_files ${DUMP}_async_t1 RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "statistics differ from their float64 recomputation:\n${out}\n${err}")
  endif()
else()
  # "on_anomaly" leaves dropout as the program set it: the run recorded throughout too.
  set(common --single-optimizer --no-scaler --bad-step 3 --steps 5 --keep-dropout)
  train(always --async 0 ${common})
  train(replay_sync --async 0 --record on_anomaly ${common})
  train(replay_async --async 1 --record on_anomaly ${common})
  same(replay_sync always --exact --step 3)
  same(replay_async always --exact --step 3)
endif()
