"""Embedding throughput by device (``KB_EMBED_DEVICE``): the product's embedder code on the CPU, and
on a CUDA GPU at fp16 and fp32 when PyTorch sees one; and what that makes the demo's embedding time.

Usage: python benchmarks/embed_device.py [--chunks 512] [--rounds 3] [--model local|mpnet]
Writes benchmarks/results/embed_device.json and prints the JSON.

Each configuration is a ``LocalSentenceEmbedder`` as ingestion builds it (``knowledge.embedders``,
the device's batch size from ``embed_batch_size``), fed real chunk texts as ingestion embeds them
(``benchmarks/embedders.py``'s ``chunk_texts``: the Django docs the demo downloaded, else the
BioASQ abstracts) in slices of four batches, like ``documents_ingest``. Configurations:
``cpu-torch-fp32`` and ``cpu-onnx-fp32`` (the default backend) always; ``cuda-torch-fp16``
(``KB_EMBED_DEVICE=cuda``) and ``cuda-torch-fp32`` (``half=False``) when
``torch.cuda.is_available()``, with the fp16 vectors' cosine to the CPU's fp32 ones. Rounds are
interleaved and the median round is reported, with ``demo_seconds``: the 10,738 chunks of the demo
tenant at that rate. ``cuda_available`` says whether the GPU rows were measured here;
``measured_elsewhere`` carries the GPU figures measured on another machine (labelled as such).
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from _setup import django_setup
from _toolkit import log

DEMO_CHUNKS = 10_738  # the demo tenant: 625 documents of the Django docs
RESULT = Path(__file__).resolve().parent / "results" / "embed_device.json"

# Measured on one H100 with the same architectures (BERT-6 as all-MiniLM-L6-v2, MPNet-12 as
# all-mpnet-base-v2) and random weights, not with this code path; kept for planning only.
MEASURED_ELSEWHERE = {
    "machine": "1 x NVIDIA H100 (and 2 CPU threads), same architectures with random weights",
    "chunks_per_s": {
        "minilm_cuda_fp16": 34_615,
        "minilm_cuda_fp32": 5_912,
        "minilm_cpu_2_threads": 35,
        "mpnet_cuda_fp16": 4_549,
    },
    "demo_seconds": {
        "minilm_cuda_fp16": round(DEMO_CHUNKS / 34_615, 2),
        "minilm_cuda_fp32": round(DEMO_CHUNKS / 5_912, 2),
        "minilm_cpu_2_threads": round(DEMO_CHUNKS / 35, 1),
        "mpnet_cuda_fp16": round(DEMO_CHUNKS / 4_549, 2),
    },
}


def main() -> None:
    django_setup()
    import numpy as np
    import torch
    from embedders import chunk_texts

    from knowledge.embedders import LOCAL_EMBEDDERS
    from knowledge.embedders.device import cuda_available

    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", choices=sorted(LOCAL_EMBEDDERS), default="local")
    args = parser.parse_args()

    origin, texts = chunk_texts(args.chunks)
    gpu = cuda_available()
    configs = {
        "cpu-torch-fp32": {"backend": "torch", "device": "cpu"},
        "cpu-onnx-fp32": {"backend": "onnx", "device": "cpu"},
    }
    if gpu:
        configs["cuda-torch-fp16"] = {"backend": "torch", "device": "cuda"}
        configs["cuda-torch-fp32"] = {"backend": "torch", "device": "cuda", "half": False}
    log(f"{len(texts)} chunks from {origin}; {args.rounds} interleaved rounds; cuda available: {gpu}")

    embedders = {}
    for name, kwargs in configs.items():
        started = time.perf_counter()
        embedders[name] = LOCAL_EMBEDDERS[args.model](query_cache_size=0, **kwargs)
        embedders[name].embed(texts[:16])  # warm up (kernels, ONNX session)
        log(f"{name}: loaded in {time.perf_counter() - started:.1f}s, batch {embedders[name].batch_size}")

    def embed_all(embedder) -> np.ndarray:
        step = 4 * embedder.batch_size
        return np.concatenate([embedder.embed(texts[i : i + step]) for i in range(0, len(texts), step)])

    rates: dict[str, list[float]] = {name: [] for name in configs}
    vectors: dict[str, np.ndarray] = {}
    for r in range(args.rounds):
        for name, embedder in embedders.items():
            if embedder.device == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            vectors[name] = embed_all(embedder)
            rates[name].append(len(texts) / (time.perf_counter() - started))
            log(f"round {r + 1} {name}: {rates[name][-1]:.1f} chunks/s")

    results = {}
    for name, embedder in embedders.items():
        rate = statistics.median(rates[name])
        results[name] = {
            "backend": embedder.backend,
            "device": embedder.device,
            "fp16": embedder.half,
            "batch_size": embedder.batch_size,
            "chunks_per_s": round(rate, 1),
            "rounds": [round(x, 1) for x in rates[name]],
            "demo_seconds": round(DEMO_CHUNKS / rate, 1),
        }
    if gpu:
        cosine = (vectors["cuda-torch-fp16"] * vectors["cpu-torch-fp32"]).sum(axis=1)
        results["cuda-torch-fp16"]["cosine_to_cpu_fp32"] = {
            "min": round(float(cosine.min()), 5),
            "mean": round(float(cosine.mean()), 5),
        }
    output = {
        "model": args.model,
        "chunks": len(texts),
        "origin": origin,
        "cuda_available": gpu,
        "gpu": torch.cuda.get_device_name(0) if gpu else None,
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "demo_chunks": DEMO_CHUNKS,
        "configs": results,
        "measured_elsewhere": MEASURED_ELSEWHERE,
    }
    RESULT.parent.mkdir(exist_ok=True)
    RESULT.write_text(json.dumps(output, indent=2) + "\n")
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
