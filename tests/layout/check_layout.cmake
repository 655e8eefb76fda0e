# The probe's rooms (src/probe/<room>/) and the size of the library's files, checked:
#   - every source of src/probe lies in a room, and every room has a README.md whose
#     "May call:" paragraph names the rooms (and the single headers, as room/file.h) it may
#     include from;
#   - no #include of a room's header from a room that may not call it;
#   - no source file of src/, include/ or tools/ over 600 lines.
#   cmake -DSOURCE_DIR=<checkout> -P check_layout.cmake
cmake_minimum_required(VERSION 3.16)
set(probe "${SOURCE_DIR}/src/probe")
set(problems "")

file(GLOB entries RELATIVE "${probe}" "${probe}/*")
set(rooms "")
foreach(e ${entries})
  if(IS_DIRECTORY "${probe}/${e}")
    list(APPEND rooms "${e}")
  elseif(NOT e STREQUAL "CMakeLists.txt")
    string(APPEND problems "  src/probe/${e}: a file outside the rooms (put it in one)\n")
  endif()
endforeach()

foreach(room ${rooms})
  set(readme "${probe}/${room}/README.md")
  if(NOT EXISTS "${readme}")
    string(APPEND problems "  src/probe/${room}/: no README.md (what it owns, what it may call)\n")
    continue()
  endif()
  file(READ "${readme}" text)
  string(FIND "${text}" "May call:" at)
  if(at EQUAL -1)
    string(APPEND problems "  src/probe/${room}/README.md: no \"May call:\" paragraph\n")
    continue()
  endif()
  string(SUBSTRING "${text}" ${at} -1 may)
  # Single headers first (room/file.h), then the rooms named as words.
  string(REGEX MATCHALL "[a-z_]+/[a-z_0-9]+\\.h" doors "${may}")
  string(REGEX REPLACE "[a-z_]+/[a-z_0-9]+\\.h" "" words "${may}")
  string(REGEX MATCHALL "[a-z_]+" words "${words}")
  set(allowed_${room} "")
  foreach(w ${words})
    if(w IN_LIST rooms)
      list(APPEND allowed_${room} "${w}")
    endif()
  endforeach()
  set(doors_${room} ${doors})
endforeach()

foreach(room ${rooms})
  file(GLOB_RECURSE files "${probe}/${room}/*.h" "${probe}/${room}/*.cpp" "${probe}/${room}/*.cu")
  foreach(f ${files})
    file(STRINGS "${f}" includes REGEX "^#include \"[a-z_0-9]+/[a-z_0-9]+\\.h\"")
    foreach(line ${includes})
      string(REGEX REPLACE "^#include \"(([a-z_0-9]+)/[a-z_0-9]+\\.h)\".*" "\\1" header "${line}")
      string(REGEX REPLACE "/.*" "" target "${header}")
      if(target STREQUAL room OR target STREQUAL "precprobe" OR NOT target IN_LIST rooms)
        continue()
      endif()
      if(target IN_LIST allowed_${room} OR header IN_LIST doors_${room})
        continue()
      endif()
      file(RELATIVE_PATH rel "${SOURCE_DIR}" "${f}")
      string(APPEND problems "  ${rel}: includes ${header}, but ${room} may not call ${target} "
                             "(src/probe/${room}/README.md, \"May call:\")\n")
    endforeach()
  endforeach()
endforeach()

file(GLOB_RECURSE sources "${SOURCE_DIR}/src/*.cpp" "${SOURCE_DIR}/src/*.h"
     "${SOURCE_DIR}/src/*.cu" "${SOURCE_DIR}/include/*.h" "${SOURCE_DIR}/tools/*.cpp"
     "${SOURCE_DIR}/tools/*.h")
foreach(f ${sources})
  file(READ "${f}" body)
  string(REGEX REPLACE "[^\n]" "" newlines "${body}")
  string(LENGTH "${newlines}" n)
  if(n GREATER 600)
    file(RELATIVE_PATH rel "${SOURCE_DIR}" "${f}")
    string(APPEND problems "  ${rel}: ${n} lines (at most 600: split it by what it does)\n")
  endif()
endforeach()

if(problems)
  message(FATAL_ERROR "the source tree's layout:\n${problems}")
endif()
list(LENGTH rooms n_rooms)
list(LENGTH sources n_sources)
message(STATUS "${n_rooms} rooms of src/probe, each calling only what its README allows; "
               "${n_sources} sources, none over 600 lines")
