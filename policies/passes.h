// The training passes (blocks.h): every micro-step's forward and backward over the layers, the
// units fetched for them, and each unit's reduced gradients on their path off the GPU.
#pragma once

#include "fetch.h"

namespace tierflow::policies {

// Where a unit's reduced gradient partition goes after its backward.
enum class GradientPath {
  kFlushToNvme,  // DeepSpeed: fp32 partition d2h into a pinned staging buffer, async write
  kKeepInHost,   // MLP-Offload, HiTrain, Fuyou: bf16 partition d2h into a persistent host buffer
};
// With gradient accumulation (micro-steps > 1), a tied embedding, or
// PassOptions::grad_partition_buffer, every micro-step's d2h adds its bf16 partition into a
// persistent host buffer of the rank's whole partition (DeepSpeed's grad_partitions_flat_buffer,
// bf16 for a bf16 model), the first micro-step's d2h overwriting it: kKeepInHost's buffer, or for
// kFlushToNvme one of its own ("grad.accum.r{r}", in pool "host.pinned.grad_accum.r{r}").
// kFlushToNvme then flushes once, after the last micro-step: per unit a bf16_to_fp32 convert into
// a pinned staging buffer and the write (DeepSpeed's .float() and swap_out_gradients at the
// accumulation boundary).

// Forward and backward of every micro-step: fetch (FetchUnits), compute per rank, and in
// backward the reduce-scatter and the gradient path.
struct PassOptions {
  FetchOptions fetch;                 // phase, tag and priority_base are set per pass
  GradientPath gradient_path = GradientPath::kFlushToNvme;
  std::vector<int32_t> grad_pool;     // per rank: pinned staging (flush) or the host buffer's pool
  std::vector<int32_t> grad_write_resource;  // per rank (flush)
  PlacedResource grad_write_resource_of;     // multi-disk placement (flush), by unit
  int64_t block_bytes = 0;
  int32_t queue_depth = 0;
  int32_t cpu_threads = 1;            // per rank: threads of the flush's bf16_to_fp32 converts
  // The first all-gather of a pass waits for the last one of the previous pass, so that one
  // pass's gathers never take the memory an earlier pass still needs (needed when gathers are
  // bounded by memory rather than by reads: parameters on the GPU, a GPU prefetch window).
  bool chain_passes = false;
  // kFlushToNvme, per unit (empty = none): the fp32 gradient partition stays in host memory,
  // copied by its d2h into host_grad_buffer[rank], the rank's persistent flat fp32 buffer, and
  // never written (DeepSpeed keeps a gradient below its swap minimum, and every gradient of a
  // sub-group whose states it does not swap, in memory).
  std::vector<bool> grad_in_host;
  std::vector<int32_t> host_grad_buffer;  // per rank
  // Gradients reduced in buckets (DeepSpeed's reduce_bucket_size, elements): a unit's gradient
  // joins the bucket once its layer's backward has run; when it would take the bucket past this
  // size, the bucket's reduce-scatters, d2h copies and writes are issued first (after the
  // backward computed so far), and whatever is left is issued after the pass's last layer
  // (DeepSpeed's independent_gradient_partition_epilogue). The layers' GPU gradients stay
  // allocated until their bucket is issued. 0: each layer's gradients are issued after its own
  // backward.
  int64_t reduce_bucket_elements = 0;
  // kFlushToNvme: the gradients pass through the rank's persistent bf16 partition buffer (above)
  // at one micro-step too. DeepSpeed's stage 3 allocates grad_partitions_flat_buffer whenever
  // the optimizer is offloaded and partition_grads copies every reduced partition into it
  // before converting it to fp32 for swap_out_gradients (_offload_grad_partition_at_boundary),
  // so it holds 2 bytes per element of host memory for good.
  bool grad_partition_buffer = false;
  // With grad_partition_buffer: the epilogue of each reduce bucket in DeepSpeed's order
  // (partition_grads, called by a gradient hook on one thread). All of the bucket's
  // reduce-scatters first; then, unit by unit, one after the other, the d2h into the partition
  // buffer (and, with device_memory_is_host, the widening to fp32 into a buffer of its own);
  // only after the last of them the swap-out, unit by unit: the fp32 gradient into the pinned
  // staging, then its write. The next bucket's reduce-scatter, and the rank's next compute (the
  // backward's, or the next micro-step's forward), wait for this epilogue's last task.
  bool deepspeed_epilogue = false;
  // Where DeepSpeed's widened fp32 gradients (`.to(fp32)` of the partition, device memory) are:
  // on an emulated GPU (hardware gpu.shares_host_cores) host memory, and the widening and the
  // swap-out's copy are CPU work, which the loop's `bf16_to_fp32` into pool host.grad32.r{r} (as
  // large as the largest bucket's partition) and the swap-out's `copy` are. On a GPU they are GPU
  // memory and work, for which the plan has no op: the swap-out widens each partition from the
  // partition buffer straight into the staging (in place of DeepSpeed's 4-byte d2h of it).
  bool device_memory_is_host = false;
  // DeepSpeed's stage3_max_live_parameters (elements, 0 = no limit): a unit is gathered (its
  // GPU admission: the h2d, or the all-gather of a partition kept on the GPU) only once the
  // units gathered before it, in fetch order over the iteration's passes and not yet freed, and
  // it hold at most this many elements together: the admission waits for the compute that frees
  // enough of them. The units of the layer being computed are exempt (DeepSpeed fetches the
  // current module whatever the count, and limits only its prefetch).
  int64_t max_live_elements = 0;
  // Per unit (empty = none): the forward keeps the unit gathered for the backward, whose compute
  // frees it, and the backward does not fetch it again (zero-infinity: DeepSpeed's reuse
  // distance). Such units count as live parameters (max_live_elements) all the while.
  // GPU-resident units are never fetched and ignore it.
  std::vector<bool> kept_for_backward;
};

struct PassResult {
  std::vector<int32_t> reads;                      // every parameter read, all passes
  std::vector<std::pair<int32_t, int32_t>> read_rank_unit;  // per read: (rank, unit)
  size_t first_forward_reads = 0;                  // reads[0 .. this) belong to the first forward pass
  std::vector<int32_t> gathers;                    // every all-gather, all passes
  std::vector<int32_t> last_compute;               // per rank
  std::vector<std::vector<int32_t>> grad_copies;   // per rank: every gradient d2h
  std::vector<std::vector<int32_t>> grad_writes;   // per rank: every gradient write (flush)
  // [rank][unit]: the task after which the unit's gradient of the last micro-step is final in
  // host memory (the d2h) or on disk (the write); kNoIndex for GPU-resident units.
  std::vector<std::vector<int32_t>> grad_ready;
  std::vector<int32_t> host_grad_buffer;           // per rank (kKeepInHost), persistent
  // Computes of GPU-resident units: their parameters are refreshed by the previous iteration's
  // update, so each must carry a dep on it (as parameter reads do).
  std::vector<int32_t> resident_computes;
  // The h2d copies of partitions kept in host memory (FetchOptions::in_host), which the previous
  // iteration's update rewrites in place: each must carry a dep on it too.
  std::vector<int32_t> host_fetches;
};

PassResult TrainingPasses(ScheduleBuilder& b, const ModelPlan& plan, const PassOptions& o);

}  // namespace tierflow::policies
