# Across LibTorch versions: the Fashion-MNIST example trained 30 steps with this build's
# LibTorch is compared with the same run recorded under another LibTorch. scripts/test.sh
# records one with the host's 1.13 and hands it to the LibTorch 2.6 stage
# (scripts/test-trixie.sh) as PRECPROBE_XVERSION_DUMP; without it there is no such test.
set(PRECPROBE_XVERSION_DUMP "" CACHE PATH
    "A dump of `train_fashion_mnist --steps 30` made with another LibTorch (tests/xversion)")
if(PRECPROBE_XVERSION_DUMP AND TARGET train_fashion_mnist AND TARGET precprobe_cli)
  add_test(NAME xversion.compare
           COMMAND ${CMAKE_COMMAND} -DEXAMPLE=$<TARGET_FILE:train_fashion_mnist>
                   -DCLI=$<TARGET_FILE:precprobe_cli> -DOTHER=${PRECPROBE_XVERSION_DUMP}
                   -DOUT=${PROJECT_BINARY_DIR}/xversion -DMIN_PERMILLE=900
                   -P ${CMAKE_CURRENT_LIST_DIR}/run_xversion.cmake)
  set_tests_properties(xversion.compare PROPERTIES TIMEOUT 900)
endif()
