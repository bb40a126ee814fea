# The CPU back-end's GEMM (cpu_gemm.h) against Eigen's on the linear layers' shapes of tiny and
# small-cpu (docs/training-math.md). Eigen's side is compiled for AVX2 + FMA where the compiler
# can (run only on CPUs that have them); without Eigen the bench measures tierflow's alone.
include(CheckCXXCompilerFlag)
check_cxx_compiler_flag("-mavx2 -mfma" TIERFLOW_CXX_HAS_AVX2_FMA)
if(TARGET Eigen3::Eigen AND TIERFLOW_CXX_HAS_AVX2_FMA)
  tierflow_bench(gemm_bench SOURCES gemm_bench.cc gemm_bench_eigen.cc LIBS tierflow_compute_cpu Eigen3::Eigen)
  target_compile_definitions(gemm_bench PRIVATE TIERFLOW_BENCH_EIGEN=1)
  set_source_files_properties(gemm_bench_eigen.cc PROPERTIES COMPILE_OPTIONS "-O3;-mavx2;-mfma;-DNDEBUG")
else()
  tierflow_bench(gemm_bench SOURCES gemm_bench.cc LIBS tierflow_compute_cpu)
endif()
