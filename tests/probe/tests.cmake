# The training helper that test_seed and test_dropout run in separate processes.
if(PRECPROBE_WITH_TORCH)
  add_executable(precprobe_repro_train ${CMAKE_CURRENT_LIST_DIR}/repro_train.cpp)
  target_link_libraries(precprobe_repro_train PRIVATE precprobe::precprobe)
  precprobe_target(precprobe_repro_train)
  precprobe_reuse_torch_pch(precprobe_repro_train)
  foreach(name test_seed test_dropout)
    precprobe_test_target(${name} t)
    if(t)
      add_dependencies(${t} precprobe_repro_train)
      target_compile_definitions(${t} PRIVATE
        PRECPROBE_REPRO_TRAIN="$<TARGET_FILE:precprobe_repro_train>")
    endif()
  endforeach()
endif()

# test_replay reads Fashion-MNIST (examples/fashion_mnist.h) for its loss-spike case.
precprobe_test_target(test_replay t)
if(t)
  find_package(ZLIB REQUIRED)
  target_link_libraries(${t} PRIVATE ZLIB::ZLIB)
endif()
