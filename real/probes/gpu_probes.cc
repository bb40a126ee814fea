#include "tierflow/real/gpu_probes.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "tierflow/real/cpu_ops.h"
#include "tierflow/real/cuda_ops.h"
#include "tierflow/real/cuda_status.h"
#include "tierflow/real/nccl_comm.h"

namespace tierflow::real {
namespace {

// Every byte 0x3c: as bf16 0.0115, as fp32 0.0115 — ordinary numbers, no denormals.
constexpr int kFill = 0x3c;

Status CheckOptions(const GpuProbeOptions& o, const char* probe) {
  if (o.repetitions < 1) return InvalidArgument(std::string(probe) + ": repetitions must be at least 1");
  return Status::Ok();
}

void Report(const GpuProbeOptions& o, const std::string& what) {
  if (o.progress) o.progress(what);
}

TraceRecord Record(std::string task, Op op, std::string resource, int64_t rep, int64_t bytes, double flops,
                   std::pair<double, double> times) {
  TraceRecord r = ProbeRecord(std::move(task), op, std::move(resource), rep, bytes, times.first, times.second);
  r.flops = flops;
  return r;
}

// Times `work` on `stream` once as a warm-up, then `reps` times, one record each.
template <typename Work>
Status TimeRepeated(cuda::Timeline& timeline, void* stream, int32_t reps, Work&& work,
                    const std::function<TraceRecord(int64_t rep, std::pair<double, double>)>& record,
                    std::vector<TraceRecord>* out) {
  for (int32_t rep = -1; rep < reps; ++rep) {
    TF_ASSIGN_OR_RETURN(const int64_t task, timeline.Begin(stream));
    TF_RETURN_IF_ERROR(work());
    TF_RETURN_IF_ERROR(timeline.End(task, stream));
    TF_ASSIGN_OR_RETURN(const auto times, timeline.Times(task));
    if (rep >= 0) out->push_back(record(rep, times));
  }
  return Status::Ok();
}

StatusOr<cuda::DeviceBuffer> Filled(const cuda::Context& ctx, int64_t bytes) {
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer b, ctx.Allocate(bytes));
  TF_CUDA(cudaMemset(b.data(), kFill, static_cast<size_t>(bytes)));
  return b;
}

}  // namespace

StatusOr<std::vector<TraceRecord>> ProbeGpuCopies(const cuda::Context& ctx, const std::vector<int64_t>& sizes,
                                                  const GpuProbeOptions& o) {
  TF_RETURN_IF_ERROR(CheckOptions(o, "probe gpu copy"));
  if (sizes.empty()) return InvalidArgument("probe gpu copy: no sizes given");
  for (int64_t s : sizes) {
    if (s < 1) return InvalidArgument("probe gpu copy: size " + std::to_string(s) + " is not positive");
  }
  const int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer device, Filled(ctx, largest));
  TF_ASSIGN_OR_RETURN(cuda::PinnedHostBuffer pinned, cuda::PinnedHostBuffer::Allocate(largest));
  std::memset(pinned.data(), kFill, static_cast<size_t>(largest));
  std::vector<char> pageable(static_cast<size_t>(largest), static_cast<char>(kFill));
  TF_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Timeline> timeline, cuda::Timeline::Start(ctx));
  std::vector<TraceRecord> out;
  for (const bool is_pinned : {true, false}) {
    const std::string task = is_pinned ? "probe.copy.pinned" : "probe.copy.pageable";
    void* host = is_pinned ? pinned.data() : pageable.data();
    for (int64_t size : sizes) {
      const int32_t reps = o.repetitions * (size < (int64_t{1} << 20) ? 8 : 1);  // small copies vary more
      for (const bool h2d : {true, false}) {
        void* stream = h2d ? ctx.h2d_stream() : ctx.d2h_stream();
        auto copy = [&] {
          return h2d ? cuda::CopyAsync(device.data(), host, size, cuda::CopyKind::kHostToDevice, stream)
                     : cuda::CopyAsync(host, device.data(), size, cuda::CopyKind::kDeviceToHost, stream);
        };
        auto record = [&](int64_t rep, std::pair<double, double> t) {
          return Record(task, h2d ? Op::kH2D : Op::kD2H, h2d ? "gpu0.h2d" : "gpu0.d2h", rep, size, 0, t);
        };
        TF_RETURN_IF_ERROR(TimeRepeated(*timeline, stream, reps, copy, record, &out));
      }
      Report(o, task + " " + std::to_string(size) + " B");
    }
  }
  return out;
}

StatusOr<std::vector<TraceRecord>> ProbeGpuOps(const cuda::Context& ctx, const LlamaSpec& spec, int64_t batch,
                                               int64_t seq, const GpuProbeOptions& o) {
  TF_RETURN_IF_ERROR(CheckOptions(o, "probe gpu ops"));
  TF_RETURN_IF_ERROR(ValidateLlamaSpec(spec));
  if (batch < 1) return InvalidArgument("probe gpu ops: batch " + std::to_string(batch) + " must be at least 1");
  TF_RETURN_IF_ERROR(ValidateLlamaSequence(spec, seq, "probe gpu ops: sequence"));
  const models::LlmConfig& c = spec.config;
  const int64_t rows = batch * seq, C = c.hidden, H = c.heads, KV = c.kv_heads, d = c.head_dim(), F = c.ffn;
  const int64_t V = c.vocab, q_dim = H * d, kv_dim = KV * d;
  const int64_t widest = std::max({C, q_dim, F, V});
  // Activations and weights bf16, gradients fp32; one buffer of each role, reused by every op.
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer x, Filled(ctx, rows * widest * 2));
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer y, Filled(ctx, rows * widest * 2));
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer z, Filled(ctx, rows * widest * 2));
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer w, Filled(ctx, std::max(F, V) * C * 2));
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer dx, Filled(ctx, rows * widest * 4));
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer dw, Filled(ctx, std::max(F, V) * C * 4));
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer stats, Filled(ctx, batch * H * seq * 4));  // rstd rows, attention's lse
  std::vector<float> cos_table(static_cast<size_t>(seq * d / 2)), sin_table(cos_table.size());
  cpu::RopeTables(cos_table.data(), sin_table.data(), seq, models::RopeInverseFrequencies(c));
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer cos_d, ctx.Allocate(static_cast<int64_t>(cos_table.size()) * 4));
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer sin_d, ctx.Allocate(static_cast<int64_t>(sin_table.size()) * 4));
  TF_RETURN_IF_ERROR(cos_d.CopyFromHost(ctx, cos_table.data(), cos_d.size_bytes()));
  TF_RETURN_IF_ERROR(sin_d.CopyFromHost(ctx, sin_table.data(), sin_d.size_bytes()));
  std::vector<int32_t> tokens(static_cast<size_t>(rows));
  for (int64_t n = 0; n < rows; ++n) tokens[static_cast<size_t>(n)] = static_cast<int32_t>((n * 7919) % V);
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer tok, ctx.Allocate(rows * 4));
  TF_RETURN_IF_ERROR(tok.CopyFromHost(ctx, tokens.data(), rows * 4));

  auto* xb = static_cast<uint16_t*>(x.data());
  auto* yb = static_cast<uint16_t*>(y.data());
  auto* zb = static_cast<uint16_t*>(z.data());
  auto* wb = static_cast<uint16_t*>(w.data());
  auto* dxf = static_cast<float*>(dx.data());
  auto* dwf = static_cast<float*>(dw.data());
  auto* sf = static_cast<float*>(stats.data());
  auto* cf = static_cast<const float*>(cos_d.data());
  auto* snf = static_cast<const float*>(sin_d.data());
  auto* tk = static_cast<const int32_t*>(tok.data());

  struct OpProbe {
    std::string name;
    double flops, bytes;
    std::function<Status()> run;
  };
  std::vector<OpProbe> ops;
  const double b2 = 2, b4 = 4, r = static_cast<double>(rows);
  ops.push_back({"embedding_fwd", 0, r * C * 2 * b2, [&] { return cuda::EmbeddingForward(ctx, xb, tk, wb, rows, C); }});
  ops.push_back({"rmsnorm_fwd", 4 * r * C, r * C * 2 * b2,
                 [&] { return cuda::RmsNormForward(ctx, yb, sf, xb, wb, rows, C, spec.config.norm_eps); }});
  ops.push_back({"rmsnorm_bwd", 10 * r * C, r * C * (2 * b2 + 2 * b4),
                 [&] { return cuda::RmsNormBackward(ctx, dxf, dwf, yb, xb, wb, sf, rows, C); }});
  const std::pair<const char*, std::pair<int64_t, int64_t>> linears[] = {
      {"q_proj", {C, q_dim}}, {"k_proj", {C, kv_dim}}, {"v_proj", {C, kv_dim}}, {"o_proj", {q_dim, C}},
      {"gate_proj", {C, F}},  {"up_proj", {C, F}},     {"down_proj", {F, C}},   {"lm_head", {C, V}}};
  for (const auto& [name, dims] : linears) {
    const int64_t in = dims.first, out = dims.second;
    const double mnk = r * static_cast<double>(in) * static_cast<double>(out);
    ops.push_back({std::string("linear_fwd.") + name, 2 * mnk, (r * in + static_cast<double>(in) * out + r * out) * b2,
                   [&ctx, xb, wb, yb, rows, in, out] { return cuda::LinearForward(ctx, yb, xb, wb, rows, in, out); }});
    // As the Llama steps run a projection's backward: both gradients written, not added to.
    ops.push_back({std::string("linear_bwd.") + name, 4 * mnk,
                   (r * out + r * in + static_cast<double>(in) * out) * b2 + (r * in + static_cast<double>(in) * out) * b4,
                   [&ctx, xb, wb, yb, dxf, dwf, rows, in, out] {
                     return cuda::LinearBackward(ctx, dxf, dwf, yb, xb, wb, rows, in, out, cuda::GradMode::kOverwrite,
                                                 cuda::GradMode::kOverwrite);
                   }});
  }
  ops.push_back({"rope_fwd", 6 * r * q_dim / 2, 2 * r * q_dim * b2,
                 [&] { return cuda::RopeForward(ctx, xb, cf, snf, rows, seq, H, d); }});
  ops.push_back({"rope_bwd", 6 * r * q_dim / 2, 2 * r * q_dim * b4,
                 [&] { return cuda::RopeBackward(ctx, dxf, cf, snf, rows, seq, H, d); }});
  // The fused kernels the Llama steps run (FlashAttention*), counted in FlashAttention's
  // convention: the causal half of the score and output products, 2 of them forward, 5 backward
  // (the kernels do 7, recomputing the scores and dP for the atomic-free dq pass).
  const double causal_mnk = static_cast<double>(batch) * H * seq * seq * d / 2;
  const double qkvo_bytes = r * (2 * q_dim + 2 * kv_dim) * b2;
  ops.push_back({"attention_fwd", 4 * causal_mnk, qkvo_bytes + static_cast<double>(batch) * H * seq * b4,
                 [&] { return cuda::FlashAttentionForward(ctx, zb, sf, xb, yb, yb, batch, seq, H, KV, d); }});
  ops.push_back({"attention_bwd", 10 * causal_mnk, 2 * qkvo_bytes + r * (q_dim + 2 * kv_dim) * 2 * b4,
                 [&] { return cuda::FlashAttentionBackward(ctx, dxf, dwf, dwf, zb, xb, yb, yb, zb, sf, batch, seq, H, KV, d); }});
  ops.push_back({"swiglu_fwd", 6 * r * F, 3 * r * F * b2, [&] { return cuda::SwiGluForward(ctx, zb, xb, yb, rows * F); }});
  ops.push_back({"swiglu_bwd", 12 * r * F, 3 * r * F * b2 + 4 * r * F * b4,
                 [&] { return cuda::SwiGluBackward(ctx, dxf, dwf, zb, xb, yb, rows * F); }});
  ops.push_back({"residual_add", r * C, 3 * r * C * b2, [&] { return cuda::ResidualAdd(ctx, zb, xb, yb, rows * C); }});
  ops.push_back({"cross_entropy_fwd_bwd", 6 * r * V, 2 * r * V * b2, [&]() -> Status {
                   // Targets are the tokens (all valid); dlogits over the logits, as the head does.
                   return cuda::CrossEntropyForwardBackward(ctx, xb, xb, tk, rows, V, 1.0).status();
                 }});
  const int64_t layer_params = C * (q_dim + 2 * kv_dim) + q_dim * C + 3 * C * F + 2 * C;
  ops.push_back({"overflow_check_and_norm", 3.0 * layer_params, layer_params * b4,
                 [&]() -> Status { return cuda::OverflowCheckAndNorm(ctx, dwf, std::min(layer_params, std::max(F, V) * C), 1.0f).status(); }});
  ops.push_back({"fp32_to_bf16", 0, layer_params * (b4 + b2),
                 [&] { return cuda::Fp32ToBf16(ctx, wb, dwf, std::min(layer_params, std::max(F, V) * C)); }});

  TF_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Timeline> timeline, cuda::Timeline::Start(ctx));
  std::vector<TraceRecord> out;
  for (const OpProbe& op : ops) {
    auto record = [&](int64_t rep, std::pair<double, double> t) {
      return Record("probe.gpu." + op.name, Op::kCompute, "gpu0.compute", rep, static_cast<int64_t>(op.bytes), op.flops, t);
    };
    TF_RETURN_IF_ERROR(TimeRepeated(*timeline, ctx.stream(), o.repetitions, op.run, record, &out));
    Report(o, "probe.gpu." + op.name);
  }
  return out;
}

StatusOr<std::vector<TraceRecord>> ProbeNccl(const cuda::Context& ctx, nccl::Communicator& comm,
                                             const std::vector<int64_t>& sizes, const GpuProbeOptions& o) {
  TF_RETURN_IF_ERROR(CheckOptions(o, "probe nccl"));
  if (sizes.empty()) return InvalidArgument("probe nccl: no sizes given");
  for (int64_t s : sizes) {
    if (s < 4 || s % 4 != 0) return InvalidArgument("probe nccl: size " + std::to_string(s) + " is not a positive multiple of 4");
  }
  const int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer send, Filled(ctx, largest * comm.ranks()));
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer recv, Filled(ctx, largest * comm.ranks()));
  TF_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Timeline> timeline, cuda::Timeline::Start(ctx));
  std::vector<TraceRecord> out;
  for (int64_t size : sizes) {
    const int64_t count = size / 4;
    const std::pair<Op, const char*> kinds[] = {
        {Op::kAllGather, "allgather"}, {Op::kReduceScatter, "reducescatter"}, {Op::kAllReduce, "allreduce"}};
    for (const auto& [op, name] : kinds) {
      auto run = [&, op = op] {
        switch (op) {
          case Op::kAllGather: return comm.AllGather(send.data(), recv.data(), count, nccl::DType::kFloat32);
          case Op::kReduceScatter: return comm.ReduceScatter(send.data(), recv.data(), count, nccl::DType::kFloat32);
          default: return comm.AllReduce(send.data(), recv.data(), count, nccl::DType::kFloat32);
        }
      };
      auto record = [&, op = op, name = name](int64_t rep, std::pair<double, double> t) {
        TraceRecord rec = Record(std::string("probe.nccl.") + name, op, "gpu0.coll", rep, size, 0, t);
        rec.threads = comm.ranks();  // participants, as a collective task's `ranks`
        return rec;
      };
      TF_RETURN_IF_ERROR(TimeRepeated(*timeline, comm.stream(), o.repetitions, run, record, &out));
    }
    Report(o, "probe.nccl " + std::to_string(size) + " B");
  }
  return out;
}

}  // namespace tierflow::real
