#include "tierflow/real/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "tierflow/real/cuda_status.h"

namespace tierflow::real::nccl {
namespace {

Status NcclError(ncclResult_t r, const std::string& call) {
  return Internal(call + ": " + ncclGetErrorString(r));
}

#define TF_NCCL(call)                                              \
  do {                                                             \
    const ncclResult_t tf_nccl_r = (call);                         \
    if (tf_nccl_r != ncclSuccess) return NcclError(tf_nccl_r, #call); \
  } while (0)

ncclDataType_t NcclType(DType t) { return t == DType::kFloat32 ? ncclFloat32 : ncclBfloat16; }

Status CheckCount(const char* op, int64_t count) {
  if (count < 1) return InvalidArgument(std::string(op) + ": count " + std::to_string(count) + " (must be >= 1)");
  return Status::Ok();
}

Status NotBroken(const void* comm, const char* op) {
  if (comm == nullptr) return FailedPrecondition(std::string(op) + ": the NCCL communicator was aborted after an error");
  return Status::Ok();
}

}  // namespace

StatusOr<UniqueId> NewUniqueId() {
  static_assert(sizeof(ncclUniqueId) == sizeof(UniqueId));
  ncclUniqueId id;
  TF_NCCL(ncclGetUniqueId(&id));
  UniqueId out;
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

StatusOr<std::unique_ptr<Communicator>> Communicator::Init(int device, const UniqueId& id, int ranks, int rank) {
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    return InvalidArgument("NCCL communicator: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  }
  std::unique_ptr<Communicator> c(new Communicator());
  c->ranks_ = ranks;
  c->rank_ = rank;
  c->device_ = device;
  // NCCL and the stream bind to the calling thread's current device: make it this one.
  TF_CUDA(cudaSetDevice(device));
  // Collectives get a stream of their own (gpuN.coll), so that they overlap compute and copies.
  cudaStream_t stream = nullptr;
  TF_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  c->stream_ = stream;
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), sizeof(nid));
  ncclComm_t comm = nullptr;
  TF_NCCL(ncclCommInitRank(&comm, ranks, nid, rank));
  c->comm_ = comm;
  return c;
}

StatusOr<std::unique_ptr<Communicator>> Communicator::OpenSingle(const cuda::Context& ctx) {
  TF_ASSIGN_OR_RETURN(const UniqueId id, NewUniqueId());
  return Init(ctx.device(), id, 1, 0);
}

StatusOr<std::unique_ptr<Communicator>> Communicator::Join(const cuda::Context& ctx, const UniqueId& id, int ranks,
                                                           int rank) {
  return Init(ctx.device(), id, ranks, rank);
}

StatusOr<std::unique_ptr<Communicator>> Communicator::Join(int device, const UniqueId& id, int ranks, int rank) {
  return Init(device, id, ranks, rank);
}

Communicator::~Communicator() {
  if (comm_ != nullptr) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void Communicator::Abort() {
  if (comm_ == nullptr) return;
  ncclCommAbort(static_cast<ncclComm_t>(comm_));
  comm_ = nullptr;
}

Status Communicator::AllGather(const void* send, void* recv, int64_t count, DType type) {
  TF_RETURN_IF_ERROR(CheckCount("all-gather", count));
  TF_RETURN_IF_ERROR(NotBroken(comm_, "all-gather"));
  TF_NCCL(ncclAllGather(send, recv, static_cast<size_t>(count), NcclType(type), static_cast<ncclComm_t>(comm_),
                        static_cast<cudaStream_t>(stream_)));
  return Status::Ok();
}

Status Communicator::ReduceScatter(const void* send, void* recv, int64_t count, DType type) {
  TF_RETURN_IF_ERROR(CheckCount("reduce-scatter", count));
  TF_RETURN_IF_ERROR(NotBroken(comm_, "reduce-scatter"));
  TF_NCCL(ncclReduceScatter(send, recv, static_cast<size_t>(count), NcclType(type), ncclSum,
                            static_cast<ncclComm_t>(comm_), static_cast<cudaStream_t>(stream_)));
  return Status::Ok();
}

Status Communicator::AllReduce(const void* send, void* recv, int64_t count, DType type) {
  TF_RETURN_IF_ERROR(CheckCount("all-reduce", count));
  TF_RETURN_IF_ERROR(NotBroken(comm_, "all-reduce"));
  TF_NCCL(ncclAllReduce(send, recv, static_cast<size_t>(count), NcclType(type), ncclSum, static_cast<ncclComm_t>(comm_),
                        static_cast<cudaStream_t>(stream_)));
  return Status::Ok();
}

Status Communicator::AllToAll(const void* send, void* recv, int64_t count, DType type) {
  TF_RETURN_IF_ERROR(CheckCount("all-to-all", count));
  TF_RETURN_IF_ERROR(NotBroken(comm_, "all-to-all"));
  const auto comm = static_cast<ncclComm_t>(comm_);
  const auto stream = static_cast<cudaStream_t>(stream_);
  const size_t bytes = static_cast<size_t>(count) * (type == DType::kFloat32 ? 4 : 2);
  TF_NCCL(ncclGroupStart());
  for (int r = 0; r < ranks_; ++r) {
    const ncclResult_t s = ncclSend(static_cast<const char*>(send) + r * bytes, static_cast<size_t>(count), NcclType(type), r, comm, stream);
    const ncclResult_t v = s != ncclSuccess ? s : ncclRecv(static_cast<char*>(recv) + r * bytes, static_cast<size_t>(count), NcclType(type), r, comm, stream);
    if (v != ncclSuccess) {
      (void)ncclGroupEnd();
      return NcclError(v, s != ncclSuccess ? "ncclSend" : "ncclRecv");
    }
  }
  TF_NCCL(ncclGroupEnd());
  return Status::Ok();
}

Status Communicator::Broadcast(void* buf, int64_t bytes, int root) {
  TF_RETURN_IF_ERROR(CheckCount("broadcast", bytes));
  TF_RETURN_IF_ERROR(NotBroken(comm_, "broadcast"));
  if (root < 0 || root >= ranks_) return InvalidArgument("broadcast: root " + std::to_string(root) + " of " + std::to_string(ranks_) + " ranks");
  TF_NCCL(ncclBroadcast(buf, buf, static_cast<size_t>(bytes), ncclUint8, root, static_cast<ncclComm_t>(comm_), static_cast<cudaStream_t>(stream_)));
  return Status::Ok();
}

Status Communicator::AsyncError(const char* call) const {
  TF_RETURN_IF_ERROR(NotBroken(comm_, call));
  ncclResult_t async = ncclSuccess;
  TF_NCCL(ncclCommGetAsyncError(static_cast<ncclComm_t>(comm_), &async));
  if (async != ncclSuccess) return NcclError(async, call);
  return Status::Ok();
}

Status Communicator::Synchronize() const {
  TF_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return Status::Ok();
}

}  // namespace tierflow::real::nccl
