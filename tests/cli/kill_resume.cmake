# Killed mid-iteration (the process exits at once after a number of tasks, as kill -9 leaves it),
# then restarted with --resume from the last checkpoint: the final weights are bit-identical to an
# uninterrupted run.  -DSCENARIO=... -DCORPUS=... -DWORK=dir
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/whole ${WORK}/disk ${WORK}/ckpt)
set(common run ${SCENARIO} --set training.sequence_length=32 --data ${CORPUS} -n 6)
execute_process(COMMAND ${TIERFLOW} ${common} --disk ${WORK}/whole --json RESULT_VARIABLE rc OUTPUT_VARIABLE whole)
if(rc)
  message(FATAL_ERROR "the uninterrupted run failed")
endif()
string(JSON want GET "${whole}" weights_sha256)
# Die 30 % into iteration 4 (0-based), after the checkpoint taken when 4 iterations were done.
string(JSON tasks GET "${whole}" tasks_executed)
math(EXPR exit_after "${tasks} * 43 / 60")
execute_process(COMMAND ${TIERFLOW} ${common} --disk ${WORK}/disk --checkpoint ${WORK}/ckpt --checkpoint-every 2
                        --exit-after-tasks ${exit_after} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 137)
  message(FATAL_ERROR "the run was expected to die mid-iteration (137), got ${rc}")
endif()
execute_process(COMMAND ${TIERFLOW} ${common} --disk ${WORK}/disk --checkpoint ${WORK}/ckpt --checkpoint-every 2 --resume --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE resumed ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "the resumed run failed: ${err}")
endif()
string(JSON first GET "${resumed}" first_iteration)
string(JSON got GET "${resumed}" weights_sha256)
if(NOT first EQUAL 4)
  message(FATAL_ERROR "resumed at iteration ${first}, expected 4")
endif()
if(NOT got STREQUAL want)
  message(FATAL_ERROR "resumed weights ${got} differ from the uninterrupted run's ${want}")
endif()
message(STATUS "resumed at iteration ${first}; weights sha256 ${got} as uninterrupted")
