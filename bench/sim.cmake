# sim_bench: simulated task instances per second of the SimGrid executor (docs/simulator.md).
if(TIERFLOW_HAVE_SIMGRID)
  tierflow_bench(sim_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/sim_bench.cc LIBS tierflow_sim tierflow_policies)
endif()
