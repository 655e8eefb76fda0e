# install + export: find_package(precprobe CONFIG) from an installed prefix.
include(CMakePackageConfigHelpers)
set(PRECPROBE_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/precprobe")

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/precprobe"
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES "${PROJECT_BINARY_DIR}/generated/precprobe/version.h"
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/precprobe)

set(PRECPROBE_EXPORT_TARGETS precprobe_core)
if(PRECPROBE_WITH_TORCH)
  list(APPEND PRECPROBE_EXPORT_TARGETS precprobe)
endif()
install(TARGETS ${PRECPROBE_EXPORT_TARGETS} EXPORT precprobeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT precprobeTargets NAMESPACE precprobe:: DESTINATION ${PRECPROBE_CMAKE_DIR})

set(PRECPROBE_CONFIG_WITH_TORCH ${PRECPROBE_WITH_TORCH})
if(TARGET precprobe_cuda_kernel)
  set(PRECPROBE_CONFIG_WITH_CUDA ON)
else()
  set(PRECPROBE_CONFIG_WITH_CUDA OFF)
endif()
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/precprobeConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/precprobeConfig.cmake" INSTALL_DESTINATION ${PRECPROBE_CMAKE_DIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/precprobeConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/precprobeConfig.cmake"
              "${PROJECT_BINARY_DIR}/precprobeConfigVersion.cmake"
        DESTINATION ${PRECPROBE_CMAKE_DIR})

# The report embeds uPlot (MIT): its license travels with the binaries.
install(FILES "${PROJECT_SOURCE_DIR}/third_party/uplot/LICENSE"
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/third_party/uplot)
