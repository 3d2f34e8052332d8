# ctest driver of the downstream test:
#   cmake -DBUILD_DIR=<mhagen build> -DSOURCE=<this dir> -DWORK=<scratch>
#         -P RunDownstream.cmake
# 1. installs mhagen into a temporary prefix and builds the consumer
#    against the installed package, runs it, and checks that a second build
#    regenerates nothing while touching the spec file regenerates;
# 2. builds the consumer against the build tree (mhagen_DIR) and runs it.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}")
  endif()
  set(LAST_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(prefix "${WORK}/prefix")
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")

# Against the installed package.
run(${CMAKE_COMMAND} -S "${SOURCE}" -B "${WORK}/installed" -G Ninja
    "-DCMAKE_PREFIX_PATH=${prefix}")
run(${CMAKE_COMMAND} --build "${WORK}/installed")
run("${WORK}/installed/consumer")
message(STATUS "installed package:\n${LAST_OUTPUT}")
# Nothing to regenerate when nothing changed ...
run(${CMAKE_COMMAND} --build "${WORK}/installed" -- -n -d explain)
if(LAST_OUTPUT MATCHES "mhagen: generating")
  message(FATAL_ERROR "a second build regenerated kernels:\n${LAST_OUTPUT}")
endif()
# ... and a changed spec file regenerates its kernels (only those).
file(TOUCH "${SOURCE}/layer.mha")
run(${CMAKE_COMMAND} --build "${WORK}/installed")
string(REGEX MATCHALL "mhagen: generating attention kernels" gens
       "${LAST_OUTPUT}")
list(LENGTH gens n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "touching layer.mha regenerated ${n} bundles, "
                      "expected 1:\n${LAST_OUTPUT}")
endif()

# Against the build tree.
run(${CMAKE_COMMAND} -S "${SOURCE}" -B "${WORK}/buildtree" -G Ninja
    "-Dmhagen_DIR=${BUILD_DIR}")
run(${CMAKE_COMMAND} --build "${WORK}/buildtree")
run("${WORK}/buildtree/consumer")
message(STATUS "build tree:\n${LAST_OUTPUT}")
