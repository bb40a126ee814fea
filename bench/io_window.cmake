# The executor's request shaping (real::IoWindow: block_bytes pieces, queue_depth in flight) on
# io_uring against fio at the same block size and iodepth (io_window_bench). Needs fio; --dir=D.
if(TARGET tierflow_exec)
  tierflow_bench(io_window_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/io_window_bench.cc
                 LIBS tierflow_exec nlohmann_json::nlohmann_json)
endif()
