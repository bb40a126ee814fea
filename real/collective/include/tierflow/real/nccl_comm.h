// The NCCL collective back-end (DESIGN.md real/collective): a communicator over GPUs with
// all-gather, reduce-scatter and all-reduce (sum) on a dedicated stream, the schedule's
// gpuN.coll resource. One rank on one GPU works (NCCL then copies within the GPU), which is what
// a single-GPU run's collective tasks do.
//
// Built when CMake finds NCCL with the CUDA toolkit (TIERFLOW_HAVE_NCCL). Errors name the NCCL
// call and NCCL's text for the error. Counts are elements per rank. NCCL's own reductions sum in
// an order of its choosing; the executor's collectives go through OpenNcclCollective
// (collective.h), which reduces in rank order.
//
// Thread safety: one thread at a time per communicator; collectives of one communicator run in
// the order they are called, on its stream, and must be called in the same order on every rank.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "tierflow/core/status.h"
#include "tierflow/real/cuda_compute.h"

namespace tierflow::real::nccl {

enum class DType { kFloat32, kBf16 };

// The 128 bytes of an ncclUniqueId: made by rank 0, passed to the others out of band (MPI, a file).
using UniqueId = std::array<char, 128>;
StatusOr<UniqueId> NewUniqueId();

class Communicator {
 public:
  // A communicator of one rank on the context's GPU.
  static StatusOr<std::unique_ptr<Communicator>> OpenSingle(const cuda::Context& ctx);
  // Rank `rank` of `ranks`, each process on its own GPU (the context's), joined by `id`.
  static StatusOr<std::unique_ptr<Communicator>> Join(const cuda::Context& ctx, const UniqueId& id, int ranks, int rank);
  // The same on CUDA device `device`, without a context (the calling thread's device becomes it).
  static StatusOr<std::unique_ptr<Communicator>> Join(int device, const UniqueId& id, int ranks, int rank);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  void* stream() const { return stream_; }  // cudaStream_t

  // recv[r * count + i] = rank r's send[i]; recv holds ranks * count elements.
  Status AllGather(const void* send, void* recv, int64_t count, DType type);
  // recv[i] = sum over ranks of send[rank * count + i]; send holds ranks * count elements.
  Status ReduceScatter(const void* send, void* recv, int64_t count, DType type);
  // recv[i] = sum over ranks of send[i]; recv may be send.
  Status AllReduce(const void* send, void* recv, int64_t count, DType type);
  // recv[r * count + i] = rank r's send[rank * count + i]: every rank's block for this one, in
  // rank order (grouped ncclSend and ncclRecv; send and recv must not overlap).
  Status AllToAll(const void* send, void* recv, int64_t count, DType type);
  // Rank `root`'s `bytes` at buf into every rank's buf.
  Status Broadcast(void* buf, int64_t bytes, int root);
  // ncclSuccess, or the error NCCL found on its own after a call returned (a peer gone, a
  // network failure), naming `call`.
  Status AsyncError(const char* call) const;
  // After an error: ends the communicator at once (ncclCommAbort), so that NCCL's kernels stop
  // and nothing waits on them; every later call fails. broken() says so.
  void Abort();
  bool broken() const { return comm_ == nullptr; }
  Status Synchronize() const;
  int device() const { return device_; }  // the CUDA device index

 private:
  Communicator() = default;
  static StatusOr<std::unique_ptr<Communicator>> Init(int device, const UniqueId& id, int ranks, int rank);
  void* comm_ = nullptr;    // ncclComm_t
  void* stream_ = nullptr;  // cudaStream_t
  int ranks_ = 1, rank_ = 0, device_ = 0;
};

}  // namespace tierflow::real::nccl
