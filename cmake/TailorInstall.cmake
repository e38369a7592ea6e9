# `cmake --install`: libtailor (static) and libtailor_c.so, the public
# headers, a CMake package (find_package(tailor CONFIG) -> tailor::tailor,
# tailor::tailor_c) and pkg-config files (tailor, tailor_c). Kernel templates
# and runtime/ headers are embedded in the library, so nothing else is
# installed.
include(CMakePackageConfigHelpers)

set(TAILOR_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tailor)
install(TARGETS tailor tailor_c EXPORT tailorTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tailor
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT tailorTargets NAMESPACE tailor:: DESTINATION ${TAILOR_CMAKE_DIR})

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/tailorConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tailorConfig.cmake
  INSTALL_DESTINATION ${TAILOR_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tailorConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tailorConfig.cmake
              ${PROJECT_BINARY_DIR}/tailorConfigVersion.cmake
  DESTINATION ${TAILOR_CMAKE_DIR})

# pkg-config: libtailor is static, so tailor.pc lists what it links against
# in Libs/Requires (plain `pkg-config --libs tailor` links).
if(TAILOR_ENABLE_CPU_JIT)
  set(TAILOR_PC_LLVM_LIBS "-L${LLVM_LIBRARY_DIR} -lclang-cpp -lLLVM")
else()
  set(TAILOR_PC_LLVM_LIBS "")
endif()
# Relocatable: the prefix is found from the .pc file's own place.
file(RELATIVE_PATH TAILOR_PC_TO_PREFIX
  "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
set(TAILOR_PC_HTTPLIB "")
if(TAILOR_HAVE_HTTPLIB)
  set(TAILOR_PC_HTTPLIB " cpp-httplib")
endif()
foreach(pc tailor tailor_c)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in
                 ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
