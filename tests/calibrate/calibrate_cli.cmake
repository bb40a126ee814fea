# `tierflow calibrate` end to end: a refused fit writes nothing; a synthetic probe trace gives a
# profile that `tierflow hardware --file` accepts, carrying the fitted numbers.
#   -DTIERFLOW=... -DDATA=tests/calibrate/data -DWORK=<scratch dir>
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(run expected_rc)
  execute_process(COMMAND ${TIERFLOW} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT "${rc}" STREQUAL "${expected_rc}")
    message(FATAL_ERROR "tierflow ${ARGN}: exit code ${rc}, expected ${expected_rc}\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
endfunction()

# Three fio jobs are too few for any disk fit: refused, and no profile written.
run(1 calibrate ${DATA}/fio_read_write_mix.json -o ${WORK}/refused.yaml)
if(EXISTS ${WORK}/refused.yaml)
  message(FATAL_ERROR "a refused calibration wrote ${WORK}/refused.yaml")
endif()
if(NOT "${err}" MATCHES "3 fits refused, nothing written.*nvme0.read: too few samples")
  message(FATAL_ERROR "unexpected error:\n${err}")
endif()

# --allow-refused writes the base's values for them.
run(0 calibrate ${DATA}/fio_read_write_mix.json -o ${WORK}/allowed.yaml --allow-refused)
run(0 hardware --file ${WORK}/allowed.yaml)

# The synthetic probe trace (make_synthetic_probe.py: read_bw 1.5 GB/s, h2d 6 GB/s) calibrates
# cleanly; the profile loads and shows the fitted numbers.
run(0 calibrate ${DATA}/synthetic_probe.jsonl -o ${WORK}/profile.yaml)
if(NOT "${out}" MATCHES "nvme0.read +fitted +read_bw 1.[45][0-9] GB/s")
  message(FATAL_ERROR "unexpected table:\n${out}")
endif()
file(READ ${WORK}/profile.yaml profile)
if(NOT "${profile}" MATCHES "^# tierflow calibrate: 72 trace records")
  message(FATAL_ERROR "the profile does not open with the fit summary:\n${profile}")
endif()
run(0 hardware --file ${WORK}/profile.yaml)
if(NOT "${out}" MATCHES "source: tierflow calibrate from 72 trace records")
  message(FATAL_ERROR "hardware --file does not show the calibrated source:\n${out}")
endif()
if(NOT "${out}" MATCHES "h2d 5.9[0-9] GB/s|h2d 6.0[0-9] GB/s")
  message(FATAL_ERROR "hardware --file does not show the fitted h2d bandwidth:\n${out}")
endif()
# A directory input reads every *.jsonl in it (here: the one trace).
file(COPY ${DATA}/synthetic_probe.jsonl DESTINATION ${WORK}/traces)
run(0 calibrate ${WORK}/traces --json)
if(NOT "${out}" MATCHES "\"records\": 72")
  message(FATAL_ERROR "directory input:\n${out}")
endif()
