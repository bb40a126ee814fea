# DeepSpeed configs in and out, as a user types them:
#  1. the DeepSpeed config equivalent to the quickstart imports to a scenario that simulates to the
#     quickstart's iteration time;
#  2. a zero-infinity schedule with its knobs off their defaults exports to a DeepSpeed config that
#     imports back to the schedule's prediction.
# -DTIERFLOW=... -DSRC=source dir -DWORK=dir
file(MAKE_DIRECTORY ${WORK})
function(run)
  execute_process(COMMAND ${TIERFLOW} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc)
    message(FATAL_ERROR "tierflow ${ARGN} failed (${rc}):\n${out}${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
function(iteration_s input result)
  run(sim ${input} -n 2 --json)
  string(JSON it GET "${out}" iteration_s)
  set(${result} ${it} PARENT_SCOPE)
endfunction()
# The two predictions come from the same plan, so they are equal to the last bit (the bound the
# issue asks, a relative difference below 1e-6, with room to spare).
function(expect_equal what a b)
  if(NOT "${a}" STREQUAL "${b}")
    message(FATAL_ERROR "${what}: ${a} s against ${b} s")
  endif()
  message(STATUS "${what}: ${a} s = ${b} s")
endfunction()

run(deepspeed import ${SRC}/tests/cli/data/deepspeed/quickstart.ds_config.json --model llama2-70b --hardware a100x4-1nvme
    --set training.sequence_length=4096 -o ${WORK}/imported/quickstart.yaml)
iteration_s(${SRC}/scenarios/quickstart.yaml quickstart)
iteration_s(${WORK}/imported/quickstart.yaml imported)
expect_equal("the quickstart's DeepSpeed config imported" ${quickstart} ${imported})

run(plan ${SRC}/tests/cli/data/small.yaml --set policy.buffer_count=7 --set policy.sub_group_size=3e7 --set "policy.block_size=2 MiB"
    --set policy.queue_depth=16 --set policy.pipeline_read=false --set training.gradient_clipping=0.5 -o ${WORK}/tuned.json)
run(deepspeed export ${WORK}/tuned.json -o ${WORK}/exported/ds_config.json)
run(deepspeed import ${WORK}/exported/ds_config.json --model llama2-7b --hardware a100x4-1nvme --set model.layers=4
    --set training.sequence_length=1024 -o ${WORK}/back.yaml)
iteration_s(${WORK}/tuned.json tuned)
iteration_s(${WORK}/back.yaml back)
expect_equal("a zero-infinity schedule exported and imported back" ${tuned} ${back})
