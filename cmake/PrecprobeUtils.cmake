# Per-target settings. Global CMAKE_CXX_FLAGS are never touched.

# Warnings as google/benchmark uses them. Tests compare floating-point values exactly on
# purpose (a min or max is a value of the tensor, bit for bit): no -Wfloat-equal there.
function(precprobe_set_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    get_target_property(dir ${target} SOURCE_DIR)
    set(float_equal -Wfloat-equal)
    if(dir MATCHES "^${PROJECT_SOURCE_DIR}/tests")
      set(float_equal "")
    endif()
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow ${float_equal} -Wformat=2
                                             -Wno-unused-parameter)
  endif()
endfunction()

# Sanitizers from PRECPROBE_SANITIZE ("address,undefined" or "thread").
function(precprobe_enable_sanitizers target)
  if(PRECPROBE_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${PRECPROBE_SANITIZE}
                                             -fno-omit-frame-pointer -fno-sanitize-recover=all)
    target_link_options(${target} PRIVATE -fsanitize=${PRECPROBE_SANITIZE})
  endif()
endfunction()

# Everything a precprobe target (library, test, tool, bench) gets.
function(precprobe_target target)
  target_compile_features(${target} PUBLIC cxx_std_17)
  precprobe_set_warnings(${target})
  precprobe_enable_sanitizers(${target})
endfunction()

# Reuse the shared <torch/torch.h> precompiled header (a 15 s TU becomes ~6 s).
function(precprobe_reuse_torch_pch target)
  if(PRECPROBE_USE_PCH AND TARGET precprobe_torch_pch)
    target_precompile_headers(${target} REUSE_FROM precprobe_torch_pch)
  endif()
endfunction()
