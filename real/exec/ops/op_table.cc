// The op table (op_handler.h), and the contract rules every op shares. The op files keep their own
// checks of what only the run can know: versions, and what a buffer holds at that moment.
#include <algorithm>
#include <array>

#include "../run_state.h"
#include "op_handler.h"

namespace tierflow::real::exec {

// Each family's check and prepare (in its own file).
Status CheckIo(const Schedule& s, const TaskSpec& t, const std::string& who);
Status PrepareIo(RunState& run, const TaskSpec& t, int32_t task, int64_t iteration, Job& job);
Status CheckH2D(const Schedule& s, const TaskSpec& t, const std::string& who);
Status CheckD2H(const Schedule& s, const TaskSpec& t, const std::string& who);
Status PrepareH2D(RunState& run, const TaskSpec& t, int32_t task, int64_t iteration, Job& job);
Status PrepareD2H(RunState& run, const TaskSpec& t, int32_t task, int64_t iteration, Job& job);
Status PrepareCompute(RunState& run, const TaskSpec& t, int32_t task, int64_t iteration, Job& job);
Status CheckOptimizer(const Schedule& s, const TaskSpec& t, const std::string& who);
Status PrepareOptimizer(RunState& run, const TaskSpec& t, int32_t task, int64_t iteration, Job& job);
Status CheckConvert(const Schedule& s, const TaskSpec& t, const std::string& who);
Status PrepareConvert(RunState& run, const TaskSpec& t, int32_t task, int64_t iteration, Job& job);
Status PrepareAllGather(RunState& run, const TaskSpec& t, int32_t task, int64_t iteration, Job& job);
Status PrepareReduceScatter(RunState& run, const TaskSpec& t, int32_t task, int64_t iteration, Job& job);
Status PrepareNormAllReduce(RunState& run, const TaskSpec& t, int32_t task, int64_t iteration, Job& job);
Status OpenCollectives(RunState& run);

namespace {

// One line per op, in Op's order:        check           prepare               host memory  CPU threads  on a GPU too  open
constexpr std::array<OpHandler, kOpCount> kHandlers = {{
    /* read          */ {CheckIo,        PrepareIo,            true,  false, false, nullptr},
    /* write         */ {CheckIo,        PrepareIo,            true,  false, false, nullptr},
    /* h2d           */ {CheckH2D,       PrepareH2D,           false, false, false, nullptr},
    /* d2h           */ {CheckD2H,       PrepareD2H,           false, false, false, nullptr},
    /* compute       */ {nullptr,        PrepareCompute,       false, false, false, nullptr},
    /* allgather     */ {nullptr,        PrepareAllGather,     false, false, false, OpenCollectives},
    /* reducescatter */ {nullptr,        PrepareReduceScatter, false, false, false, OpenCollectives},
    /* allreduce     */ {nullptr,        PrepareNormAllReduce, false, false, false, OpenCollectives},
    /* optimizer     */ {CheckOptimizer, PrepareOptimizer,     true,  true,  true,  nullptr},
    /* convert       */ {CheckConvert,   PrepareConvert,       true,  true,  false, nullptr},
    /* alloc         */ {nullptr,        nullptr,              false, false, false, nullptr},
    /* free          */ {nullptr,        nullptr,              false, false, false, nullptr},
    /* barrier       */ {nullptr,        nullptr,              false, false, false, nullptr},
}};
static_assert(static_cast<int>(Op::kBarrier) == kOpCount - 1, "one line per op, in Op's order");

DeviceKind BufferDevice(const Schedule& s, int32_t buffer) {
  const int32_t pool = s.buffers()[static_cast<size_t>(buffer)].pool;
  return s.devices()[static_cast<size_t>(s.pools()[static_cast<size_t>(pool)].device)].kind;
}

DeviceKind ResourceDevice(const Schedule& s, int32_t resource) {
  return s.devices()[static_cast<size_t>(s.resources()[static_cast<size_t>(resource)].device)].kind;
}

}  // namespace

const OpHandler& HandlerOf(Op op) { return kHandlers[static_cast<size_t>(op)]; }

Status OpenHandlers(RunState& run) {
  for (size_t i = 0; i < kHandlers.size(); ++i) {
    const auto open = kHandlers[i].open;
    const bool first = std::none_of(kHandlers.begin(), kHandlers.begin() + static_cast<std::ptrdiff_t>(i),
                                    [open](const OpHandler& h) { return h.open == open; });
    if (open != nullptr && first) TF_RETURN_IF_ERROR(open(run));
  }
  return Status::Ok();
}

Status CheckTaskContracts(const Schedule& s) {
  for (const TaskSpec& t : s.tasks()) {
    const std::string who = "task '" + t.id + "' (" + std::string(OpName(t.op)) + ")";
    if (!KernelsOf(t.op).empty() && t.kernel == Kernel::kNone) {
      return InvalidArgument(who + ": names no kernel (" + KernelsOf(t.op) + "); tierflow run needs one to know what it computes");
    }
    const OpHandler& h = HandlerOf(t.op);
    // Disk I/O and CPU work address host memory only: a buffer of a GPU pool is gpu0 memory. An
    // op that may run on a GPU too addresses that GPU's memory only when it does.
    if (h.host_memory) {
      const bool on_gpu = t.resource != kNoIndex && ResourceDevice(s, t.resource) == DeviceKind::kGpu;
      if (on_gpu && !h.on_gpu_too) {
        return InvalidArgument(who + ": runs on resource '" + s.resources()[static_cast<size_t>(t.resource)].name + "', a GPU's; a " +
                               std::string(OpName(t.op)) + " task runs on the host");
      }
      const DeviceKind memory = on_gpu ? DeviceKind::kGpu : DeviceKind::kHost;
      for (const auto* list : {&t.allocs, &t.uses}) {
        for (int32_t b : *list) {
          if (BufferDevice(s, b) != memory) {
            return InvalidArgument(who + ": buffer '" + s.buffers()[static_cast<size_t>(b)].name + "' is not in " + (on_gpu ? "GPU" : "host") +
                                   " memory, and a " + std::string(OpName(t.op)) + " task on a " + (on_gpu ? "GPU" : "CPU or disk") +
                                   " works on " + (on_gpu ? "GPU" : "host") + " memory");
          }
        }
      }
    }
    if (h.check != nullptr) TF_RETURN_IF_ERROR(h.check(s, t, who));
  }
  return Status::Ok();
}

}  // namespace tierflow::real::exec
