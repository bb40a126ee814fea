#!/usr/bin/env python3
"""Your text as an llm.c token file, with your model's own tokenizer, for `tierflow run --data`.

tierflow reads llm.c token files (a 1024-byte header: magic 20240520 and version 1 for uint16
tokens, 20240801 and version 7 for uint32; then the count; then the tokens). This script makes one
from text files with the tokenizer of a Hugging Face model directory: its tokenizer.json through
the `tokenizers` library, or, without one, transformers' AutoTokenizer. It runs outside tierflow,
in a virtual environment of its own:

    python3 -m venv .cache/tok-venv && .cache/tok-venv/bin/pip install tokenizers   # (or transformers)
    .cache/tok-venv/bin/python scripts/tokenize_text.py --model-dir MODEL -o data/mine.tokens notes/*.txt
    ./build/cli/tierflow run SCHEDULE --data data/mine.tokens ...

Each file is one document: its tokens follow the tokenizer's beginning-of-sequence token (when it
has one) and end with its end-of-sequence token, as Hugging Face's pretraining scripts join
documents. Tokens go out as uint16 when every id of the vocabulary fits, else uint32.
"""
import argparse
import json
import pathlib
import struct
import sys

MAGIC_U16, VERSION_U16 = 20240520, 1
MAGIC_U32, VERSION_U32 = 20240801, 7


def load_tokenizer(model_dir: pathlib.Path):
    """(encode(text) -> ids, bos id or None, eos id or None, vocabulary size)."""
    config = json.loads((model_dir / "config.json").read_text()) if (model_dir / "config.json").exists() else {}
    if (model_dir / "tokenizer.json").exists():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        encode = lambda text: tok.encode(text, add_special_tokens=False).ids
        vocab = tok.get_vocab_size(with_added_tokens=True)
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir)
        encode = lambda text: tok.encode(text, add_special_tokens=False)
        vocab = len(tok)

    def token_id(key):
        value = config.get(key)
        return value[0] if isinstance(value, list) else value

    return encode, token_id("bos_token_id"), token_id("eos_token_id"), max(vocab, config.get("vocab_size", 0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True, type=pathlib.Path, help="the Hugging Face model directory (its tokenizer)")
    parser.add_argument("-o", "--output", required=True, type=pathlib.Path, help="the token file to write")
    parser.add_argument("texts", nargs="+", type=pathlib.Path, help="text files, one document each (UTF-8)")
    args = parser.parse_args()

    encode, bos, eos, vocab = load_tokenizer(args.model_dir)
    tokens = []
    for path in args.texts:
        text = path.read_text(encoding="utf-8")
        tokens += ([bos] if bos is not None else []) + encode(text) + ([eos] if eos is not None else [])
    if len(tokens) >= 2**31:
        print(f"{args.output}: {len(tokens)} tokens, more than a token file's count holds (2^31 - 1)", file=sys.stderr)
        return 1
    wide = vocab > 65536 or max(tokens, default=0) > 65535
    header = [MAGIC_U32 if wide else MAGIC_U16, VERSION_U32 if wide else VERSION_U16, len(tokens)] + [0] * 253
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_name(args.output.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}{'I' if wide else 'H'}", *tokens))
    tmp.replace(args.output)
    print(f"{args.output}: {len(tokens)} tokens of {len(args.texts)} documents, {'uint32' if wide else 'uint16'} "
          f"(vocabulary {vocab})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
