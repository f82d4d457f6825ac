# Installs zen into a scratch prefix and checks what a user of the install
# gets (ctest zen_install_consumer):
#   1. tests/consumer builds against it with find_package(zen), together with
#      README.md's C++ snippet exactly as written, and runs;
#   2. the installed `zen` works from another directory: --version, the
#      shipped default trace (`zen bench`), and `zen analyze --plot` (its
#      plot script and trace found relative to the executable).
# -DBUILD=<build dir> -DSRC=<tests/consumer> -DWORK=<scratch> -DREADME=<README.md>
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()

# README.md's C++ block (the first ```cpp fence), verbatim.
file(READ ${README} readme)
string(REGEX MATCH "```cpp\n([^`]*)```" block "${readme}")
if(NOT CMAKE_MATCH_1)
  message(FATAL_ERROR "README.md has no ```cpp block")
endif()
file(WRITE ${WORK}/readme_snippet.cc "${CMAKE_MATCH_1}")

# The test harness (zen_testing) is not part of the package.
if(EXISTS ${WORK}/prefix/include/zen/testing)
  message(FATAL_ERROR "the test harness headers (zen/testing) were installed")
endif()
file(GLOB_RECURSE exported ${WORK}/prefix/*zenTargets*.cmake)
foreach(f IN LISTS exported)
  file(READ ${f} text)
  if(text MATCHES "zen_testing")
    message(FATAL_ERROR "the exported package names zen_testing (${f})")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${WORK}/build -DCMAKE_PREFIX_PATH=${WORK}/prefix
                        -DREADME_SNIPPET=${WORK}/readme_snippet.cc
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer with find_package(zen) failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer (with README.md's C++ snippet) failed")
endif()
execute_process(COMMAND ${WORK}/build/app RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer's sync was wrong")
endif()

# The installed tool, from a directory that is neither the source nor the
# build tree, with nothing of zen's in the environment.
set(zen ${WORK}/prefix/bin/zen)
set(elsewhere ${WORK}/elsewhere)
file(MAKE_DIRECTORY ${elsewhere})
set(clean_env ${CMAKE_COMMAND} -E env --unset=ZEN_DEFAULT_TRACE --unset=ZEN_PLOT_SCRIPT --unset=ZEN_PYTHON)
foreach(f share/zen/plots/plot_analysis.py share/zen/plots/plot_performance.py
          share/zen/traces/gcide-lm-n8.safetensors include/zen/version.h)
  if(NOT EXISTS ${WORK}/prefix/${f})
    message(FATAL_ERROR "cmake --install did not install ${f}")
  endif()
endforeach()
execute_process(COMMAND ${clean_env} ${zen} --version WORKING_DIRECTORY ${elsewhere}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(rc OR NOT out MATCHES "^zen [0-9]+\\.[0-9]+\\.[0-9]+\n$")
  message(FATAL_ERROR "installed zen --version: rc ${rc}, '${out}'")
endif()
execute_process(COMMAND ${clean_env} ${zen} bench --quiet --world 2 --iters 1 --warmup 0 --schemes zen
                WORKING_DIRECTORY ${elsewhere} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc OR NOT out MATCHES "workload  trace gcide-lm-n8.safetensors")
  message(FATAL_ERROR "installed zen bench did not use the installed default trace: rc ${rc}\n${out}\n${err}")
endif()
execute_process(COMMAND ${clean_env} ${zen} analyze ${WORK}/prefix/share/zen/traces/gcide-lm-n8.safetensors
                        --plot plots
                WORKING_DIRECTORY ${elsewhere} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "installed zen analyze --plot failed (rc ${rc}): ${err}")
endif()
file(GLOB pngs ${elsewhere}/plots/*.png)
if(NOT pngs)
  message(FATAL_ERROR "installed zen analyze --plot wrote no PNG into ${elsewhere}/plots")
endif()
file(REMOVE_RECURSE ${WORK})
