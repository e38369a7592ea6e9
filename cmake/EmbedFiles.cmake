# tailor_embed_files(OUTPUT <file.cc> ROOT <dir> FILES <abs paths...>
#                    [TABLE <symbol> COUNT <symbol>])
#
# Generates a C++ source defining the table that src/core/embedded_files.h
# declares: every kernel template and runtime header, keyed by its path
# relative to ROOT. The library serves JIT includes from this table, so an
# installed library never reads the source tree. Regenerated at build time
# whenever one of the files changes.
function(tailor_embed_files)
  cmake_parse_arguments(ARG "" "OUTPUT;ROOT;TABLE;COUNT" "FILES" ${ARGN})
  string(REPLACE ";" "|" files_arg "${ARG_FILES}")
  add_custom_command(
    OUTPUT ${ARG_OUTPUT}
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${ARG_OUTPUT} -DROOT=${ARG_ROOT}
            -DTABLE=${ARG_TABLE} -DCOUNT=${ARG_COUNT}
            "-DFILES=${files_arg}" -P ${PROJECT_SOURCE_DIR}/cmake/embed_files_script.cmake
    DEPENDS ${ARG_FILES} ${PROJECT_SOURCE_DIR}/cmake/embed_files_script.cmake
    COMMENT "Embedding kernel templates and runtime headers"
    VERBATIM)
endfunction()
