# mhagen_test_kernel_library(NAME SPECFILE [EXTRA_ARGS ...])
# Generates the kernels of SPECFILE with this build's mhagen at build time
# into a loadable shared library ${CMAKE_CURRENT_BINARY_DIR}/kernels/NAME/
# libNAME.so, and records its path in the list variable MHAGEN_TEST_LIBS.
function(mhagen_test_kernel_library name specfile)
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/kernels/${name}")
  set(lib "${dir}/lib${name}.so")
  add_custom_command(
    OUTPUT "${lib}"
    COMMAND ${CMAKE_COMMAND} -E make_directory "${dir}"
    COMMAND mhagen "${specfile}" -o "${dir}" --shared --lib-name "${name}"
            ${ARGN} > "${dir}/generate.log"
    DEPENDS mhagen mhagen_runtime "${specfile}"
    COMMENT "Generating test kernels: ${name}"
    VERBATIM)
  add_custom_target(kernels_${name} ALL DEPENDS "${lib}")
  set(MHAGEN_TEST_LIBS ${MHAGEN_TEST_LIBS} "${lib}" PARENT_SCOPE)
endfunction()
