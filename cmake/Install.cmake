# `cmake --install build [--prefix P]`: the headers, the layer libraries, the
# CLI and an exported CMake package, so a C++ project can
#
#   find_package(meshtrain REQUIRED)
#   target_link_libraries(app PRIVATE meshtrain::meshtrain)
#
# (examples/cpp_consumer/; its Debian dependencies are found again by
# meshtrainConfig.cmake). `cpack -G DEB` in build/ makes a .deb of the same.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(mt_install_targets mt_base meshtrain meshtrain_blas meshtrain_dnnl meshtrain_pcre2 meshtrain_images)
foreach(layer core kernels config data comm launch linalg doctor telemetry nn optim io parallel ckpt plan train)
  list(APPEND mt_install_targets mt_${layer})
endforeach()
if(MESHTRAIN_CUDA)
  list(APPEND mt_install_targets mt_cuda)
endif()
install(TARGETS ${mt_install_targets} EXPORT meshtrainTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}/meshtrain
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS meshtrain_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/meshtrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
install(EXPORT meshtrainTargets NAMESPACE meshtrain:: FILE meshtrainTargets.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/meshtrain)

set(MESHTRAIN_CONFIG_HAVE_MPI ${MESHTRAIN_HAVE_MPI})
set(MESHTRAIN_CONFIG_CUDA ${MESHTRAIN_CUDA})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/meshtrainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/meshtrainConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/meshtrain)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/meshtrainConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/meshtrainConfig.cmake ${PROJECT_BINARY_DIR}/meshtrainConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/meshtrain)

# The .deb: what the install above puts under /usr; it depends on the Debian
# -dev packages of the libraries the static layers link (a consumer links them).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME meshtrain)
set(CPACK_PACKAGE_VENDOR "meshtrain")
set(CPACK_PACKAGE_CONTACT "meshtrain developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Distributed training of neural networks: CLI, C++ library and headers")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
  "libfmt-dev, nlohmann-json3-dev, libopenblas-openmp-dev | libopenblas-dev, libdnnl-dev, libopenmpi-dev, libpcre2-dev, libjpeg62-turbo-dev, libpng-dev, zlib1g-dev, libgomp1")
include(CPack)
