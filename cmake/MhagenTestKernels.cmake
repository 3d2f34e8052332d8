# mhagen_test_kernel_library(NAME SPECFILE [EXTRA_ARGS ...])
# Generates the kernels of SPECFILE at build time into a loadable shared
# library ${CMAKE_CURRENT_BINARY_DIR}/kernels/NAME/libNAME.so, and records
# its path in the list variable MHAGEN_TEST_LIBS.
#
# The generator is this build's mhagen, or MHAGEN_TEST_GENERATOR when set:
# the sanitized build names the main build's mhagen there, since what it
# checks is the instrumented runtime and harness running the kernels, and
# an instrumented mhagen spends twice the time in Halide's allocations
# making them (its own generation paths are checked by the CLI lit tests).
set(MHAGEN_TEST_GENERATOR "" CACHE FILEPATH
    "mhagen that generates the test kernels (default: this build's)")

function(mhagen_test_kernel_library name specfile)
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/kernels/${name}")
  set(lib "${dir}/lib${name}.so")
  if(MHAGEN_TEST_GENERATOR)
    set(generator "${MHAGEN_TEST_GENERATOR}")
  else()
    set(generator mhagen)
  endif()
  add_custom_command(
    OUTPUT "${lib}"
    COMMAND ${CMAKE_COMMAND} -E make_directory "${dir}"
    COMMAND ${generator} "${specfile}" -o "${dir}" --shared --lib-name "${name}"
            ${ARGN} > "${dir}/generate.log"
    DEPENDS ${generator} mhagen_runtime "${specfile}"
    COMMENT "Generating test kernels: ${name}"
    VERBATIM)
  add_custom_target(kernels_${name} ALL DEPENDS "${lib}")
  set(MHAGEN_TEST_LIBS ${MHAGEN_TEST_LIBS} "${lib}" PARENT_SCOPE)
endfunction()
