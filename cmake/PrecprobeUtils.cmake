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
# UndefinedBehaviorSanitizer doubles the compile time of a translation unit (measured: 9.6 s
# under ASan, 20.6 s under ASan+UBSan, for one core source), most of it in the inline code of
# LibTorch's headers: the library's own code (core, probe, CLI, Python module) is compiled
# with every sanitizer asked for, the tests, examples and benchmarks without UBSan (they
# still link its runtime, which the library needs).
function(precprobe_enable_sanitizers target)
  if(PRECPROBE_SANITIZE)
    set(compile_sanitizers "${PRECPROBE_SANITIZE}")
    get_target_property(dir ${target} SOURCE_DIR)
    if(dir MATCHES "^${PROJECT_SOURCE_DIR}/(tests|examples|bench)")
      string(REPLACE "undefined" "" compile_sanitizers "${compile_sanitizers}")
      string(REGEX REPLACE ",+" "," compile_sanitizers "${compile_sanitizers}")
      string(REGEX REPLACE "^,|,$" "" compile_sanitizers "${compile_sanitizers}")
    endif()
    if(compile_sanitizers)
      target_compile_options(${target} PRIVATE -fsanitize=${compile_sanitizers}
                                               -fno-omit-frame-pointer -fno-sanitize-recover=all)
    endif()
    # A static library hands the sanitizer runtimes on to whatever links it (a program of a
    # test's that is not a precprobe_target still links).
    get_target_property(type ${target} TYPE)
    if(type MATCHES "STATIC_LIBRARY|OBJECT_LIBRARY")
      target_link_options(${target} INTERFACE -fsanitize=${PRECPROBE_SANITIZE})
    else()
      target_link_options(${target} PRIVATE -fsanitize=${PRECPROBE_SANITIZE})
    endif()
  endif()
endfunction()

# Everything a precprobe target (library, test, tool, bench) gets.
function(precprobe_target target)
  target_compile_features(${target} PUBLIC cxx_std_${PRECPROBE_CXX_STANDARD})
  precprobe_set_warnings(${target})
  precprobe_enable_sanitizers(${target})
endfunction()

# Reuse the shared <torch/torch.h> precompiled header (a 15 s TU becomes ~6 s).
function(precprobe_reuse_torch_pch target)
  if(PRECPROBE_USE_PCH AND TARGET precprobe_torch_pch)
    target_precompile_headers(${target} REUSE_FROM precprobe_torch_pch)
  endif()
endfunction()

# PRECPROBE_UNITY_BUILD: compile target's sources in batches; ARGN are the sources (relative
# to the calling directory) whose file-local names (anonymous namespaces, statics) meet those
# of another file in one translation unit: they stay translation units of their own.
function(precprobe_unity_build target)
  if(PRECPROBE_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 10)
    # What only a batch shows: a file-local name shadowing another file's, a type of an
    # anonymous namespace inside a class of a file that is no longer the main file. The
    # default build (one file per translation unit) keeps both warnings.
    target_compile_options(${target} PRIVATE -Wno-shadow
                                             $<$<CXX_COMPILER_ID:GNU>:-Wno-subobject-linkage>)
    if(ARGN)
      set_source_files_properties(${ARGN} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endif()
endfunction()
