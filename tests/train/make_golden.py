#!/usr/bin/env python3
"""Golden outputs of an independent reference for tierflow's C++ training math (real/train).

For each family, builds a very small model with Hugging Face transformers (PyTorch, eager
attention), gives it random bf16-representable weights, runs forward and backward in float64 on
fixed byte-level tokens, and writes a Hugging Face directory tests/train/data/FAMILY/:

  config.json          the model's config.json, as transformers writes it
  model.safetensors    its weights (BF16, Hugging Face tensor names; a tied head is not stored)
  golden.safetensors   tokens [B, T] (I32), logits [B, T, V] (F32), loss [1] (F64), and
                       "grad.<name>" (F32) for every parameter

Families (each a Hugging Face class and what of it the C++ must match):
  llama    LlamaForCausalLM, Llama 2 style: grouped-query attention, untied, default rotary
  llama3   LlamaForCausalLM, Llama 3.2 style: tied embeddings, rope_theta 500000 and rope
           scaling of type llama3 (its original context 8 tokens, so that the sequence of 16
           spans stretched, blended and kept frequencies), grouped-query attention
  mistral  MistralForCausalLM: grouped-query attention, untied, a sliding window of 16 (the
           sequence fits it: plain causal attention, as tierflow runs it)
  qwen2    Qwen2ForCausalLM: biases on q, k and v, grouped-query attention, untied,
           rope_theta 1e6

The loss is the CausalLM's with labels = input_ids: the mean cross-entropy over the B*(T-1)
shifted positions (position t predicts token t+1; the last position of each row has no target).
The reference runs in float64 except where Hugging Face itself casts to float32 (RMSNorm's
normalisation, the attention softmax, the rotary tables and the loss), all far below the 1e-4
tolerance of the C++ test (train_golden_test.cc).

Reference tool only, never a runtime dependency: pip install torch transformers safetensors.
Run from anywhere: python3 tests/train/make_golden.py [FAMILY ...]   (default: every family)
"""
import json
import pathlib
import sys

import torch
import transformers
from safetensors.torch import save_file

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE / "data"
TRANSFORMERS_5 = int(transformers.__version__.split(".")[0]) >= 5

COMMON = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,  # grouped-query attention: 2 query heads per kv head
    vocab_size=128,         # byte-level, ASCII only: keeps the committed files small
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
    hidden_act="silu",
)


def rope(theta, scaling=None):
    """The rotary settings as this transformers spells them (rope_parameters from 5 on)."""
    if TRANSFORMERS_5:
        return dict(rope_parameters=dict(dict(rope_type="default", rope_theta=theta), **(scaling or {})))
    return dict(rope_theta=theta, rope_scaling=scaling)


FAMILIES = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
              dict(COMMON, tie_word_embeddings=False, attention_bias=False, mlp_bias=False, **rope(10000.0))),
    "llama3": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
               dict(COMMON, tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
                    **rope(500000.0, dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0, original_max_position_embeddings=8)))),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM,
                dict(COMMON, tie_word_embeddings=False, sliding_window=16, **rope(1000000.0))),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
              dict(COMMON, tie_word_embeddings=False, use_sliding_window=False, **rope(1000000.0))),
}
BATCH, SEQ = 2, 16
TEXT = ("In the beginning God created the heaven and the earth. "
        "And the earth was without form, and void.")


def make(family):
    config_class, model_class, kwargs = FAMILIES[family]
    torch.manual_seed(20240601)
    config = config_class(**kwargs)
    config._attn_implementation = "eager"
    model = model_class(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):  # Qwen2's q, k and v biases: around 0
                p.copy_(0.1 * torch.randn_like(p))
            elif p.ndim == 1:  # norm weights: around 1, so their gradients are exercised
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:  # larger than the 0.02 init so that attention is far from uniform
                p.copy_(0.15 * torch.randn_like(p))
            p.copy_(p.to(torch.bfloat16).float())  # exactly representable in the BF16 file

    out_dir = DATA / family
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = {n: p.detach().to(torch.bfloat16).contiguous() for n, p in model.named_parameters()}
    save_file(weights, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config_dict = config.to_dict()
    config_dict.pop("_attn_implementation_autoset", None)
    (out_dir / "config.json").write_text(json.dumps(config_dict, indent=2, sort_keys=True) + "\n")

    # Each row starts with the last token of the one before: the rows are the windows tierflow's
    # token loader cuts from the chain raw[: BATCH * (SEQ - 1) + 1] at sequence SEQ - 1, so that a
    # run of the chain gives this loss (HF's labels = input_ids drop each row's last position).
    raw = TEXT.encode("ascii")
    tokens = torch.tensor([list(raw[b * (SEQ - 1): b * (SEQ - 1) + SEQ]) for b in range(BATCH)], dtype=torch.long)
    assert int(tokens.max()) < COMMON["vocab_size"]

    model = model.double()
    model.train()  # no dropout in these models; train mode only matters for the gradient
    out = model(input_ids=tokens, labels=tokens)
    out.loss.backward()

    golden = {
        "tokens": tokens.to(torch.int32).contiguous(),
        "logits": out.logits.detach().float().contiguous(),
        "loss": out.loss.detach().double().reshape(1),
    }
    for name, p in model.named_parameters():  # a tied head's gradient is in the embedding's
        golden["grad." + name] = p.grad.detach().float().contiguous()
    save_file(golden, str(out_dir / "golden.safetensors"),
              metadata={"generator": "tests/train/make_golden.py", "family": family,
                        "torch": torch.__version__, "transformers": transformers.__version__})
    print(f"{family}: loss {out.loss.item():.10f}; wrote {len(weights)} weights, {len(golden)} outputs to {out_dir}")


def main():
    families = sys.argv[1:] or list(FAMILIES)
    for family in families:
        if family not in FAMILIES:
            sys.exit(f"make_golden.py: unknown family '{family}' (known: {', '.join(FAMILIES)})")
        make(family)


if __name__ == "__main__":
    main()
