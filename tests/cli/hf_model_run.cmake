# A Hugging Face model through tierflow run and back: trained from its directory (--model-dir)
# with its states on a disk, saved every 2 iterations in fp32 (--save-model, --save-every) beside
# its checkpoint, then resumed from the saved directory and the checkpoint: the final weights are
# bit-identical to an uninterrupted run's, as is the loss on the held-out batch (--eval-every),
# and the directory saved at the end is a model (config.json, weights in safetensors).
#   -DTIERFLOW=... -DSCENARIO=... -DCORPUS=... -DHF=family directory -DWORK=dir
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/whole ${WORK}/disk ${WORK}/disk2 ${WORK}/ckpt)
# The families' directories train sequences of 16 (their max_position_embeddings is 64).
set(common run ${SCENARIO} --set training.sequence_length=16 --data ${CORPUS} --eval-every 2)
execute_process(COMMAND ${TIERFLOW} ${common} --model-dir ${HF} -n 4 --disk ${WORK}/whole --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE whole ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "the uninterrupted run failed: ${err}")
endif()
string(JSON want GET "${whole}" weights_sha256)
string(JSON evals LENGTH "${whole}" eval)
string(JSON eval_at GET "${whole}" eval 1 iterations_done)
string(JSON want_eval GET "${whole}" eval 1 loss)
if(NOT evals EQUAL 2 OR NOT eval_at EQUAL 4)
  message(FATAL_ERROR "the uninterrupted run evaluated ${evals} times (want 2, the last after 4 iterations: ${eval_at})")
endif()
execute_process(COMMAND ${TIERFLOW} ${common} --model-dir ${HF} -n 2 --disk ${WORK}/disk --checkpoint ${WORK}/ckpt
                        --checkpoint-every 2 --save-model ${WORK}/saved --save-every 1 --save-dtype fp32 --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE half ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "the first half failed: ${err}")
endif()
string(JSON saved_dtype GET "${half}" saved_model dtype)
file(READ ${WORK}/saved/config.json config)
string(JSON torch_dtype ERROR_VARIABLE no_torch_dtype GET "${config}" torch_dtype)
string(JSON dtype ERROR_VARIABLE no_dtype GET "${config}" dtype)
if(NOT saved_dtype STREQUAL "float32" OR NOT (torch_dtype STREQUAL "float32" OR dtype STREQUAL "float32"))
  message(FATAL_ERROR "the saved model's dtype: report ${saved_dtype}, config.json '${torch_dtype}${dtype}'; expected float32")
endif()
file(GLOB left ${WORK}/saved.tmp-* ${WORK}/saved.old-*)
if(left)
  message(FATAL_ERROR "a save left ${left} behind")
endif()
# The second half: the model and its weights from the saved directory, the optimizer's state and
# the step from the checkpoint.
execute_process(COMMAND ${TIERFLOW} ${common} --model-dir ${WORK}/saved -n 4 --disk ${WORK}/disk2 --checkpoint ${WORK}/ckpt
                        --resume --save-model ${WORK}/final --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE resumed ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "the resumed run failed: ${err}")
endif()
string(JSON first GET "${resumed}" first_iteration)
string(JSON got GET "${resumed}" weights_sha256)
if(NOT first EQUAL 2)
  message(FATAL_ERROR "resumed at iteration ${first}, expected 2")
endif()
if(NOT got STREQUAL want)
  message(FATAL_ERROR "resumed from the saved directory, the weights ${got} differ from the uninterrupted run's ${want}")
endif()
string(JSON got_eval GET "${resumed}" eval 0 loss)
if(NOT got_eval STREQUAL want_eval)
  message(FATAL_ERROR "the held-out loss after 4 iterations: ${got_eval} resumed, ${want_eval} uninterrupted")
endif()
if(NOT EXISTS ${WORK}/final/config.json OR NOT EXISTS ${WORK}/final/model.safetensors)
  message(FATAL_ERROR "the final save has no config.json or model.safetensors")
endif()
message(STATUS "resumed from the saved directory at iteration ${first}; weights sha256 ${got} and held-out loss ${got_eval} as uninterrupted")
