#!/usr/bin/env python3
"""Golden outputs of an independent reference for tierflow's C++ training math (real/train).

Builds a very small Llama with Hugging Face transformers (PyTorch, eager attention), gives it
random bf16-representable weights, runs forward and backward in float64 on fixed byte-level
tokens, and writes into tests/train/data/:

  golden_llama_config.json   the Hugging Face config.json of the model
  golden_llama.safetensors   its weights (BF16, Hugging Face tensor names)
  golden_outputs.safetensors tokens [B, T] (I32), logits [B, T, V] (F32), loss [1] (F64), and
                             "grad.<name>" (F32) for every parameter

The loss is LlamaForCausalLM's with labels = input_ids: the mean cross-entropy over the B*(T-1)
shifted positions (position t predicts token t+1; the last position of each row has no target).
The reference runs in float64 except where Hugging Face itself casts to float32 (RMSNorm's
normalisation, the attention softmax, the rotary tables and the loss), all far below the 1e-4
tolerance of the C++ test (train_golden_test.cc).

Reference tool only, never a runtime dependency: pip install torch transformers safetensors.
Run from anywhere: python3 tests/train/make_golden.py
"""
import json
import pathlib

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE / "data"

CONFIG = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,  # grouped-query attention: 2 query heads per kv head
    vocab_size=128,         # byte-level, ASCII only: keeps the committed files small
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    tie_word_embeddings=False,
    attention_bias=False,
    mlp_bias=False,
    hidden_act="silu",
)
BATCH, SEQ = 2, 16
TEXT = ("In the beginning God created the heaven and the earth. "
        "And the earth was without form, and void.")


def main():
    torch.manual_seed(20240601)
    config = LlamaConfig(**CONFIG)
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:  # norm weights: around 1, so their gradients are exercised
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:  # larger than the 0.02 init so that attention is far from uniform
                p.copy_(0.15 * torch.randn_like(p))
            p.copy_(p.to(torch.bfloat16).float())  # exactly representable in the BF16 file

    weights = {n: p.detach().to(torch.bfloat16).contiguous() for n, p in model.named_parameters()}
    DATA.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(DATA / "golden_llama.safetensors"), metadata={"format": "pt"})
    config_dict = config.to_dict()
    config_dict.pop("_attn_implementation_autoset", None)
    (DATA / "golden_llama_config.json").write_text(json.dumps(config_dict, indent=2, sort_keys=True) + "\n")

    raw = TEXT.encode("ascii")
    tokens = torch.tensor(list(raw[: BATCH * SEQ]), dtype=torch.long).view(BATCH, SEQ)
    assert int(tokens.max()) < CONFIG["vocab_size"]

    model = model.double()
    model.train()  # no dropout in Llama; train mode only matters for the gradient
    out = model(input_ids=tokens, labels=tokens)
    out.loss.backward()

    golden = {
        "tokens": tokens.to(torch.int32).contiguous(),
        "logits": out.logits.detach().float().contiguous(),
        "loss": out.loss.detach().double().reshape(1),
    }
    for name, p in model.named_parameters():
        golden["grad." + name] = p.grad.detach().float().contiguous()
    save_file(golden, str(DATA / "golden_outputs.safetensors"),
              metadata={"generator": "tests/train/make_golden.py",
                        "torch": torch.__version__,
                        "transformers": __import__("transformers").__version__})
    print(f"loss {out.loss.item():.10f}; wrote {len(weights)} weights, {len(golden)} outputs to {DATA}")


if __name__ == "__main__":
    main()
