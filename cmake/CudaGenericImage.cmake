# tailor_cuda_generic_image(EMBEDDED <embedded_files_data.cc>)
#
# The generic CUDA kernels of background JIT (src/backends/cuda/
# generic_kernels.h), compiled at build time: when the toolkit's headers and
# NVRTC are found under TAILOR_CUDA_HOME, a small host program
# (generic_image_builder.cc) compiles every generic kernel with NVRTC for
# sm_80 and sm_90 (+ compute_80 PTX) and writes them as a C++ source that
# libtailor compiles in. Without NVRTC (or with
# -DTAILOR_CUDA_GENERIC_IMAGE=OFF) the library gets an empty image and
# compiles the generic kernels at run time instead. Only called when the
# CUDA backend is built (its headers exist).
option(TAILOR_CUDA_GENERIC_IMAGE
  "Compile the generic CUDA kernels into libtailor at build time (needs NVRTC)" ON)

function(tailor_cuda_generic_image)
  cmake_parse_arguments(ARG "" "EMBEDDED" "" ${ARGN})
  set(cuda_src ${PROJECT_SOURCE_DIR}/src/backends/cuda)
  find_library(TAILOR_NVRTC_LIBRARY NAMES nvrtc
    PATHS ${TAILOR_CUDA_HOME}/lib64 ${TAILOR_CUDA_HOME}/lib NO_DEFAULT_PATH)
  if(NOT TAILOR_CUDA_GENERIC_IMAGE OR NOT TAILOR_NVRTC_LIBRARY)
    message(STATUS "tailor: generic CUDA kernels compiled at run time "
                   "(no NVRTC under ${TAILOR_CUDA_HOME}, or TAILOR_CUDA_GENERIC_IMAGE=OFF)")
    target_sources(tailor PRIVATE ${cuda_src}/generic_image_none.cc)
    return()
  endif()
  # The builder: the runtime's own NVRTC compiler and embedded templates.
  set(builder tailor_cuda_generic_image_builder)
  add_executable(${builder}
    ${cuda_src}/generic_image_builder.cc
    ${cuda_src}/generic_kernel_table.cc
    ${cuda_src}/nvrtc_api.cc
    ${cuda_src}/nvrtc_compiler.cc
    ${PROJECT_SOURCE_DIR}/src/core/embedded_files.cc
    ${PROJECT_SOURCE_DIR}/src/core/hash.cc
    ${ARG_EMBEDDED})
  target_include_directories(${builder} PRIVATE
    ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_include_directories(${builder} SYSTEM PRIVATE ${TAILOR_CUDA_HOME}/include)
  target_link_libraries(${builder} PRIVATE
    absl::status absl::statusor absl::strings absl::str_format
    absl::synchronization PkgConfig::XXHASH Threads::Threads ${CMAKE_DL_LIBS})
  set(image ${CMAKE_CURRENT_BINARY_DIR}/backends/cuda/generic_image_data.cc)
  add_custom_command(
    OUTPUT ${image}
    COMMAND ${CMAKE_COMMAND} -E env CUDA_HOME=${TAILOR_CUDA_HOME}
            $<TARGET_FILE:${builder}> ${image}
    DEPENDS ${builder}
    COMMENT "Compiling the generic CUDA kernels (sm_80, sm_90, compute_80 PTX)"
    VERBATIM)
  target_sources(tailor PRIVATE ${image})
  message(STATUS "tailor: generic CUDA kernels compiled at build time with ${TAILOR_NVRTC_LIBRARY}")
endfunction()
