#!/usr/bin/env python3
"""A Hugging Face model through tierflow and back, family by family (issue "Fine-tune a real
Hugging Face model"): transformers makes a small random model of each family and saves it; tierflow
fine-tunes it from that directory (`run --model-dir`) under zero-infinity with its states on a
disk, 20 iterations of AdamW with a linear warm-up and cosine decay and weight decay, evaluates it
on its held-out batch (`--eval-every`) and saves it in fp32 (`--save-model`); transformers loads the
saved directory unchanged and computes the loss on the same held-out batch. The two losses must
agree within 1e-4 relative (both fp32, the same weights).

Families:
  llama3   Llama-3.2 style: tied embeddings, rope_scaling llama3, grouped-query attention
  llama2   Llama-2 style: untied, default rotary, grouped-query attention
  mistral  Mistral: a sliding window (longer than the sequence), rope_theta 1e6
  qwen2    Qwen2: biases on q, k and v, rope_theta 1e6
A family tierflow refuses is reported as refused, with its error.

Measured here (torch 2.15, transformers 5.24; zero-infinity with the states on a disk, 20
iterations, warm-up 4 then cosine, weight decay 0.01): held-out losses within 1.0e-7 (llama3),
4.3e-9 (llama2), 1.9e-8 (mistral) and 1.2e-8 (qwen2) relative.

The held-out batch is tierflow's rule (docs/executor.md, --eval-every): the corpus's last
batch x seq + 1 tokens, as `batch` windows of seq + 1 tokens starting every seq tokens; transformers
gets each window as input_ids and labels (it shifts them itself), so both average the same
batch x seq next-token losses.

  hf_roundtrip.py --tierflow build/cli/tierflow --dir DIR [--families a,b] [--json FILE]
Run through bench/hf_roundtrip.sh, which makes the virtual environment.
"""
import argparse
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(ROOT, "data", "corpus", "kjv-genesis.txt")
SCENARIO = os.path.join(ROOT, "scenarios", "tiny-cpu.yaml")
BATCH, SEQ, ITERATIONS = 1, 64, 20
TOLERANCE = 1e-4

COMMON = dict(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=128, max_position_embeddings=256, rms_norm_eps=1e-5,
              hidden_act="silu")


def families(transformers):
    v5 = int(transformers.__version__.split(".")[0]) >= 5

    def rope(theta, scaling=None):
        if v5:
            return dict(rope_parameters=dict(dict(rope_type="default", rope_theta=theta), **(scaling or {})))
        return dict(rope_theta=theta, rope_scaling=scaling)

    return {
        "llama3": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                   dict(COMMON, tie_word_embeddings=True,
                        **rope(500000.0, dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                              high_freq_factor=4.0, original_max_position_embeddings=32)))),
        "llama2": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                   dict(COMMON, tie_word_embeddings=False, **rope(10000.0))),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM,
                    dict(COMMON, tie_word_embeddings=False, sliding_window=128, **rope(1000000.0))),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
                  dict(COMMON, tie_word_embeddings=False, **rope(1000000.0))),
    }


def held_out(tokens):
    start = len(tokens) - (BATCH * SEQ + 1)
    return [tokens[start + r * SEQ: start + r * SEQ + SEQ + 1] for r in range(BATCH)]


def run_family(name, spec, torch, tierflow, root):
    config_class, model_class, kwargs = spec
    torch.manual_seed(1234)
    model = model_class(config_class(**kwargs))
    src = os.path.join(root, name, "in")
    model.save_pretrained(src, safe_serialization=True)  # fp32, as made
    out = os.path.join(root, name, "out")
    disks = os.path.join(root, name, "disks")
    os.makedirs(disks, exist_ok=True)
    cmd = [tierflow, "run", SCENARIO, "--model-dir", src, "--disk-root", disks, "--data", CORPUS,
           "--set", f"training.sequence_length={SEQ}", "--set", f"training.micro_batch_size={BATCH}",
           "--set", "training.optimizer={lr: 1e-3, weight_decay: 0.01}",
           "--set", f"training.lr_schedule={{type: cosine, warmup_steps: 4, total_steps: {ITERATIONS}}}",
           "-n", str(ITERATIONS), "--eval-every", str(ITERATIONS), "--save-model", out, "--save-dtype", "fp32",
           "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"family": name, "status": "refused", "error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}
    report = json.loads(r.stdout)
    tierflow_loss = report["eval"][-1]["loss"]
    import transformers
    dtype_key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    saved = model_class.from_pretrained(out, attn_implementation="eager", **{dtype_key: torch.float32})
    saved.eval()
    with open(CORPUS, "rb") as f:
        tokens = list(f.read())
    ids = torch.tensor(held_out(tokens), dtype=torch.long)
    with torch.no_grad():
        hf_loss = saved(input_ids=ids, labels=ids).loss.item()
    rel = abs(hf_loss - tierflow_loss) / abs(hf_loss)
    return {"family": name, "status": "ok" if rel <= TOLERANCE else "differs", "tierflow_eval_loss": tierflow_loss,
            "transformers_loss": hf_loss, "relative_difference": rel, "first_loss": report["loss"][0],
            "last_loss": report["loss"][-1], "perplexity": math.exp(tierflow_loss)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tierflow", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--families", default="llama3,llama2,mistral,qwen2")
    p.add_argument("--json")
    a = p.parse_args()
    import torch
    import transformers
    all_families = families(transformers)
    results = []
    for name in a.families.split(","):
        if name not in all_families:
            sys.exit(f"hf_roundtrip.py: unknown family '{name}' (known: {', '.join(all_families)})")
        results.append(run_family(name, all_families[name], torch, os.path.abspath(a.tierflow), os.path.abspath(a.dir)))
        res = results[-1]
        if res["status"] == "refused":
            print(f"{name:8s} refused by tierflow: {res['error']}")
        else:
            print(f"{name:8s} loss {res['first_loss']:.4f} -> {res['last_loss']:.4f}; held-out: tierflow {res['tierflow_eval_loss']:.7f}, "
                  f"transformers {res['transformers_loss']:.7f}, relative {res['relative_difference']:.2e} "
                  f"({'within' if res['status'] == 'ok' else 'OUTSIDE'} {TOLERANCE:g})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "transformers": transformers.__version__, "results": results}, f, indent=2)
    return 0 if all(r["status"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
