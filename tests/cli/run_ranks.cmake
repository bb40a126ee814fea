# Several ranks for real: `mpirun -np NP tierflow run` of the tiny scenario at training.data_parallel
# NP under POLICY trains to the weights and losses of the one-process reference (--in-memory with
# the same data_parallel), bit for bit; and mpirun with another process count is one error, from
# rank 0, before anything is written.
# With -DSIM=ON the run's records (every rank's, gathered by rank 0) line up with sim's of the same
# schedule, every record of every rank matched; with -DDEATH=ON a rank that dies mid-run stops the
# others: mpirun ends, naming it, instead of hanging. The report covers every rank (its I/O the
# ranks' sum). With -DCKPT=ON the ranks checkpoint after every iteration into one checkpoint, rank
# 1 dies (as kill -9 leaves it) once it has written its part of the second, before the commit, and
# the run resumed from the first ends at the reference's weights; a plain loop of the ranks
# (--plain-loop) does too, and so does the model with tied embeddings (against its own reference).
#   -DTIERFLOW=... -DMPIEXEC=... -DSCENARIO=... -DCORPUS=... -DPOLICY=... -DNP=... -DWORK=dir [-DSIM=ON] [-DDEATH=ON] [-DCKPT=ON]
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
                        --disk-root ${WORK}/disks --records ${WORK}/real.jsonl --json
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
# The node-wide locks of the queues the ranks share (mlp-offload's tier locks) leave no file.
file(GLOB_RECURSE lock_files ${WORK}/disks/*/.tierflow-lock.*)
if(lock_files)
  message(FATAL_ERROR "${POLICY} on ${NP} ranks left its node-wide lock files: ${lock_files}")
endif()
# The report covers every rank: an entry each, the run's I/O their sum.
string(JSON count LENGTH "${ranks}" ranks)
if(NOT count EQUAL NP)
  message(FATAL_ERROR "${POLICY} on ${NP} ranks: the report's ranks has ${count} entries")
endif()
set(sum 0)
math(EXPR last "${NP} - 1")
foreach(q RANGE ${last})
  string(JSON direct GET "${ranks}" ranks ${q} direct_io_bytes)
  string(JSON buffered GET "${ranks}" ranks ${q} buffered_io_bytes)
  math(EXPR sum "${sum} + ${direct} + ${buffered}")
endforeach()
string(JSON direct GET "${ranks}" direct_io_bytes)
string(JSON buffered GET "${ranks}" buffered_io_bytes)
math(EXPR total "${direct} + ${buffered}")
if(NOT sum EQUAL total)
  message(FATAL_ERROR "${POLICY} on ${NP} ranks: the ranks' I/O adds up to ${sum} bytes, the report's is ${total}")
endif()
message(STATUS "${POLICY}, mpirun -np ${NP}: the report's ${total} bytes of I/O are its ${NP} ranks'")

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

if(CKPT)
  # mpirun -np NP of the scenario for 3 iterations with ARGN, its --json report into OUT; a failure
  # stops the test naming WHAT.
  function(ranks_json out what)
    execute_process(COMMAND ${MPIEXEC} -np ${NP} --oversubscribe ${TIERFLOW} run ${SCENARIO} ${ARGN} -n 3 --threads 1 --data ${CORPUS} --json
                    RESULT_VARIABLE rc OUTPUT_VARIABLE json ERROR_VARIABLE err TIMEOUT 300)
    if(rc)
      message(FATAL_ERROR "${what} of ${NP} ranks failed (${rc}): ${json}${err}")
    endif()
    set(${out} "${json}" PARENT_SCOPE)
  endfunction()
  set(ckpt --checkpoint ${WORK}/ckpt --checkpoint-every 1)
  file(MAKE_DIRECTORY ${WORK}/ckpt-disks)
  execute_process(COMMAND ${MPIEXEC} -np ${NP} --oversubscribe ${TIERFLOW} run ${SCENARIO} ${sets} -n 3 --threads 1 --data ${CORPUS}
                          --disk-root ${WORK}/ckpt-disks ${ckpt} --exit-in-checkpoint 2 --exit-rank 1
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
  if(rc EQUAL 0 OR rc MATCHES "timeout")
    message(FATAL_ERROR "rank 1 was to die in the second checkpoint: mpirun ended with ${rc}: ${out}${err}")
  endif()
  file(GLOB manifests ${WORK}/ckpt/*.manifest.json)
  list(LENGTH manifests count)
  file(READ ${WORK}/ckpt/tierflow-run.manifest.json manifest)
  string(JSON tensors LENGTH "${manifest}" tensors)
  math(EXPR want "${NP} * 4")  # master, adam_m, adam_v and meta of every rank
  if(NOT count EQUAL 1 OR NOT tensors EQUAL want)
    message(FATAL_ERROR "after rank 1 died in the second checkpoint: ${count} manifests, ${tensors} tensors (want 1, ${want}): ${manifest}")
  endif()
  ranks_json(resumed "the resumed run" ${sets} --disk-root ${WORK}/ckpt-disks ${ckpt} --resume)
  string(JSON first GET "${resumed}" first_iteration)
  string(JSON got GET "${resumed}" weights_sha256)
  string(JSON want GET "${reference}" weights_sha256)
  if(NOT first EQUAL 1 OR NOT got STREQUAL want)
    message(FATAL_ERROR "resumed at iteration ${first} (want 1, the last committed checkpoint's) with weights ${got}, the reference's ${want}")
  endif()
  message(STATUS "${POLICY}, ${NP} ranks: rank 1 died in a checkpoint; resumed from the one before, weights as --in-memory")
  ranks_json(plain "--plain-loop" ${sets} --disk-root ${WORK}/ckpt-disks --plain-loop)
  string(JSON got GET "${plain}" weights_sha256)
  if(NOT got STREQUAL want)
    message(FATAL_ERROR "--plain-loop of ${NP} ranks: weights ${got}, the reference's ${want}")
  endif()
  message(STATUS "${POLICY}, ${NP} ranks: --plain-loop's weights as --in-memory")
  set(tied ${sets} --set model.tied_embeddings=true)
  execute_process(COMMAND ${TIERFLOW} run ${SCENARIO} ${tied} -n 3 --in-memory --threads 1 --data ${CORPUS} --json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE tied_reference ERROR_VARIABLE err)
  if(rc)
    message(FATAL_ERROR "--in-memory of the tied model failed: ${tied_reference}${err}")
  endif()
  file(REMOVE_RECURSE ${WORK}/ckpt-disks)
  file(MAKE_DIRECTORY ${WORK}/ckpt-disks)
  ranks_json(tied_run "the tied model" ${tied} --disk-root ${WORK}/ckpt-disks)
  string(JSON want GET "${tied_reference}" weights_sha256)
  string(JSON got GET "${tied_run}" weights_sha256)
  string(JSON untied GET "${reference}" weights_sha256)
  if(NOT got STREQUAL want OR want STREQUAL untied)
    message(FATAL_ERROR "tied embeddings on ${NP} ranks: weights ${got}, the tied reference's ${want} (the untied one's ${untied})")
  endif()
  message(STATUS "${POLICY}, ${NP} ranks: tied embeddings, weights as --in-memory")
endif()

if(SIM)
  execute_process(COMMAND ${TIERFLOW} sim ${SCENARIO} ${sets} -n 3 --records ${WORK}/sim.jsonl
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc)
    message(FATAL_ERROR "sim failed: ${out}${err}")
  endif()
  execute_process(COMMAND ${TIERFLOW} trace compare ${WORK}/real.jsonl ${WORK}/sim.jsonl --json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE compared ERROR_VARIABLE err)
  if(rc)
    message(FATAL_ERROR "trace compare failed: ${compared}${err}")
  endif()
  file(STRINGS ${WORK}/real.jsonl real_lines)
  list(LENGTH real_lines real_count)
  file(STRINGS ${WORK}/real.jsonl rank1_lines REGEX "\"rank\":1[,}]")
  list(LENGTH rank1_lines rank1_count)
  string(JSON matched GET "${compared}" matched)
  string(JSON a_unmatched GET "${compared}" a_unmatched)
  string(JSON b_unmatched GET "${compared}" b_unmatched)
  if(rank1_count EQUAL 0 OR NOT matched EQUAL real_count OR NOT a_unmatched EQUAL 0 OR NOT b_unmatched EQUAL 0)
    message(FATAL_ERROR "${real_count} real records (${rank1_count} of rank 1): ${matched} matched with sim's, ${a_unmatched} and ${b_unmatched} unmatched")
  endif()
  message(STATUS "${real_count} records of ${NP} ranks, every one matched with sim's")
endif()

if(DEATH)
  file(MAKE_DIRECTORY ${WORK}/death)
  execute_process(COMMAND ${MPIEXEC} -np ${NP} --oversubscribe ${TIERFLOW} run ${SCENARIO} ${sets} -n 50 --threads 1 --data ${CORPUS}
                          --disk-root ${WORK}/death --exit-after-tasks 400 --exit-rank 1
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
  # Open MPI names the process that exited as [[job,1],rank].
  if(rc EQUAL 0 OR rc MATCHES "timeout" OR NOT "${out}${err}" MATCHES "(rank 1|\\[\\[[0-9]+,[0-9]+\\],1\\])")
    message(FATAL_ERROR "rank 1 exited mid-run: mpirun ended with ${rc}: ${out}${err}")
  endif()
  if("${out}" MATCHES "iteration   49")
    message(FATAL_ERROR "rank 0 trained to the end without rank 1: ${out}")
  endif()
  message(STATUS "rank 1 died mid-run: mpirun stopped the job (${rc})")
  # A rank whose run fails (an I/O error) says so, naming itself, and stops the others.
  file(REMOVE_RECURSE ${WORK}/death)
  file(MAKE_DIRECTORY ${WORK}/death)
  execute_process(COMMAND ${MPIEXEC} -np ${NP} --oversubscribe ${TIERFLOW} run ${SCENARIO} ${sets} -n 50 --threads 1 --data ${CORPUS}
                          --disk-root ${WORK}/death --fail-io-after 300 --exit-rank 1
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
  if(rc EQUAL 0 OR rc MATCHES "timeout" OR NOT err MATCHES "tierflow run: error: rank 1 of ${NP}: [^\n]*I/O error")
    message(FATAL_ERROR "rank 1's I/O failed mid-run: mpirun ended with ${rc}: ${out}${err}")
  endif()
  message(STATUS "rank 1's I/O failed mid-run: it said so and the job stopped (${rc})")
endif()
