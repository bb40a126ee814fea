# Storage engine vs fio (storage_bench), checkpoint strategies vs each other and fio's sequential
# write (checkpoint_bench), a Hugging Face directory saved and loaded vs fio (hf_io_bench). All
# need fio on PATH at run time and take --dir=D.
if(TARGET tierflow_real)
  tierflow_bench(storage_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/storage_bench.cc
                 LIBS tierflow_real nlohmann_json::nlohmann_json)
  tierflow_bench(checkpoint_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/checkpoint_bench.cc
                 LIBS tierflow_real nlohmann_json::nlohmann_json)
  tierflow_bench(hf_io_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/hf_io_bench.cc
                 LIBS tierflow_train tierflow_real nlohmann_json::nlohmann_json)
endif()
