// The nccl back-end of collective.h: ranks each on a GPU of its own, buffers in GPU memory. NCCL
// only moves bytes (ncclAllGather, grouped ncclSend/ncclRecv, ncclBroadcast); every sum is formed
// by cuda::SumRanksInOrder, in rank order in fp32 and rounded once, after the parts have come —
// as the mpi back-end forms it on the host, so that a run on GPUs gives the local back-end's bits
// whatever NCCL's algorithm, ring or tree. A reduce-scatter moves what a ring's does (each rank
// receives every rank's block for it); an all-reduce gathers every rank's vector (ranks x a ring
// all-reduce's bytes), as the mpi back-end does: the schedules' all-reduces are the gradient norm.
//
// "nccl-native" (OpenNcclCollective's nccls_own_sums) calls NCCL's own ncclReduceScatter and
// ncclAllReduce instead, for `probe collective` to measure what the rank order costs.
//
// Everything of one communicator is queued on its stream in issue order: the transfers, then the
// sum reading the scratch they filled. A Pending is an event after its last kernel; waiting polls
// it and NCCL's asynchronous error, and on an error aborts the communicator (NCCL's kernels would
// otherwise wait for the failed peer forever), so a peer that fails is an error here, not a hang.
#include <cuda_runtime_api.h>

#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tierflow/real/collective.h"
#include "tierflow/real/cuda_ops.h"
#include "tierflow/real/cuda_status.h"
#include "tierflow/real/nccl_comm.h"

namespace tierflow::real {
namespace {

nccl::DType DTypeOf(ElementType t) { return t == ElementType::kFloat32 ? nccl::DType::kFloat32 : nccl::DType::kBf16; }

Status CheckCount(const char* op, int64_t count) {
  if (count < 1) return InvalidArgument(std::string(op) + ": count " + std::to_string(count) + " (must be >= 1)");
  return Status::Ok();
}

// Waits for `event` on `comm`'s stream, watching NCCL's asynchronous error: a failed peer makes
// NCCL's kernels wait forever, so on an error the communicator is aborted (which ends them) and
// the error returned. For its first 100 us it yields between polls (a sleep's timer slack, tens of
// microseconds, would be added to every short collective); then it sleeps 50 us between them, so
// that a long one does not hold a core the CPU's optimizer threads could use.
Status WaitFor(nccl::Communicator& comm, cudaEvent_t event, const char* call) {
  TF_CUDA(cudaSetDevice(comm.device()));
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(100);
  cudaError_t e;
  while ((e = cudaEventQuery(event)) == cudaErrorNotReady) {
    if (Status async = comm.AsyncError(call); !async.ok()) {
      comm.Abort();
      return async;
    }
    if (std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  if (e != cudaSuccess) return cuda::CudaError(e, std::string("waiting for ") + call);
  return comm.AsyncError(call);
}

// An operation queued on the communicator's stream, done when the event after it is. It must be
// waited for (or dropped) while its collective lives, as every caller does.
class NcclPending : public Pending {
 public:
  NcclPending(nccl::Communicator& comm, cudaEvent_t event, const char* call) : comm_(comm), event_(event), call_(call) {}
  // Dropped without Wait: the transfers still finish before the buffers they name may go.
  ~NcclPending() override { (void)Wait(); }
  Status Wait() override {
    if (event_ == nullptr) return Status::Ok();
    const Status st = WaitFor(comm_, event_, call_);
    cudaEventDestroy(event_);  // after an abort its work never ends; destroying it does not wait
    event_ = nullptr;
    return st;
  }

 private:
  nccl::Communicator& comm_;
  cudaEvent_t event_;
  const char* call_;
};

class NcclCollective : public Collective {
 public:
  NcclCollective(std::unique_ptr<nccl::Communicator> comm, int on_host, int local_rank, bool nccls_own_sums)
      : comm_(std::move(comm)), on_host_(on_host), local_rank_(local_rank), native_(nccls_own_sums) {}
  ~NcclCollective() override {
    (void)cudaSetDevice(comm_->device());
    if (!comm_->broken()) (void)comm_->Synchronize();  // an aborted one's work never ends
    if (scratch_ != nullptr) cudaFree(scratch_);
  }
  // This rank cannot go on: NCCL's work in flight is ended, so that nothing waits on it.
  void Abort(int /*code*/) override { comm_->Abort(); }
  std::string_view backend() const override { return native_ ? "nccl-native" : "nccl"; }
  int device() const { return comm_->device(); }
  int ranks() const override { return comm_->ranks(); }
  int rank() const override { return comm_->rank(); }
  int ranks_on_host() const override { return on_host_; }
  int local_rank() const override { return local_rank_; }
  bool device_memory() const override { return true; }

  StatusOr<std::unique_ptr<Pending>> AllGather(const void* send, void* recv, int64_t count, ElementType type) override {
    TF_RETURN_IF_ERROR(Current());
    TF_RETURN_IF_ERROR(comm_->AllGather(send, recv, count, DTypeOf(type)));
    return Record("ncclAllGather");
  }

  // Every rank's block for this one into the scratch (an all-to-all), then summed into recv.
  StatusOr<std::unique_ptr<Pending>> ReduceScatter(const void* send, void* recv, int64_t count, ElementType type) override {
    return Reduce({"ReduceScatter", &nccl::Communicator::AllToAll, "ncclSend/ncclRecv", &nccl::Communicator::ReduceScatter, "ncclReduceScatter"},
                  send, recv, count, type);
  }

  // Every rank's vector into the scratch (an all-gather), then summed into recv.
  StatusOr<std::unique_ptr<Pending>> AllReduce(const void* send, void* recv, int64_t count, ElementType type) override {
    return Reduce({"AllReduce", &nccl::Communicator::AllGather, "ncclAllGather", &nccl::Communicator::AllReduce, "ncclAllReduce"}, send, recv,
                  count, type);
  }

  StatusOr<std::unique_ptr<Pending>> Broadcast(void* buf, int64_t bytes, int root) override {
    TF_RETURN_IF_ERROR(Current());
    TF_RETURN_IF_ERROR(comm_->Broadcast(buf, bytes, root));
    return Record("ncclBroadcast");
  }

  // An all-reduce of one word: it completes on no rank before every rank has issued it.
  Status Barrier() override {
    TF_RETURN_IF_ERROR(Current());
    TF_ASSIGN_OR_RETURN(void* word, Scratch(4));
    TF_RETURN_IF_ERROR(comm_->AllReduce(word, word, 1, nccl::DType::kFloat32));
    return Complete(Record("ncclAllReduce (barrier)"));
  }

 private:
  using Call = Status (nccl::Communicator::*)(const void*, void*, int64_t, nccl::DType);
  struct Reduction {
    const char* op;
    Call move;  // every rank's parts for this one, side by side into the scratch
    const char* move_name;
    Call native;  // NCCL's own reduction (nccl-native)
    const char* native_name;
  };
  StatusOr<std::unique_ptr<Pending>> Reduce(const Reduction& r, const void* send, void* recv, int64_t count, ElementType type) {
    TF_RETURN_IF_ERROR(CheckCount(r.op, count));
    TF_RETURN_IF_ERROR(Current());
    if (native_) {
      TF_RETURN_IF_ERROR(((*comm_).*r.native)(send, recv, count, DTypeOf(type)));
      return Record(r.native_name);
    }
    TF_ASSIGN_OR_RETURN(void* parts, Scratch(count * ElementBytes(type) * ranks()));
    TF_RETURN_IF_ERROR(((*comm_).*r.move)(send, parts, count, DTypeOf(type)));
    TF_RETURN_IF_ERROR(cuda::SumRanksInOrder(recv, parts, count, ranks(), type == ElementType::kBf16, comm_->stream()));
    return Record(r.move_name);
  }

  // NCCL and the kernels bind to the calling thread's device (the executor's collective thread
  // has none of its own).
  Status Current() const {
    TF_CUDA(cudaSetDevice(comm_->device()));
    return Status::Ok();
  }

  // At least `bytes` of GPU memory for one operation's parts. Operations are queued on one stream,
  // so the next reuses it after this one's sum has read it; it grows only once the stream is idle.
  StatusOr<void*> Scratch(int64_t bytes) {
    if (bytes <= scratch_bytes_) return scratch_;
    TF_RETURN_IF_ERROR(comm_->Synchronize());
    void* old = std::exchange(scratch_, nullptr);
    scratch_bytes_ = 0;
    if (old != nullptr) TF_CUDA(cudaFree(old));
    if (const cudaError_t e = cudaMalloc(&scratch_, static_cast<size_t>(bytes)); e != cudaSuccess) {
      (void)cudaGetLastError();
      scratch_ = nullptr;
      return ResourceExhausted("nccl collective: cannot allocate " + std::to_string(bytes) + " bytes of GPU memory for the parts to sum (" +
                               cudaGetErrorString(e) + ")");
    }
    scratch_bytes_ = bytes;
    return scratch_;
  }

  StatusOr<std::unique_ptr<Pending>> Record(const char* call) {
    cudaEvent_t event = nullptr;
    TF_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    if (const cudaError_t e = cudaEventRecord(event, static_cast<cudaStream_t>(comm_->stream())); e != cudaSuccess) {
      cudaEventDestroy(event);
      return cuda::CudaError(e, "cudaEventRecord");
    }
    return std::unique_ptr<Pending>(new NcclPending(*comm_, event, call));
  }

  std::unique_ptr<nccl::Communicator> comm_;
  int on_host_, local_rank_;
  bool native_;
  void* scratch_ = nullptr;
  int64_t scratch_bytes_ = 0;
};

class NcclMemory : public DeviceMemory {
 public:
  explicit NcclMemory(int device) : device_(device) {}
  StatusOr<void*> Allocate(int64_t bytes) override {
    TF_CUDA(cudaSetDevice(device_));
    void* p = nullptr;
    if (const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(bytes)); e != cudaSuccess) {
      (void)cudaGetLastError();
      return ResourceExhausted("GPU " + std::to_string(device_) + ": cannot allocate " + std::to_string(bytes) + " bytes (" + cudaGetErrorString(e) + ")");
    }
    return p;
  }
  void Free(void* block) override {
    (void)cudaSetDevice(device_);
    cudaFree(block);
  }
  // From pageable memory cudaMemcpy may return before the copy has reached the GPU, and NCCL's
  // stream does not wait for the default stream: the device is synchronised before it returns.
  Status ToDevice(void* dst, const void* src, int64_t bytes) override {
    TF_CUDA(cudaSetDevice(device_));
    TF_CUDA(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice));
    TF_CUDA(cudaDeviceSynchronize());
    return Status::Ok();
  }
  Status ToHost(void* dst, const void* src, int64_t bytes) override {
    TF_CUDA(cudaSetDevice(device_));
    TF_CUDA(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost));
    return Status::Ok();
  }

 private:
  int device_;
};

}  // namespace

bool HaveNccl() { return true; }

StatusOr<std::unique_ptr<DeviceMemory>> OpenDeviceMemory(const Collective& collective) {
  const auto* nccl = dynamic_cast<const NcclCollective*>(&collective);
  if (nccl == nullptr) return InvalidArgument("GPU memory of collective back-end '" + std::string(collective.backend()) + "': it is not on a GPU");
  return std::unique_ptr<DeviceMemory>(new NcclMemory(nccl->device()));
}

StatusOr<std::unique_ptr<Collective>> OpenNcclCollective(Collective& bootstrap, int gpu, bool nccls_own_sums) {
  // This rank's GPU; rank 0's id, and whether it made one, to every rank; then whether every rank
  // is ready — so that no rank waits in ncclCommInitRank for a rank that will never call it.
  Status here = Status::Ok();
  if (gpu == kTheLocalRanksGpu) {
    int gpus = 0;
    if (const cudaError_t e = cudaGetDeviceCount(&gpus); e != cudaSuccess || gpus < 1) {
      (void)cudaGetLastError();
      here = Unavailable(std::string("collective back-end 'nccl': no GPU here (") + (e != cudaSuccess ? cudaGetErrorString(e) : "none found") + ")");
    } else {
      gpu = bootstrap.local_rank() % gpus;
    }
  }
  if (here.ok()) {
    // The device this rank joins on, checked before the vote: after it, a rank that fails leaves
    // the others waiting in ncclCommInitRank.
    if (const cudaError_t e = cudaSetDevice(gpu); e != cudaSuccess) {
      (void)cudaGetLastError();
      here = cuda::CudaError(e, "cudaSetDevice(" + std::to_string(gpu) + ") for NCCL");
    }
  }
  std::array<char, 1 + sizeof(nccl::UniqueId)> message{};
  if (bootstrap.rank() == 0 && here.ok()) {
    auto id = nccl::NewUniqueId();
    here = id.status();
    if (id.ok()) {
      message[0] = 1;
      std::memcpy(message.data() + 1, id->data(), id->size());
    }
  }
  TF_RETURN_IF_ERROR(Complete(bootstrap.Broadcast(message.data(), static_cast<int64_t>(message.size()), 0)));
  const float ready = here.ok() && message[0] == 1 ? 1.0f : 0.0f;
  std::vector<float> every(static_cast<size_t>(bootstrap.ranks()));
  TF_RETURN_IF_ERROR(Complete(bootstrap.AllGather(&ready, every.data(), 1, ElementType::kFloat32)));
  if (!here.ok()) return here;
  for (int q = 0; q < bootstrap.ranks(); ++q) {
    if (every[static_cast<size_t>(q)] != 1.0f) {
      return Unavailable("collective back-end 'nccl': rank " + std::to_string(q) + " cannot join (" +
                         (q == 0 ? "no GPU, or no NCCL id made" : "no usable GPU") + ")");
    }
  }
  nccl::UniqueId id;
  std::memcpy(id.data(), message.data() + 1, id.size());
  TF_ASSIGN_OR_RETURN(std::unique_ptr<nccl::Communicator> comm, nccl::Communicator::Join(gpu, id, bootstrap.ranks(), bootstrap.rank()));
  return std::unique_ptr<Collective>(new NcclCollective(std::move(comm), bootstrap.ranks_on_host(), bootstrap.local_rank(), nccls_own_sums));
}

}  // namespace tierflow::real
