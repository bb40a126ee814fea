# The simulator's prediction of the offloaded Llama-3.2-1B run measured on an H200
# (docs/gpu-results.md): the scenario planned as the run was, for the machine's 16 cores, simulated
# on the calibration of that machine's probes, against the run's trace records: the steady-state
# iteration within 10 % (measured +0.4 %; trace compare's error is (run − sim) / sim); the disk's
# reads and writes, which bound it, each within 10 % in sum (−4.3 and −5.3 %); Adam and the
# conversions within 50 % (+17 and −24 %: a schedule whose CPU threads are not the run's puts them
# at −75 and −90 %, docs/executor.md "The CPU threads").  -DDATA=data/gpu/<run> -DSCENARIO=scenarios/tiny-cpu.yaml -DWORK=dir
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
file(ARCHIVE_EXTRACT INPUT ${DATA}/finetune-1b.records.tar.gz DESTINATION ${WORK})
execute_process(COMMAND ${TIERFLOW} plan ${SCENARIO} --set model.preset=llama3.2-1b --set model.tied_embeddings=false
                        --set training.sequence_length=1024 --set policy.buffer_size=300000000 --set policy.buffer_count=22
                        --set hardware.node.cpu.cores=16 -o ${WORK}/1b.schedule.json
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "plan failed: ${err}")
endif()
execute_process(COMMAND ${TIERFLOW} sim ${WORK}/1b.schedule.json --profile ${DATA}/profile.yaml -n 3 --records ${WORK}/sim.jsonl
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "sim failed: ${err}")
endif()
execute_process(COMMAND ${TIERFLOW} trace compare ${WORK}/sim.jsonl ${WORK}/finetune-1b.records.jsonl --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "trace compare failed: ${err}")
endif()
string(JSON matched GET "${out}" matched)
string(JSON records GET "${out}" b_records)
string(JSON sim_s GET "${out}" a_mean_iteration_s)
string(JSON real_s GET "${out}" b_mean_iteration_s)
string(JSON error GET "${out}" mean_iteration_rel_error)
# A figure that is not a number (null, absent) would pass every comparison below.
set(number "^-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?$")
if(NOT error MATCHES "${number}")
  message(FATAL_ERROR "mean_iteration_rel_error is not a number: '${error}'")
endif()
if(NOT matched EQUAL records)
  message(FATAL_ERROR "only ${matched} of the run's ${records} records have a simulated task: the plan is not the schedule that ran")
endif()
# CMake compares numbers as floating point: |error| <= 0.10.
if(error GREATER 0.10 OR error LESS -0.10)
  message(FATAL_ERROR "sim ${sim_s} s against the run's ${real_s} s: error ${error}, not within 10 %")
endif()
string(JSON ops LENGTH "${out}" ops)
math(EXPR last "${ops} - 1")
set(checked "")
foreach(i RANGE ${last})
  string(JSON op GET "${out}" ops ${i} op)
  string(JSON e GET "${out}" ops ${i} rel_error)
  if(op STREQUAL "read" OR op STREQUAL "write")
    set(bound 0.10)
  elseif(op STREQUAL "optimizer" OR op STREQUAL "convert")
    set(bound 0.50)
  else()
    continue()
  endif()
  if(NOT e MATCHES "${number}")
    message(FATAL_ERROR "${op}: rel_error is not a number: '${e}'")
  endif()
  if(e GREATER ${bound} OR e LESS -${bound})
    message(FATAL_ERROR "${op}: sim's sum against the run's is off by ${e}, more than ${bound}")
  endif()
  list(APPEND checked "${op} ${e}")
endforeach()
list(LENGTH checked n)
if(NOT n EQUAL 4)
  message(FATAL_ERROR "expected read, write, optimizer and convert among the compared ops; checked: ${checked}")
endif()
message(STATUS "sim ${sim_s} s, run ${real_s} s, error ${error}; ${checked}")
