#!/usr/bin/env python3
"""PyTorch training a Llama shape in GPU memory: the ceiling tierflow's GPU runs are set against
(issue 58, docs/gpu-results.md).

Hugging Face LlamaForCausalLM with fp32 master weights on the GPU, bf16 autocast for the forward
and backward, the fused AdamW (torch.optim.AdamW(fused=True)) and SDPA attention (FlashAttention's
kernels inside PyTorch): PyTorch at its fastest for a model that fits. With --checkpointing each
decoder layer is recomputed in the backward, as tierflow's Llama steps do (the 1B scenario
checkpoints activations), so the FLOPs match tierflow's; without it, PyTorch keeps every
activation and skips the recompute.

Each iteration is one micro-batch of random tokens (seeded) timed between CUDA synchronisations;
the steady-state time is tierflow's (docs/trace-format.md): the mean of the iterations that are
neither the first nor the last. Writes one JSON object (--json) with the times, the losses and
the peak GPU memory; bench/gpu_report.py turns its time into an MFU with the same FLOP count as
tierflow's runs of the scenario.

  gpu_torch_peer.py [--hidden 2048 --ffn 8192 --layers 16 --heads 32 --kv-heads 8 --vocab 128256]
                    [--seq 1024] [--batch 1] [--iterations 6] [--checkpointing] [--json FILE]
Defaults: Llama-3.2-1B's shape, untied (scenarios/llama3.2-1b-offload.yaml).
"""
import argparse
import json
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--ffn", type=int, default=8192)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--checkpointing", action="store_true", help="recompute each decoder layer in the backward")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args()
    if a.iterations < 3:
        p.error("--iterations: at least 3 (the steady state leaves out the first and the last)")

    import torch
    from train_peers import hf_model
    if not torch.cuda.is_available():
        print("gpu_torch_peer: no CUDA device", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    model = {"hidden": a.hidden, "ffn": a.ffn, "layers": a.layers, "heads": a.heads, "kv_heads": a.kv_heads,
             "vocab": a.vocab, "max_seq": max(a.seq, 2048), "tied_embeddings": False}
    dev = torch.device("cuda")
    net = hf_model(model, a.checkpointing, attention="sdpa", rope_theta=a.rope_theta).to(dev)
    params = sum(x.numel() for x in net.parameters())
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, fused=True)
    gen = torch.Generator(device="cpu").manual_seed(1)
    times, losses = [], []
    torch.cuda.reset_peak_memory_stats()
    for it in range(a.iterations):
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen).to(dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = net(input_ids=tokens[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, a.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        print(f"iteration {it}: loss {losses[-1]:.6f}, {times[-1] * 1e3:.1f} ms", flush=True)
    steady = times[1:-1]
    result = {
        "system": "pytorch-gpu" + ("-ckpt" if a.checkpointing else ""),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "parameters": params,
        "seq": a.seq, "batch": a.batch, "checkpointing": a.checkpointing,
        "iteration_s": sum(steady) / len(steady),
        "times_s": times, "losses": losses,
        "peak_gpu_bytes": torch.cuda.max_memory_allocated(),
    }
    print(f"{result['system']}: {params / 1e9:.3f} B parameters, iteration {result['iteration_s'] * 1e3:.1f} ms "
          f"(steady state), peak GPU memory {result['peak_gpu_bytes'] / 2**30:.2f} GiB")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
