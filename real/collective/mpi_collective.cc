// The MPI back-end of collective.h: one rank per process over MPI_COMM_WORLD, host memory. The
// library only moves bytes (MPI_Iallgather, MPI_Ialltoall, MPI_Ibcast); every sum is formed
// here, in rank order (SumInRankOrder), when the operation is waited for — so the result does not
// depend on the reduction order the library picks, and equals the local back-end's bit for bit.
// An all-reduce gathers every rank's vector (ranks x the bytes of a ring all-reduce): the
// schedules' all-reduces are the 8-byte gradient norm.
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "mpi_collective.h"

namespace tierflow::real::internal {
namespace {

Status MpiError(int code, const char* call) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return Internal(std::string("MPI ") + call + ": " + std::string(text, static_cast<size_t>(length)));
}

#define TF_MPI(call)                                     \
  do {                                                   \
    const int tf_mpi_rc = (call);                        \
    if (tf_mpi_rc != MPI_SUCCESS) return MpiError(tf_mpi_rc, #call); \
  } while (0)

// MPI_Init_thread once per process, MPI_Finalize at exit (unless someone else initialised it).
Status EnsureInitialised() {
  static std::once_flag once;
  static Status status;
  std::call_once(once, [] {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (initialised) return;
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      status = MpiError(rc, "MPI_Init_thread");
      return;
    }
    // Operations are issued and waited for from the threads of the tasks that use them.
    if (provided < MPI_THREAD_MULTIPLE) {
      status = Unavailable("MPI: the library gives thread level " + std::to_string(provided) + ", the mpi back-end needs MPI_THREAD_MULTIPLE");
      return;
    }
    // Errors come back as codes, turned into statuses naming the call, instead of aborting.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  });
  return status;
}

// Bytes as MPI counts (int): larger transfers are refused rather than truncated.
StatusOr<int> Bytes(const char* op, int64_t count, int64_t element_bytes) {
  if (count < 1) return InvalidArgument(std::string(op) + ": count " + std::to_string(count) + " (must be >= 1)");
  const int64_t bytes = count * element_bytes;
  if (bytes > INT_MAX) return InvalidArgument(std::string(op) + ": " + std::to_string(bytes) + " bytes per rank is above MPI's int count");
  return static_cast<int>(bytes);
}

class MpiPending : public Pending {
 public:
  // `finish` runs after the transfer completes (the rank-order sum), on the waiting thread.
  MpiPending(MPI_Request request, std::vector<char> staging, std::function<void(const std::vector<char>&)> finish, const char* call)
      : request_(request), staging_(std::move(staging)), finish_(std::move(finish)), call_(call) {}
  // An operation dropped without Wait is still completed here: the library must never write
  // into memory already freed. (So a peer that never issues it blocks this rank, as it would in
  // Wait; a rank that dies makes mpirun stop the others.)
  ~MpiPending() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  Status Wait() override {
    if (request_ == MPI_REQUEST_NULL) return Status::Ok();
    const int rc = MPI_Wait(&request_, MPI_STATUS_IGNORE);
    request_ = MPI_REQUEST_NULL;
    if (rc != MPI_SUCCESS) return MpiError(rc, call_);
    if (finish_) finish_(staging_);
    return Status::Ok();
  }

 private:
  MPI_Request request_;
  std::vector<char> staging_;
  std::function<void(const std::vector<char>&)> finish_;
  const char* call_;
};

class MpiCollective : public Collective {
 public:
  MpiCollective(int ranks, int rank, int on_host, int local_rank) : ranks_(ranks), rank_(rank), on_host_(on_host), local_rank_(local_rank) {}
  std::string_view backend() const override { return "mpi"; }
  int ranks() const override { return ranks_; }
  int rank() const override { return rank_; }
  int ranks_on_host() const override { return on_host_; }
  int local_rank() const override { return local_rank_; }

  StatusOr<std::unique_ptr<Pending>> AllGather(const void* send, void* recv, int64_t count, ElementType type) override {
    TF_ASSIGN_OR_RETURN(const int bytes, Bytes("AllGather", count, ElementBytes(type)));
    MPI_Request request;
    TF_MPI(MPI_Iallgather(send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE, MPI_COMM_WORLD, &request));
    return std::unique_ptr<Pending>(new MpiPending(request, {}, nullptr, "MPI_Iallgather"));
  }

  // Every rank's part for this rank comes here (an all-to-all), and is summed in rank order.
  StatusOr<std::unique_ptr<Pending>> ReduceScatter(const void* send, void* recv, int64_t count, ElementType type) override {
    TF_ASSIGN_OR_RETURN(const int bytes, Bytes("ReduceScatter", count, ElementBytes(type)));
    std::vector<char> staging(static_cast<size_t>(bytes) * static_cast<size_t>(ranks_));
    MPI_Request request;
    TF_MPI(MPI_Ialltoall(send, bytes, MPI_BYTE, staging.data(), bytes, MPI_BYTE, MPI_COMM_WORLD, &request));
    return std::unique_ptr<Pending>(new MpiPending(request, std::move(staging), Summer(recv, count, type, bytes), "MPI_Ialltoall"));
  }

  // Every rank's vector comes to every rank, each summing them in rank order.
  StatusOr<std::unique_ptr<Pending>> AllReduce(const void* send, void* recv, int64_t count, ElementType type) override {
    TF_ASSIGN_OR_RETURN(const int bytes, Bytes("AllReduce", count, ElementBytes(type)));
    std::vector<char> staging(static_cast<size_t>(bytes) * static_cast<size_t>(ranks_));
    MPI_Request request;
    TF_MPI(MPI_Iallgather(send, bytes, MPI_BYTE, staging.data(), bytes, MPI_BYTE, MPI_COMM_WORLD, &request));
    return std::unique_ptr<Pending>(new MpiPending(request, std::move(staging), Summer(recv, count, type, bytes), "MPI_Iallgather"));
  }

  StatusOr<std::unique_ptr<Pending>> Broadcast(void* buf, int64_t bytes, int root) override {
    if (root < 0 || root >= ranks_) return InvalidArgument("Broadcast: root " + std::to_string(root) + " of " + std::to_string(ranks_) + " ranks");
    TF_ASSIGN_OR_RETURN(const int n, Bytes("Broadcast", bytes, 1));
    MPI_Request request;
    TF_MPI(MPI_Ibcast(buf, n, MPI_BYTE, root, MPI_COMM_WORLD, &request));
    return std::unique_ptr<Pending>(new MpiPending(request, {}, nullptr, "MPI_Ibcast"));
  }

  Status Barrier() override {
    TF_MPI(MPI_Barrier(MPI_COMM_WORLD));
    return Status::Ok();
  }

  void Abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }

 private:
  std::function<void(const std::vector<char>&)> Summer(void* recv, int64_t count, ElementType type, int bytes) const {
    const int ranks = ranks_;
    return [recv, count, type, bytes, ranks](const std::vector<char>& staging) {
      std::vector<const void*> parts;
      for (int r = 0; r < ranks; ++r) parts.push_back(staging.data() + static_cast<size_t>(r) * static_cast<size_t>(bytes));
      SumInRankOrder(parts, recv, count, type);
    };
  }

  int ranks_, rank_, on_host_, local_rank_;
};

}  // namespace

StatusOr<std::unique_ptr<Collective>> OpenMpiCollective() {
  TF_RETURN_IF_ERROR(EnsureInitialised());
  int ranks = 0, rank = 0;
  TF_MPI(MPI_Comm_size(MPI_COMM_WORLD, &ranks));
  TF_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_Comm host = MPI_COMM_NULL;
  int on_host = 0, local_rank = 0;
  TF_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host));
  TF_MPI(MPI_Comm_size(host, &on_host));
  TF_MPI(MPI_Comm_rank(host, &local_rank));
  TF_MPI(MPI_Comm_free(&host));
  return std::unique_ptr<Collective>(new MpiCollective(ranks, rank, on_host, local_rank));
}

}  // namespace tierflow::real::internal
