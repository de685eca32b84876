"""SuperRAG's parallel scoring: wall time of grading 50 candidates at concurrency 1 and 10.

Usage: python benchmarks/superrag_parallel.py [--candidates 50] [--delay 0.2] [--concurrency 10]

A benchmark double stands in for the LLM: an OpenAI-compatible HTTP server (``http.server`` in a
thread on 127.0.0.1) that answers every chat completion after a fixed delay with a grade that
quotes the passage's first sentence. The real ``LLMClient`` and the real scoring stage
(``retrieval.stages.rerank.llm_scoring.candidates_score``) grade the candidates (unsaved chunks:
no database). Prints one JSON object and writes it to
``benchmarks/results/superrag_parallel.json``; the target is ``speedup`` about 10 at
concurrency 10 (calls are I/O-bound, so the pool, not the CPU, sets the pace).
"""

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from _setup import ROOT, django_setup

PASSAGE = re.compile(r"<passage[^>]*>\n(.*?)\n</passage>", re.DOTALL)


class DelayedLLM(BaseHTTPRequestHandler):
    """Answers ``POST /v1/chat/completions`` after ``server.delay_s`` with a grading reply."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        server = self.server
        with server.lock:
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
        time.sleep(server.delay_s)
        with server.lock:
            server.in_flight -= 1
        prompt = body["messages"][-1]["content"]
        found = PASSAGE.search(prompt)
        first_sentence = found.group(1).split(". ")[0] if found else ""
        content = json.dumps({"confidence": 7, "relevant_text": first_sentence})
        payload = json.dumps(
            {
                "id": "bench",
                "object": "chat.completion",
                "created": 0,
                "model": "bench-model",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 200, "completion_tokens": 20, "total_tokens": 220},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):  # quiet
        pass


def main() -> None:
    django_setup()
    from knowledge.models import Chunk
    from llm import LLMClient
    from retrieval.stages.rerank.llm_scoring import candidates_score
    from retrieval.types import SearchResult

    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--delay", type=float, default=0.2, help="seconds the double waits before each reply")
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()

    server = ThreadingHTTPServer(("127.0.0.1", 0), DelayedLLM)
    server.daemon_threads = True
    server.delay_s, server.lock, server.in_flight, server.max_in_flight = args.delay, threading.Lock(), 0, 0
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        llm = LLMClient("bench-model", base_url=url, api_key="bench", concurrency=args.concurrency, retries=0)
        question = "How do I fix a flat bicycle tyre?"
        results = [
            SearchResult(
                chunk=Chunk(
                    pk=i,
                    ordinal=0,
                    heading=f"Note {i}",
                    text=f"Note {i} says to patch the inner tube. It also covers tyre levers and pumps, step {i}.",
                    embedder="local",
                ),
                score=1.0 - i / 100,
                rank=i,
            )
            for i in range(1, args.candidates + 1)
        ]
        candidates_score(question, results[:1], llm=llm, concurrency=1)  # warm-up: imports, connection
        timings: dict[str, float] = {}
        in_flight: dict[str, int] = {}
        for concurrency in (1, args.concurrency):
            server.max_in_flight = 0
            started = time.perf_counter()
            scored = candidates_score(question, results, llm=llm, concurrency=concurrency)
            timings[str(concurrency)] = time.perf_counter() - started
            in_flight[str(concurrency)] = server.max_in_flight
            assert all(c.scored_by == "llm" and c.relevant_text for c in scored), "a grading failed"
    finally:
        server.shutdown()
        server.server_close()
    serial, parallel = timings["1"], timings[str(args.concurrency)]
    output = {
        "candidates": args.candidates,
        "delay_s": args.delay,
        "concurrency": [1, args.concurrency],
        "wall_s": {"concurrency_1": round(serial, 3), f"concurrency_{args.concurrency}": round(parallel, 3)},
        "max_in_flight": in_flight,
        "speedup": round(serial / parallel, 2),
        "ideal_speedup": args.concurrency,
        "through": "LLMClient.structured via candidates_score (llm.map), against a local delayed double",
    }
    text = json.dumps(output, indent=2)
    print(text)
    results_dir = ROOT / "benchmarks" / "results"
    results_dir.mkdir(exist_ok=True)
    (results_dir / "superrag_parallel.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
