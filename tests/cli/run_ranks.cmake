# Several ranks for real: `mpirun -np NP tierflow run` of the tiny scenario at training.data_parallel
# NP under POLICY trains to the weights and losses of the one-process reference (--in-memory with
# the same data_parallel), bit for bit; and mpirun with another process count is one error, from
# rank 0, before anything is written.
#   -DTIERFLOW=... -DMPIEXEC=... -DSCENARIO=... -DCORPUS=... -DPOLICY=... -DNP=... -DWORK=dir
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/disks)
set(sets --set policy.name=${POLICY} --set hardware.node.gpu_count=4 --set training.data_parallel=${NP}
         --set training.sequence_length=64)
set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
execute_process(COMMAND ${TIERFLOW} run ${SCENARIO} ${sets} -n 3 --in-memory --threads 1 --data ${CORPUS} --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE reference ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "--in-memory failed: ${reference}${err}")
endif()
execute_process(COMMAND ${MPIEXEC} -np ${NP} --oversubscribe ${TIERFLOW} run ${SCENARIO} ${sets} -n 3 --threads 1 --data ${CORPUS}
                        --disk-root ${WORK}/disks --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE ranks ERROR_VARIABLE err TIMEOUT 600)
if(rc)
  message(FATAL_ERROR "mpirun -np ${NP} failed (${rc}): ${ranks}${err}")
endif()
foreach(key weights_sha256 loss)
  string(JSON want GET "${reference}" ${key})
  string(JSON got GET "${ranks}" ${key})
  if(NOT want STREQUAL got)
    message(FATAL_ERROR "${POLICY} on ${NP} ranks: ${key} ${got}, the one-process reference's ${want}")
  endif()
endforeach()
string(JSON sha GET "${ranks}" weights_sha256)
message(STATUS "${POLICY}, mpirun -np ${NP}: weights ${sha} and losses as --in-memory")

math(EXPR wrong "${NP} + 1")
file(MAKE_DIRECTORY ${WORK}/wrong)
execute_process(COMMAND ${MPIEXEC} -np ${wrong} --oversubscribe ${TIERFLOW} run ${SCENARIO} ${sets} -n 1 --data ${CORPUS}
                        --disk-root ${WORK}/wrong
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
string(REGEX MATCHALL "tierflow run: error: [^\n]*" errors "${err}")
list(LENGTH errors count)
if(rc EQUAL 0 OR NOT count EQUAL 1 OR NOT errors MATCHES "trains on ${NP} ranks \\(training.data_parallel\\), but mpirun started ${wrong} processes: run it with mpirun -np ${NP}")
  message(FATAL_ERROR "mpirun -np ${wrong} of a ${NP}-rank schedule: exit ${rc}, ${count} error lines: ${err}")
endif()
file(GLOB written ${WORK}/wrong/*)
if(written)
  message(FATAL_ERROR "mpirun -np ${wrong} wrote ${written} before refusing")
endif()
