"""Where bench's prompts come from, as ``vllm bench serve`` names them: ``random``
(synthetic filler prompts of ``--prompt-tokens`` lengths; see workload.py), ``sharegpt``
(a ShareGPT-format JSON file) and ``jsonl`` (our own one-object-per-line file, also reached
through ``--prompts``). A bad file is one BenchError naming the file and the entry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.bench.errors import BenchError

DATASETS = ("random", "sharegpt", "jsonl")
#: Speakers of a ShareGPT turn: the prompt's and the reply's (ShareGPT dumps use both
#: spellings of each, depending on the exporting tool).
_HUMAN = frozenset({"human", "user"})
_GPT = frozenset({"gpt", "chatgpt", "assistant"})
#: Bytes per token of English text in BPE vocabularies: the usual rule of thumb. Without
#: the served model's tokenizer this is an estimate; usage.completion_tokens has the truth.
CHARS_PER_TOKEN = 4
#: An output length the server would refuse anyway; keeps a pathological reply in a
#: dataset from asking for one.
MAX_OUTPUT_TOKENS = 1_000_000


@dataclass(frozen=True)
class FilePrompt:
    prompt: str
    max_tokens: int | None


@dataclass(frozen=True)
class Dataset:
    prompts: list[FilePrompt]
    #: Well-formed entries with no human turn answered by a gpt turn (vLLM drops them too).
    skipped: int = 0


def estimate_tokens(text: str) -> int:
    return max(1, min(MAX_OUTPUT_TOKENS, round(len(text) / CHARS_PER_TOKEN)))


def _read(flag: str, path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BenchError(f"{flag} {path}: cannot read: {why}") from None


def load_jsonl(path: str, flag: str = "--prompts") -> Dataset:
    """One ``{"prompt": "...", "max_tokens": N}`` per line; blank lines skipped."""
    text = _read(flag, path)
    prompts: list[FilePrompt] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise BenchError(f"{flag} {path} line {n}: not a JSON object") from None
        prompt = obj.get("prompt") if isinstance(obj, dict) else None
        if not isinstance(prompt, str) or not prompt:
            raise BenchError(f'{flag} {path} line {n}: expected {{"prompt": "..."}}')
        max_tokens = obj.get("max_tokens")
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            raise BenchError(f"{flag} {path} line {n}: max_tokens must be a positive integer")
        prompts.append(FilePrompt(prompt, max_tokens))
    if not prompts:
        raise BenchError(f"{flag} {path}: no prompts in the file")
    return Dataset(prompts)


def _entry_name(i: int, entry: Any) -> str:
    # ShareGPT entries carry an "id"; naming it finds the entry in a 90k-entry file.
    ident = entry.get("id") if isinstance(entry, dict) else None
    return f"entry {i}" + (f" (id {str(ident)[:40]!r})" if isinstance(ident, str | int) else "")


def _pair(path: str, i: int, entry: Any) -> tuple[str, str] | None:
    """(first human turn, the gpt turn answering it), None when the entry has no such
    pair; BenchError when the entry is not ShareGPT-shaped at all."""
    where = f"--dataset-path {path} {_entry_name(i, entry)}"
    turns = entry.get("conversations") if isinstance(entry, dict) else None
    if not isinstance(turns, list):
        raise BenchError(f'{where}: expected {{"conversations": [{{"from": ..., "value": ...}}]}}')
    for t, turn in enumerate(turns):
        if not (isinstance(turn, dict) and isinstance(turn.get("from"), str)
                and isinstance(turn.get("value"), str)):
            raise BenchError(f'{where} turn {t}: expected {{"from": "...", "value": "..."}}')
    for t, turn in enumerate(turns):
        if turn["from"] in _HUMAN and turn["value"].strip():
            reply = turns[t + 1] if t + 1 < len(turns) else None
            if reply is not None and reply["from"] in _GPT and reply["value"].strip():
                return turn["value"], reply["value"]
            return None
    return None


def load_sharegpt(path: str, fixed_max_tokens: bool) -> Dataset:
    """ShareGPT JSON: a list of ``{"conversations": [{"from": "human", "value": ...},
    {"from": "gpt", "value": ...}, ...]}``. Prompt: the first human turn; output length:
    the reply's token estimate, unless ``--max-tokens`` was given (``fixed_max_tokens``)."""
    text = _read("--dataset-path", path)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BenchError(f"--dataset-path {path}: not JSON ({exc})") from None
    if not isinstance(data, list):
        raise BenchError(f"--dataset-path {path}: expected a JSON list of conversations")
    prompts: list[FilePrompt] = []
    skipped = 0
    for i, entry in enumerate(data):
        pair = _pair(path, i, entry)
        if pair is None:
            skipped += 1
            continue
        prompt, reply = pair
        prompts.append(FilePrompt(prompt, None if fixed_max_tokens else estimate_tokens(reply)))
    if not prompts:
        raise BenchError(
            f"--dataset-path {path}: no entry has a human turn followed by a gpt reply"
        )
    return Dataset(prompts, skipped)


def load_dataset(
    name: str | None, path: str | None, prompts_path: str | None, fixed_max_tokens: bool
) -> tuple[str, str | None, Dataset | None]:
    """(dataset name, its file, what it holds; None for random) from the flags."""
    if prompts_path is not None:
        if name not in (None, "jsonl") or path is not None:
            raise BenchError("give --prompts FILE or --dataset-name/--dataset-path, not both")
        return "jsonl", prompts_path, load_jsonl(prompts_path)
    if name is None:
        if path is not None:
            raise BenchError("--dataset-path needs --dataset-name (sharegpt or jsonl)")
        return "random", None, None
    if name not in DATASETS:
        raise BenchError(f"--dataset-name: expected one of {', '.join(DATASETS)}, got {name!r}")
    if name == "random":
        if path is not None:
            raise BenchError("--dataset-name random takes no --dataset-path (see --prompt-tokens)")
        return name, None, None
    if path is None:
        raise BenchError(f"--dataset-name {name} needs --dataset-path FILE")
    if name == "jsonl":
        return name, path, load_jsonl(path, "--dataset-path")
    return name, path, load_sharegpt(path, fixed_max_tokens)
