# ctest install_builds_embed_externally: installs this build tree to a temporary prefix, checks
# that the installed kfuse tool runs, then configures and builds examples/embed as a program
# outside the tree would: find_package(kfuse CONFIG) + target_link_libraries(app kfuse::kfuse).
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -P build_against_install.cmake
set(work ${BUILD_DIR}/install-test)
file(REMOVE_RECURSE ${work})
set(prefix ${work}/prefix)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --component kfuse)
foreach(f include/kfuse/kfuse.h include/kfuse/error.h bin/kfuse lib/cmake/kfuse/kfuseConfig.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "cmake --install did not install ${f}")
  endif()
endforeach()
run(${prefix}/bin/kfuse check ${SOURCE_DIR}/examples/gemm_scale_bn.kf)

# A program that includes only the installed header compiles: no internal header leaks.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/embed -B ${work}/embed -G Ninja
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${work}/embed)
if(NOT EXISTS ${work}/embed/kfuse_embed)
  message(FATAL_ERROR "examples/embed built no kfuse_embed")
endif()
message(STATUS "examples/embed built against ${prefix}")
