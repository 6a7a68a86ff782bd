"""Build the tiny random-weight Llama the real-vLLM tests serve (no model hub, seconds).

Run with the vLLM environment's Python (it needs torch, transformers and tokenizers, which
the project's own environment does not install)::

    .venv-vllm/bin/python tests/support/tiny_model.py [--out .cache/tiny-llama] [--force]

What it writes into ``--out`` (default ``.cache/tiny-llama/``, gitignored):

- a byte-level BPE tokenizer trained on a fixed corpus generated here (the probe and bench
  filler words, their task sentences and seeded word sequences), wrapped as
  ``PreTrainedTokenizerFast`` with a chat template, so every byte string is encodable;
- a ``LlamaForCausalLM`` with random weights from a fixed seed: hidden 512, 8 heads
  (head_dim 64; vLLM's CPU attention supports 32, 64, 80, ..., not 16), 6 layers, the
  vocabulary exactly the tokenizer's size (a sampled id the tokenizer lacks would break
  detokenizing).

Why not smaller: at hidden 128 / 2 layers a token takes ~1 ms, faster than vLLM's CPU
frontend handles an output on two shared cores. Its output loop then never yields to the
HTTP tasks, and whole responses leave in one burst after the last token (every client sees
TTFT = the generation time and TPOT 0, on a random share of requests). At ~5 ms a token the
frontend keeps up and streams stream.

Idempotent: when ``--out`` already holds a build of this recipe (``build.json`` records the
recipe's hash) nothing is rebuilt. The output is deterministic for a given torch and
tokenizers version; tests never depend on which tokens the random model samples.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from exporter.probing.prompts import CACHED_TASK, LONG_TASK, SHORT_TASK, WORDS  # noqa: E402

DEFAULT_OUT = ROOT / ".cache" / "tiny-llama"
SEED = 20261201
VOCAB = 3000
SPECIAL = ("<|begin_of_text|>", "<|end_of_text|>", "<|pad|>")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
MODEL = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_hidden_layers": 6,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
RECIPE = json.dumps(
    {"seed": SEED, "vocab": VOCAB, "special": SPECIAL, "chat": CHAT_TEMPLATE, "model": MODEL,
     "version": 1},
    sort_keys=True,
)
RECIPE_HASH = hashlib.sha256(RECIPE.encode()).hexdigest()[:16]


def corpus() -> list[str]:
    """A fixed training text: what the probes and bench send, and seeded word sequences."""
    rng = random.Random(SEED)
    lines = [SHORT_TASK, LONG_TASK, CACHED_TASK, " ".join(WORDS)]
    lines += [" ".join(rng.choice(WORDS) for _ in range(40)) for _ in range(2000)]
    lines += ["".join(rng.choice("0123456789abcdef") for _ in range(16)) for _ in range(500)]
    lines += [f"[{i:x}] {w} {w.capitalize()} {w.upper()}." for i, w in enumerate(WORDS)]
    return lines


def built(out: Path) -> bool:
    try:
        stamp = json.loads((out / "build.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(stamp.get("recipe") == RECIPE_HASH and (out / "model.safetensors").exists())


def build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=SPECIAL[0],
        eos_token=SPECIAL[1],
        pad_token=SPECIAL[2],
        model_max_length=MODEL["max_position_embeddings"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(SEED)
    config = LlamaConfig(
        **{k: v for k, v in MODEL.items() if k not in ("architectures", "model_type")},
        vocab_size=len(fast),
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    config.architectures = MODEL["architectures"]
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    (out / "build.json").write_text(
        json.dumps({"recipe": RECIPE_HASH, "vocab_size": len(fast), "seed": SEED}) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args(argv)
    if args.force or not built(args.out):
        build(args.out)
        print(f"built {args.out}")
    else:
        print(f"up to date: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
