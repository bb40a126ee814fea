# `cmake --install` into a scratch prefix: the installed tierflow, run from another directory,
# finds its corpus and scenarios under <prefix>/share/tierflow.  -DBUILD=dir -DWORK=dir
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/elsewhere)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "cmake --install failed (${rc}):\n${out}${err}")
endif()
foreach(file bin/tierflow share/tierflow/corpus/kjv-genesis.txt share/tierflow/scenarios/tiny-cpu.yaml)
  if(NOT EXISTS ${WORK}/prefix/${file})
    message(FATAL_ERROR "cmake --install did not install ${file}:\n${out}")
  endif()
endforeach()
execute_process(COMMAND ${WORK}/prefix/bin/tierflow run ${WORK}/prefix/share/tierflow/scenarios/tiny-cpu.yaml --in-memory -n 1
                WORKING_DIRECTORY ${WORK}/elsewhere RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc OR NOT out MATCHES "iteration +0 +loss [0-9.]+.*final loss")
  message(FATAL_ERROR "the installed tierflow, run outside the checkout, failed (${rc}):\n${out}${err}")
endif()
file(REMOVE_RECURSE ${WORK})
