// The Chakra module (chakra_module.h): Chakra execution traces through protobuf's generated
// classes for Chakra's schema (chakra/chakra_et.proto).
#include "chakra_module.h"

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "chakra/chakra_et.pb.h"
#include "tierflow/core/files.h"
#include "tierflow/core/text.h"

namespace tierflow::traces {
namespace {

namespace pb = ChakraProtoMsg;

// The Chakra schema version whose node types these files use (STORAGE_NODE is the newest).
constexpr const char* kChakraVersion = "0.0.4";

// A new attribute of `n`, named, for its value to be set.
pb::AttributeProto* Attr(pb::Node* n, const char* name) {
  pb::AttributeProto* a = n->add_attr();
  a->set_name(name);
  return a;
}

uint64_t Micros(double seconds) { return static_cast<uint64_t>(std::llround(std::max(0.0, seconds) * 1e6)); }

pb::CollectiveCommType CommType(Op op) {
  switch (op) {
    case Op::kAllGather: return pb::ALL_GATHER;
    case Op::kReduceScatter: return pb::REDUCE_SCATTER;
    default: return pb::ALL_REDUCE;
  }
}

// The node of task `i`: its type and the attributes Chakra's feeder and ASTRA-sim read
// (is_cpu_op, num_ops, tensor_size, comm_type, comm_size), then tierflow's own.
void FillNode(const Schedule& s, size_t i, const IterationTimes& times, double t0, const ChakraOptions& options,
              pb::Node* n) {
  const TaskSpec& t = s.tasks()[i];
  n->set_id(static_cast<uint64_t>(i));
  n->set_name(t.id);
  n->set_start_time_micros(Micros(times.start_s[i] - t0));
  n->set_duration_micros(Micros(times.end_s[i] - times.start_s[i]));
  const std::string device = t.resource != kNoIndex ? s.devices()[s.resources()[t.resource].device].name : "";
  const auto bytes = static_cast<uint64_t>(std::max<int64_t>(0, t.bytes));
  switch (t.op) {
    case Op::kCompute:
    case Op::kOptimizer:
    case Op::kConvert:
      // The optimizer and the conversions too: work on the host's cores that the iteration waits
      // for, not a launch overhead, so not is_cpu_op (ASTRA-sim passes over those); their
      // tierflow.device says the host.
      n->set_type(pb::COMP_NODE);
      Attr(n, "is_cpu_op")->set_bool_val(false);
      Attr(n, "num_ops")->set_int64_val(static_cast<int64_t>(t.flops));
      Attr(n, "tensor_size")->set_uint64_val(bytes);
      break;
    case Op::kH2D:
    case Op::kD2H:
      n->set_type(t.op == Op::kH2D ? pb::MEM_LOAD_NODE : pb::MEM_STORE_NODE);
      Attr(n, "is_cpu_op")->set_bool_val(false);
      Attr(n, "tensor_size")->set_uint64_val(bytes);
      break;
    case Op::kRead:
    case Op::kWrite:
      if (options.storage_as_memory) {
        n->set_type(t.op == Op::kRead ? pb::MEM_LOAD_NODE : pb::MEM_STORE_NODE);
      } else {
        n->set_type(pb::STORAGE_NODE);
        n->mutable_storage()->set_level(pb::STORAGE_LEVEL_DEVICE);
      }
      Attr(n, "is_cpu_op")->set_bool_val(false);
      Attr(n, "tensor_size")->set_uint64_val(bytes);
      Attr(n, "tierflow.storage_op")->set_string_val(t.op == Op::kRead ? "read" : "write");
      Attr(n, "tierflow.block_bytes")->set_int64_val(IoBlockBytes(t));
      Attr(n, "tierflow.queue_depth")->set_int64_val(IoQueueDepth(t));
      break;
    case Op::kAllGather:
    case Op::kReduceScatter:
    case Op::kAllReduce:
      n->set_type(pb::COMM_COLL_NODE);
      Attr(n, "is_cpu_op")->set_bool_val(false);
      Attr(n, "comm_type")->set_int64_val(CommType(t.op));
      Attr(n, "comm_size")->set_int64_val(static_cast<int64_t>(bytes));
      if (t.ranks > 0) Attr(n, "tierflow.ranks")->set_int64_val(t.ranks);
      break;
    case Op::kAlloc:
    case Op::kFree:
    case Op::kBarrier:
      n->set_type(pb::COMP_NODE);
      Attr(n, "is_cpu_op")->set_bool_val(true);
      Attr(n, "num_ops")->set_int64_val(0);
      break;
  }
  Attr(n, "tierflow.op")->set_string_val(std::string(OpName(t.op)));
  if (t.resource != kNoIndex) Attr(n, "tierflow.resource")->set_string_val(s.resources()[t.resource].name);
  if (!device.empty()) Attr(n, "tierflow.device")->set_string_val(device);
  if (t.kernel != Kernel::kNone) Attr(n, "tierflow.kernel")->set_string_val(std::string(KernelName(t.kernel)));
  Attr(n, "tierflow.phase")->set_string_val(std::string(PhaseName(t.phase)));
  if (t.layer >= 0) Attr(n, "tierflow.layer")->set_int64_val(t.layer);
  if (t.micro_step != 0) Attr(n, "tierflow.micro_step")->set_int64_val(t.micro_step);
  Attr(n, "tierflow.start_s")->set_double_val(times.start_s[i] - t0);
  Attr(n, "tierflow.duration_s")->set_double_val(times.end_s[i] - times.start_s[i]);
}

bool OfRank(const TaskSpec& t, int32_t rank) {
  return t.rank == rank || t.rank == kEveryRank;
}

StatusOr<std::vector<ChakraFile>> WriteWithProtobuf(const Schedule& s, const IterationTimes& times, const std::string& dir,
                                                    const ChakraOptions& options) {
  const size_t nt = s.tasks().size();
  if (times.start_s.size() != nt || times.end_s.size() != nt) {
    return InvalidArgument("Chakra traces: times of " + std::to_string(times.start_s.size()) + " tasks for a schedule of " +
                           std::to_string(nt));
  }
  double t0 = nt ? times.start_s[0] : 0;
  for (double v : times.start_s) t0 = std::min(t0, v);

  // Control edges: on a resource of concurrency 1, each task's predecessor in the timed
  // iteration's order of starts.
  std::vector<int64_t> previous_on_resource(nt, -1);
  {
    std::vector<size_t> order(nt);
    for (size_t i = 0; i < nt; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return times.start_s[a] < times.start_s[b]; });
    std::vector<int64_t> last(s.resources().size(), -1);
    for (size_t i : order) {
      const int32_t r = s.tasks()[i].resource;
      if (r == kNoIndex || s.resources()[r].concurrency != 1) continue;
      previous_on_resource[i] = last[static_cast<size_t>(r)];
      last[static_cast<size_t>(r)] = static_cast<int64_t>(i);
    }
  }

  std::vector<ChakraFile> files;
  const int32_t ranks = ScheduleRanks(s);
  for (int32_t rank = 0; rank < ranks; ++rank) {
    std::string out;
    int64_t nodes = 0;
    {
      // The stream hands out buffers inside `out`; leaving this scope trims it to what was written.
      google::protobuf::io::StringOutputStream stream(&out);
      pb::GlobalMetadata meta;
      meta.set_version(kChakraVersion);
      for (const auto& [name, value] : {std::pair<const char*, std::string>{"tierflow.schedule", s.name},
                                        {"tierflow.rank", std::to_string(rank)},
                                        {"tierflow.ranks", std::to_string(ranks)},
                                        {"tierflow.iteration", std::to_string(times.iteration)}}) {
        auto* a = meta.add_attr();
        a->set_name(name);
        a->set_string_val(value);
      }
      if (!google::protobuf::util::SerializeDelimitedToZeroCopyStream(meta, &stream)) {
        return Internal("Chakra traces: could not serialise the metadata");
      }
      pb::Node node;
      for (size_t i = 0; i < nt; ++i) {
        const TaskSpec& t = s.tasks()[i];
        if (!OfRank(t, rank)) continue;
        node.Clear();
        FillNode(s, i, times, t0, options, &node);
        for (int32_t d : t.deps) {
          if (OfRank(s.tasks()[static_cast<size_t>(d)], rank)) node.add_data_deps(static_cast<uint64_t>(d));
        }
        const int64_t prev = previous_on_resource[i];
        if (prev >= 0 && OfRank(s.tasks()[static_cast<size_t>(prev)], rank)) node.add_ctrl_deps(static_cast<uint64_t>(prev));
        if (!google::protobuf::util::SerializeDelimitedToZeroCopyStream(node, &stream)) {
          return Internal("Chakra traces: could not serialise task " + Quoted(t.id));
        }
        ++nodes;
      }
    }
    const std::string path = (std::filesystem::path(dir) / (options.prefix + "." + std::to_string(rank) + ".et")).string();
    TF_RETURN_IF_ERROR(CreateParentDirectories(path, "Chakra trace"));
    TF_RETURN_IF_ERROR(WriteFileAtomically(path, out, "Chakra trace"));
    files.push_back({path, rank, nodes, static_cast<int64_t>(out.size())});
  }
  return files;
}

}  // namespace
}  // namespace tierflow::traces

// The module's exported entry (chakra_module.h): the only symbol it shows.
extern "C" __attribute__((visibility("default"))) tierflow::traces::internal::WriteChakraFn tierflow_chakra_writer() {
  return &tierflow::traces::WriteWithProtobuf;
}
