# CPU AdamW against a STREAM-like triad on the same machine and threads (docs/training-math.md).
# Built with the kernels' flags so that the triad is compiled as well as the optimizer.
tierflow_bench(adam_bench SOURCES adam_bench.cc LIBS tierflow_train)
target_compile_options(adam_bench PRIVATE -O3 -fno-math-errno -ffp-contract=off)
