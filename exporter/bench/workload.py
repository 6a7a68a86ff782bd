"""What a bench run sends: the i-th request's prompt, length and headers."""

from __future__ import annotations

import random
from typing import Any

from exporter.bench.config import BenchConfig
from exporter.probing.prompts import sized_prompt
from exporter.probing.request import RequestSpec


class RequestSource:
    """The i-th request of the run: prompts from the file in order, or synthetic ones."""

    def __init__(self, cfg: BenchConfig, run_id: str) -> None:
        self._cfg = cfg
        self._run_id = run_id
        self._rng = random.Random(cfg.seed)

    def spec(self, i: int) -> RequestSpec:
        cfg = self._cfg
        assert cfg.model is not None, "cli.py resolves the model before the run"
        if cfg.prompts:
            item = cfg.prompts[i % len(cfg.prompts)]
            prompt = item.prompt
            max_tokens = item.max_tokens or cfg.max_tokens.sample(self._rng)
        else:
            # The run id in front keeps this run's prompts out of an earlier run's cache.
            unique = f"{self._run_id}-{i}"
            prompt = sized_prompt(cfg.prompt_tokens.sample(self._rng), unique, self._rng)
            max_tokens = cfg.max_tokens.sample(self._rng)
        extra: tuple[tuple[str, Any], ...] = (("ignore_eos", True),) if cfg.ignore_eos else ()
        return RequestSpec(
            url=cfg.url,
            api=cfg.api,
            model=cfg.model,
            prompt=prompt,
            max_tokens=max_tokens,
            api_key=cfg.api_key,
            # Lets engine logs be matched with records (vLLM honours X-Request-Id).
            headers=(("X-Request-Id", f"bench-{self._run_id}-{i}"),),
            extra_body=extra,
        )
