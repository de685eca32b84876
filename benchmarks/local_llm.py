"""Latency of the local LLM on RAG-style prompts: time to first token and total seconds per answer.

Usage: ``python benchmarks/local_llm.py [--model qwen2.5-1.5b] [--questions 4] [--max-tokens 128]
[--cache off|on|both]``. Prints JSON.

Each prompt is the product's own answer prompt (``retrieval.stages.generate.cited.answer_messages``:
system prompt, five ``<passage>`` blocks, the question) built from a HotpotQA distractor-dev
question (``../shared/datasets/hotpotqa``): its supporting paragraphs first, then distractors, a
passage topped up with the next paragraph until it holds >= 100 cl100k tokens (the product's chunks
are ~160), five passages, 1,000-1,200 cl100k tokens in all. Every answer is streamed at
temperature 0 through the OpenAI client; ``ttft_s`` is the time to the first content token.

For each cache setting a fresh server (``llm.local.local_llm_start``) answers, in order:
``cold`` each question once (different passages: only the system prompt is a shared prefix);
``again`` the last question repeated at once (llama.cpp reuses the live KV cache of the same
prompt); ``back`` the first question after the others (only ``--cache`` keeps its state).
``peak_rss_mb`` is the server's peak resident memory (VmHWM); ``load_average_1min_*`` how busy
the machine was (other processes share its cores).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import django_setup  # noqa: E402

django_setup()

import openai  # noqa: E402
from django.conf import settings  # noqa: E402

from llm.local import local_llm_model_path, local_llm_start, local_model_get  # noqa: E402
from llm.tokenizer import count_tokens  # noqa: E402
from retrieval.stages.generate.cited import answer_messages  # noqa: E402
from retrieval.types import Passage  # noqa: E402

HOTPOTQA = Path(__file__).resolve().parent.parent.parent / "shared" / "datasets" / "hotpotqa"
PASSAGES, PASSAGE_TOKENS = 5, 100


def question_messages(item: dict) -> list[dict[str, str]]:
    """The answer prompt for one HotpotQA item: five passages of >= 100 tokens, supporting first."""
    titles = item["context"]["title"]
    paragraphs = [(t, " ".join(s).strip()) for t, s in zip(titles, item["context"]["sentences"], strict=True)]
    supporting = set(item["supporting_facts"]["title"])
    paragraphs.sort(key=lambda p: p[0] not in supporting)
    passages = []
    while paragraphs and len(passages) < PASSAGES:
        title, text = paragraphs.pop(0)
        while paragraphs and count_tokens(text) < PASSAGE_TOKENS:
            more_title, more = paragraphs.pop(0)
            text += f"\n\n{more_title}. {more}"
        anchor = SimpleNamespace(heading=title, version=SimpleNamespace(document=SimpleNamespace(title=title)))
        passages.append(Passage(anchor=anchor, text=text, score=1.0))
    return answer_messages(item["question"], passages, reverse_pack=False)


def prompt_counter(model: str):
    """A function counting a chat prompt's tokens as the server sees them (the GGUF's own chat
    template and tokenizer, vocabulary loaded alone), or ``None`` for a model with a named format.
    The server's streamed answers carry no usage, hence this."""
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    if local_model_get(model).chat_format:
        return None
    vocab = Llama(str(local_llm_model_path(settings.KB_DATA_DIR, model)), vocab_only=True, verbose=False)
    eos, bos = vocab.token_eos(), vocab.token_bos()
    formatter = Jinja2ChatFormatter(
        template=vocab.metadata["tokenizer.chat_template"],
        eos_token=vocab._model.token_get_text(eos),
        bos_token=vocab._model.token_get_text(bos),
    )
    return lambda messages: len(
        vocab.tokenize(formatter(messages=messages).prompt.encode(), add_bos=False, special=True)
    )


def streamed(client: openai.OpenAI, model: str, messages, *, max_tokens: int, count=None) -> dict:
    """One streamed answer: seconds to the first token and in all, prompt and completion tokens
    (from the stream's usage, else ``count(messages)`` and the number of content chunks: llama.cpp
    sends one token per chunk)."""
    started = time.perf_counter()
    first = None
    usage = None
    pieces = []
    chunks = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in chunks:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices or []:
            if choice.delta and choice.delta.content:
                first = first or time.perf_counter()
                pieces.append(choice.delta.content)
    total = time.perf_counter() - started
    return {
        "ttft_s": round((first or time.perf_counter()) - started, 2),
        "total_s": round(total, 2),
        "prompt_tokens": usage.prompt_tokens if usage else (count(messages) if count else None),
        "completion_tokens": usage.completion_tokens if usage else len(pieces),
        "answer": "".join(pieces).strip()[:160],
    }


def run(model: str, items: list[dict], *, cache: bool, max_tokens: int) -> dict:
    """Answer ``items`` cold, the last one again, then the first one back, on a fresh server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.perf_counter()
    process = local_llm_start(settings.KB_DATA_DIR, port=port, model=model, cache=cache, timeout_s=300)
    load_s = time.perf_counter() - started
    load_average = round(os.getloadavg()[0], 1)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local", timeout=900, max_retries=0)
    prompts = [question_messages(item) for item in items]
    count = prompt_counter(model)
    try:
        calls = [
            {"kind": "cold", "question": i, **streamed(client, model, p, max_tokens=max_tokens, count=count)}
            for i, p in enumerate(prompts)
        ]
        last = len(prompts) - 1
        calls.append(
            {
                "kind": "again",
                "question": last,
                **streamed(client, model, prompts[last], max_tokens=max_tokens, count=count),
            }
        )
        calls.append(
            {"kind": "back", "question": 0, **streamed(client, model, prompts[0], max_tokens=max_tokens, count=count)}
        )
        peak_rss_mb = _peak_rss_mb(process.pid)
    finally:
        process.terminate()
        process.wait(30)
    cold = [c for c in calls if c["kind"] == "cold"]
    return {
        "cache": cache,
        "server_start_s": round(load_s, 1),
        "peak_rss_mb": peak_rss_mb,
        "load_average_1min_at_start": load_average,
        "cold_median_ttft_s": statistics.median(c["ttft_s"] for c in cold),
        "cold_median_total_s": statistics.median(c["total_s"] for c in cold),
        "cold_median_prompt_tokens": statistics.median(c["prompt_tokens"] or 0 for c in cold),
        "cold_median_completion_tokens": statistics.median(c["completion_tokens"] for c in cold),
        "cold_decode_tokens_per_s": round(
            sum(c["completion_tokens"] for c in cold) / sum(c["total_s"] - c["ttft_s"] for c in cold), 1
        ),
        "calls": calls,
    }


def _peak_rss_mb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    except OSError:
        return None
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-1.5b")
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--cache", choices=["off", "on", "both"], default="both")
    args = parser.parse_args()
    items = json.loads((HOTPOTQA / "hotpotqa-distractor-dev50.json").read_text())[: args.questions]
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.cache]
    results = [run(args.model, items, cache=cache, max_tokens=args.max_tokens) for cache in modes]
    report = {"model": args.model, "max_tokens": args.max_tokens, "cpus": os.cpu_count()}
    # Other work on the machine slows the answers: the load average says how busy it was.
    report["load_average_1min_at_end"] = round(os.getloadavg()[0], 1)
    print(json.dumps({**report, "runs": results}, indent=2))


if __name__ == "__main__":
    main()
