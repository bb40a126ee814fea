// The collectives of a multi-rank run (DESIGN.md real/collective): one small interface over the
// back-ends chosen at run time —
//   local  ranks in one process (threads, or one rank alone): the reference, and the fake that
//          tests run several ranks on without a library
//   mpi    one rank per process over MPI_COMM_WORLD (Open MPI), host memory
//   nccl   ranks each on a GPU of its own, on GPU memory (OpenNcclCollective), bootstrapped through
//          one of the others
// Every operation is asynchronous: it is issued on every rank in the same order and completes
// when its Pending is waited for.
//
// Bit-identical whatever the back-end and the rank count: a sum is formed in rank order,
// ((x_0 + x_1) + x_2) + ..., in fp32, and rounded once to the element type (SumInRankOrder), not
// in whatever order a library's reduction picks. So training on N ranks can equal one process
// summing the same N micro-batches' gradients in that order.
//
// Thread safety: one thread at a time per Collective object; the objects of a local group may be
// used from different threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow::real {

enum class ElementType { kFloat32, kBf16 };
int64_t ElementBytes(ElementType type);
std::string_view ElementTypeName(ElementType type);

// out[i] = the sum of parts[0][i], parts[1][i], ... in that order, in fp32, rounded once to
// `type` (round to nearest even for bf16). `out` may be one of the parts.
void SumInRankOrder(const std::vector<const void*>& parts, void* out, int64_t count, ElementType type);

// A collective in flight on this rank.
class Pending {
 public:
  virtual ~Pending() = default;
  // Returns when this rank's output is written, with the operation's status (a mismatch between
  // ranks, a library error naming its call).
  virtual Status Wait() = 0;
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual std::string_view backend() const = 0;
  virtual int ranks() const = 0;
  virtual int rank() const = 0;
  // The ranks of the group on this rank's machine, which share its cores: every rank of a local
  // group (one process); under MPI, those that MPI_COMM_TYPE_SHARED puts with this one.
  virtual int ranks_on_host() const { return ranks(); }
  // This rank's place among them (0 to ranks_on_host() - 1): which of the machine's GPUs it takes.
  virtual int local_rank() const { return rank(); }
  // Where the buffers of its operations are: GPU memory (nccl), or memory the process addresses
  // (local, mpi).
  virtual bool device_memory() const { return false; }

  // recv[r * count + i] = rank r's send[i]: recv holds ranks() * count elements.
  virtual StatusOr<std::unique_ptr<Pending>> AllGather(const void* send, void* recv, int64_t count, ElementType type) = 0;
  // recv[i] = the sum in rank order of every rank's send[rank() * count + i]: send holds
  // ranks() * count elements, recv count.
  virtual StatusOr<std::unique_ptr<Pending>> ReduceScatter(const void* send, void* recv, int64_t count, ElementType type) = 0;
  // recv[i] = the sum in rank order of every rank's send[i]; recv may be send.
  virtual StatusOr<std::unique_ptr<Pending>> AllReduce(const void* send, void* recv, int64_t count, ElementType type) = 0;
  // Rank `root`'s `bytes` at buf into every rank's buf.
  virtual StatusOr<std::unique_ptr<Pending>> Broadcast(void* buf, int64_t bytes, int root) = 0;
  // Returns when every rank has called it.
  virtual Status Barrier() = 0;
  // This rank cannot go on: stops every rank's process at once (mpi: MPI_Abort, which mpirun
  // reports naming this rank), so that none waits for it forever. The local group's ranks share
  // one process: nothing (they return their errors).
  virtual void Abort(int /*code*/) {}
};

// Issues and waits: the blocking form of any operation above.
Status Complete(StatusOr<std::unique_ptr<Pending>> pending);

// `ranks` ranks in this process, element r being rank r. Each rank issues the same operations in
// the same order; an operation completes once every rank has issued it (so one thread may issue
// it on every rank, then wait). A rank issuing a different operation, count or type than the
// others makes it fail on every rank, naming both.
// `device_memory`: its ranks say device_memory() (the ranks of a run whose gpu0 is emulated in
// host memory, standing in for NCCL in tests: the run then hands them its gpu0 buffers).
std::vector<std::unique_ptr<Collective>> MakeLocalGroup(int ranks, bool device_memory = false);

// The back-end `name` for this process: "local" (one rank), or "mpi" (MPI_COMM_WORLD: MPI is
// initialised on first use and finalised at exit). Unavailable, with the reason, when this build
// has no MPI; InvalidArgument for an unknown name.
StatusOr<std::unique_ptr<Collective>> OpenCollective(std::string_view name);
// The back-ends this build has, for messages: "local, mpi".
std::string CollectiveBackends();

// NCCL on CUDA device `gpu` of this process (kTheLocalRanksGpu: the machine's GPU of the
// bootstrap's local rank, modulo their count), its ranks those of `bootstrap` (every rank of
// which calls this at once: rank 0's NCCL id goes to the others over it). Its operations take GPU
// memory (device_memory()) and give the host back-ends' results bit for bit: NCCL only moves the
// parts, and a kernel sums them in rank order (SumInRankOrder's rule), on the communicator's own
// stream. With `nccls_own_sums` the reductions are NCCL's own (ncclReduceScatter, ncclAllReduce:
// its order, which depends on the algorithm and the rank count), for measuring what the rank
// order costs (backend() "nccl-native"); runs never use that. Unavailable, with the reason, where
// the build has no NCCL (HaveNccl()) or the machine no GPU.
inline constexpr int kTheLocalRanksGpu = -1;
StatusOr<std::unique_ptr<Collective>> OpenNcclCollective(Collective& bootstrap, int gpu, bool nccls_own_sums = false);
bool HaveNccl();

// The GPU memory a collective on it works in, for callers whose data are on the host (the
// collective probe's buffers): blocks, and synchronous copies into and out of them.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual StatusOr<void*> Allocate(int64_t bytes) = 0;
  virtual void Free(void* block) = 0;
  virtual Status ToDevice(void* dst, const void* src, int64_t bytes) = 0;
  virtual Status ToHost(void* dst, const void* src, int64_t bytes) = 0;
};
// The memory of the GPU an nccl collective (OpenNcclCollective) is on; InvalidArgument for
// another back-end.
StatusOr<std::unique_ptr<DeviceMemory>> OpenDeviceMemory(const Collective& nccl);

}  // namespace tierflow::real
