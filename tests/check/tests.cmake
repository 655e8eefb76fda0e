# End to end: train_fashion_mnist for a few steps with the debugger on, then
# `precprobe check` on its dump. The clean run must show no problem; each planted bug
# (--no-normalise, --sorted-labels, --eval-in-train-mode) must flip its item. The plain_*
# cases run without observe_batch (--no-observe-batch: the README's three lines only), so
# the items are decided from the op records; there at most 6 items may be n/a (ignore index,
# learning rate, module hash, replicas, GradScaler, clipping: nothing of theirs ran or was
# given; class imbalance is decided from the histogram of the loss op's integer target).
# Flags are separated by commas.
if(TARGET precprobe_cli AND TARGET train_fashion_mnist)
  set(_check_cases
      "clean|"
      "no_normalise|--no-normalise|data.inputs_not_normalised"
      "sorted_labels|--sorted-labels|data.no_shuffling"
      "eval_in_train_mode|--eval-in-train-mode|api.train_eval_mode"
      "plain|--no-observe-batch"
      "plain_no_normalise|--no-observe-batch,--no-normalise|data.inputs_not_normalised"
      "plain_sorted_labels|--no-observe-batch,--sorted-labels|data.no_shuffling"
      "plain_eval_in_train_mode|--no-observe-batch,--eval-in-train-mode|api.train_eval_mode")
  foreach(case ${_check_cases})
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 flag)
    set(item "")
    list(LENGTH parts n)
    if(n GREATER 2)
      list(GET parts 2 item)
    endif()
    add_test(NAME check_e2e_${name}
             COMMAND ${CMAKE_COMMAND} -DEXAMPLE=$<TARGET_FILE:train_fashion_mnist>
                     -DCLI=$<TARGET_FILE:precprobe_cli>
                     -DDUMP=${CMAKE_CURRENT_BINARY_DIR}/check_e2e_${name} "-DFLAG=${flag}"
                     "-DITEM=${item}" -DMAX_NA=6 -P ${CMAKE_CURRENT_LIST_DIR}/run_check.cmake)
    set_tests_properties(check_e2e_${name} PROPERTIES TIMEOUT 120 LABELS "check;e2e")
  endforeach()
endif()

# A regression on unnormalised tabular data (features up to ~700) that diverges to NaN with
# plain SGD, instrumented with the README's three lines only: `check` must name the
# unnormalised inputs as the first likely cause.
if(TARGET precprobe::precprobe AND TARGET precprobe_cli)
  add_executable(precprobe_regression_diverge ${CMAKE_CURRENT_LIST_DIR}/regression_diverge.cpp)
  target_link_libraries(precprobe_regression_diverge PRIVATE precprobe::precprobe)
  add_test(NAME check_e2e_regression_diverge
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:precprobe_regression_diverge>
                   -DCLI=$<TARGET_FILE:precprobe_cli>
                   -DDUMP=${CMAKE_CURRENT_BINARY_DIR}/check_e2e_regression_diverge
                   -P ${CMAKE_CURRENT_LIST_DIR}/run_regression.cmake)
  set_tests_properties(check_e2e_regression_diverge PROPERTIES TIMEOUT 120 LABELS "check;e2e")
endif()

# No false alarms: healthy runs of the Fashion-MNIST example, of the DDP example (2 ranks), of
# PyTorch's C++ MNIST CNN (tutorial_cnn.cpp) and of the programs like users' in examples/ (a
# GAN: two networks, two Adams; a VAE: sum-reduced BCE + KL; a CNN evaluating every 10 steps
# inside its step) fire no gradient watchpoint (`grads --json`, `summary --json`) and `check`
# finds no problem, with default thresholds. Short variants; the example over its whole epoch
# (937 steps, ~90 s on 1.13) is labelled "epoch" so that `ctest -LE epoch` leaves it out (the
# LibTorch 2.6 stage does: Debian's 2.6 runs this CPU model several times slower, the
# tutorial CNN 74 s against 14 s; the short variants' 600 s leave room for that and for load).
# Each case: name|program|arguments (comma-separated, {dump}: the dump)|labels (+-separated)|
# timeout|most checklist items n/a
if(TARGET precprobe::precprobe AND TARGET precprobe_cli AND TARGET train_fashion_mnist)
  find_package(ZLIB REQUIRED)
  add_executable(precprobe_tutorial_cnn ${CMAKE_CURRENT_LIST_DIR}/tutorial_cnn.cpp)
  target_include_directories(precprobe_tutorial_cnn PRIVATE ${PROJECT_SOURCE_DIR}/examples)
  target_link_libraries(precprobe_tutorial_cnn PRIVATE precprobe::precprobe ZLIB::ZLIB)
  set(_cases "tutorial_cnn|$<TARGET_FILE:precprobe_tutorial_cnn>|{dump},200|check+e2e|600|6"
             "fashion_mnist|$<TARGET_FILE:train_fashion_mnist>|--dump,{dump},--steps,300|check+e2e|600|6"
             "fashion_mnist_epoch|$<TARGET_FILE:train_fashion_mnist>|--dump,{dump}|check+e2e+epoch|900|6")
  if(TARGET ddp_fashion_mnist)
    list(APPEND _cases "ddp_2_ranks|${PROJECT_SOURCE_DIR}/scripts/launch_ddp.sh|2,--bin,$<TARGET_FILE:ddp_fashion_mnist>,--steps,300,--dump,{dump}|check+e2e|600|6")
  endif()
  # The GAN and the VAE have no labels: class balance and shuffling are n/a too.
  foreach(example "gan|8" "vae|8" "cnn_eval|6")
    string(REPLACE "|" ";" example "${example}")
    list(GET example 0 ex)
    list(GET example 1 max_na)
    if(TARGET train_${ex})
      list(APPEND _cases "${ex}|$<TARGET_FILE:train_${ex}>|--dump,{dump},--steps,100,--log-every,0|check+e2e|600|${max_na}")
    endif()
  endforeach()
  foreach(case ${_cases})
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 program)
    list(GET parts 2 args)
    list(GET parts 3 labels)
    string(REPLACE "+" ";" labels "${labels}")
    list(GET parts 4 timeout)
    list(GET parts 5 max_na)
    add_test(NAME no_false_alarm_${name}
             COMMAND ${CMAKE_COMMAND} -DPROGRAM=${program} -DCLI=$<TARGET_FILE:precprobe_cli>
                     -DDUMP=${CMAKE_CURRENT_BINARY_DIR}/no_false_alarm_${name} "-DARGS=${args}"
                     -DMAX_NA=${max_na} -P ${CMAKE_CURRENT_LIST_DIR}/run_no_false_alarm.cmake)
    set_tests_properties(no_false_alarm_${name} PROPERTIES TIMEOUT ${timeout} LABELS "${labels}")
  endforeach()
endif()

# The probe-side checklist test reads Fashion-MNIST through examples/fashion_mnist.h (zlib).
precprobe_test_target(test_checklist_probe t)
if(t)
  find_package(ZLIB REQUIRED)
  target_link_libraries(${t} PRIVATE ZLIB::ZLIB)
endif()
