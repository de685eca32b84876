"""Retrieval quality with the enrichment field at a few weights vs off: keyphrases, entities, or doc2query.

Usage: python benchmarks/enrichment_quality.py [--datasets bioasq hotpotqa rag4p]
       [--weights 0 0.1 0.2 0.3 0.5] [--modes lexical hybrid] [--keep]
       [--variants keyphrases keyphrases+entities entities]
       [--llm-url URL [--model qwen2.5-1.5b] [--questions-per-chunk 3]] [--first N] [--output-name NAME]
Each dataset is ingested into its ``bench-<dataset>`` tenant (as ``retrieval_quality.py`` does,
reused while unchanged). Off (weight 0: the field is not queried) is evaluated once per mode;
then, per variant of the field, the chunks are (re)enriched (``chunks_enrich(llm=None,
force=True)``, timed: ``keyphrases`` = YAKE, ``entities`` = spaCy named entities,
``keyphrases+entities`` = both) and every mode is evaluated at every other
``enrichment_weight``, with otherwise default settings. With ``--llm-url`` the field also holds
doc2query questions (Nogueira et al. 2019) written by that endpoint's model, in a tenant of its
own (``bench-<dataset>-d2q``; each variant asks the LLM again).
``--first N`` keeps the first N questions of BioASQ and HotpotQA and only their documents (every
LLM call costs seconds on a CPU; BioASQ: the documents relevant to them, HotpotQA: their
context paragraphs, distractors included). Prints JSON (nDCG@10, recall@10, hit@1 and the
headline metric's change from off per weight, milliseconds per chunk of keyphrases and entities,
the 1-minute load average around each enrichment; the NER model is loaded before the timings)
and writes benchmarks/results/<output-name>.json (default ``enrichment_quality``). Latencies are
not comparable across runs on a loaded machine; the metrics are deterministic.
"""

import argparse
import json
import os
import time
from pathlib import Path

from _setup import ROOT, django_setup
from _toolkit import log, tenant_for
from retrieval_quality import DATASETS, REFERENCE

METRICS = ("ndcg@10", "recall@10", "hit@1")
# What each variant of the field holds: (keyphrases, entities).
VARIANTS = {"keyphrases": (True, False), "keyphrases+entities": (True, True), "entities": (False, True)}


def first_questions(dataset, name: str, n: int):
    """``dataset`` cut to its first ``n`` questions and their documents (module docstring)."""
    from dataclasses import replace

    from embedders import bioasq_subset

    if name == "bioasq":
        return bioasq_subset(dataset, n)
    if name != "hotpotqa":
        return replace(dataset, judgments=dataset.judgments[:n])
    raw = json.loads(DATASETS[name][0].read_text())[:n]
    titles = {title for item in raw for title in item["context"]["title"]}
    documents = [d for d in dataset.documents if d.external_id in titles]
    return replace(dataset, judgments=dataset.judgments[:n], documents=documents)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--weights", nargs="+", type=float, default=[0.0, 0.1, 0.2, 0.3, 0.5])
    parser.add_argument("--modes", nargs="+", default=["lexical", "hybrid"], choices=["lexical", "dense", "hybrid"])
    parser.add_argument("--variants", nargs="+", default=["keyphrases"], choices=list(VARIANTS))
    parser.add_argument("--keep", action="store_true", help="keep the bench-* tenants for the next run")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--output-name", default="enrichment_quality", help="file name (no .json) under --output")
    parser.add_argument("--llm-url", default=None, help="an OpenAI-compatible /v1 URL: doc2query questions too")
    parser.add_argument("--model", default="qwen2.5-1.5b", help="the model --llm-url serves")
    parser.add_argument("--questions-per-chunk", type=int, default=3)
    parser.add_argument("--first", type=int, default=None, help="only the first N questions and their documents")
    parser.add_argument(
        "--cost-sample", type=int, default=300, help="chunks on which entities, keyphrases and the embedder are timed"
    )
    args = parser.parse_args()
    if args.llm_url:
        os.environ.update(
            KB_LLM_MODEL=args.model, OPENAI_BASE_URL=args.llm_url, KB_LLM_TIMEOUT_S="600", KB_LLM_CONCURRENCY="1"
        )
    django_setup()
    from core.models import Tenant
    from knowledge.embedders import get_embedder
    from knowledge.enrichment.entities import entities_extract
    from knowledge.enrichment.keyphrases import keyphrases_extract
    from knowledge.enrichment.services import CONFIGURED, chunks_enrich
    from knowledge.models import Chunk, ChunkEnrichment
    from knowledge.services.embeddings import embedding_input
    from quality.importers import dataset_load
    from quality.services import evaluation_run
    from retrieval.search import SearchConfig

    questions = f" and {args.questions_per_chunk} doc2query questions by {args.model}" if args.llm_url else ""
    results: dict = {
        "machine": f"{os.cpu_count()} cores",
        "field": {variant: variant.replace("+", " and ") + questions for variant in args.variants},
        "first_questions": args.first,
        "weights": args.weights,
        "modes": args.modes,
        "datasets": {},
    }

    def evaluate(tenant, judgment_list, mode: str, weight: float) -> dict:
        base = SearchConfig.for_tenant(tenant)
        config = SearchConfig.from_dict({**base.as_dict(), "enrichment_weight": weight})
        run = evaluation_run(judgment_list=judgment_list, mode=mode, config=config, k=100)
        metrics = {m: round(run.metrics[m], 4) for m in METRICS}
        log(f"{tenant.slug} {mode} w={weight}: {metrics}")
        return {"weight": weight, **metrics, "p50_ms": round(run.metrics["p50_ms"], 1)}

    if any(VARIANTS[variant][1] for variant in args.variants):
        # The NER model loads once per process (about 1 s): loaded here, so that the per-chunk cost
        # measured below is the extraction's alone.
        t = time.perf_counter()
        entities_extract(["Loading the model in Lisbon."])
        results["entity_model_load_seconds"] = round(time.perf_counter() - t, 2)

    def timed(texts: list[str], inputs: list[str], embedder) -> dict:
        """Milliseconds per text of the entities and the keyphrases of ``texts`` and of embedding
        ``inputs`` (the embedder's view of the same texts), each the best of two interleaved passes."""
        steps = {
            "entities": lambda: entities_extract(texts),
            "keyphrases": lambda: [keyphrases_extract(text) for text in texts],
            "embedder": lambda: embedder.embed(inputs),
        }
        best = dict.fromkeys(steps, float("inf"))
        load_before = os.getloadavg()[0]
        for _ in range(2):
            for step, run in steps.items():
                t = time.perf_counter()
                run()
                best[step] = min(best[step], time.perf_counter() - t)
        return {
            "texts": len(texts),
            "mean_words": round(sum(len(text.split()) for text in texts) / len(texts)),
            **{f"{step}_ms_per_chunk": round(1000 * seconds / len(texts), 2) for step, seconds in best.items()},
            "entities_vs_embedder": round(best["entities"] / best["embedder"], 3),
            "keyphrases_vs_embedder": round(best["keyphrases"] / best["embedder"], 3),
            "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        }

    def cost(tenant) -> dict:
        """The ingest-time cost of the entities beside the keyphrases and the tenant's embedder:
        on the dataset's own chunks (the first ``--cost-sample`` by id), and on passages of about
        300 tokens (the ingestion's chunk size: consecutive chunks joined up to 230 words or
        more), since the datasets' chunks are shorter and the NER cost grows with the text."""
        chunks = list(Chunk.objects.for_tenant(tenant).filter(is_current=True).order_by("pk")[: args.cost_sample])
        embedder = get_embedder(chunks[0].embedder)
        embedder.embed([embedding_input(c) for c in chunks[:8]])  # warm up
        result = {"chunks": timed([c.text for c in chunks], [embedding_input(c) for c in chunks], embedder)}
        passages, words = [], []
        for chunk in chunks:
            words += chunk.text.split()
            if len(words) >= 230:
                passages.append(" ".join(words))
                words = []
        if len(passages) >= 10:
            result["passages_300_tokens"] = timed(passages, passages, embedder)
        return result

    for name in args.datasets:
        dataset = dataset_load(name=name, paths=DATASETS[name])
        label = name
        if args.first and name != "rag4p":
            dataset, label = first_questions(dataset, name, args.first), f"{name}-first{args.first}"
        slug = f"bench-{label}-d2q" if args.llm_url else f"bench-{label}"
        tenant, judgment_list, _report = tenant_for(dataset, name=name, slug=slug)
        try:
            headline = REFERENCE[name]["metric"]
            entry = {
                "questions": len(dataset.judgments),
                "chunks": Chunk.objects.for_tenant(tenant).filter(is_current=True).count(),
                "headline": headline,
                "off": {mode: evaluate(tenant, judgment_list, mode, 0.0) for mode in args.modes},
                "variants": {},
            }
            if any(VARIANTS[variant][1] for variant in args.variants):
                entry["cost"] = cost(tenant)
                log(f"{name} cost: {entry['cost']}")
            for variant in args.variants:
                keyphrases, entities = VARIANTS[variant]
                t = time.perf_counter()
                load_before = os.getloadavg()[0]
                enriched = chunks_enrich(
                    tenant_id=tenant.pk,
                    llm=CONFIGURED if args.llm_url else None,
                    questions=args.questions_per_chunk,
                    keyphrases=keyphrases,
                    entities=entities,
                    force=True,
                )
                done = max(enriched["chunks"], 1)
                stored = ChunkEnrichment.objects.for_tenant(tenant)
                counts = [len(e) for e in stored.values_list("entities", flat=True)]
                result = {
                    "enriched": stored.count(),
                    "enrich_seconds": round(time.perf_counter() - t, 2),
                    "keyphrase_ms_per_chunk": round(1000 * enriched["keyphrase_seconds"] / done, 2),
                    "entity_ms_per_chunk": round(1000 * enriched["entity_seconds"] / done, 2),
                    "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
                    "with_entities": enriched["with_entities"],
                    "entities_per_chunk": round(sum(counts) / max(len(counts), 1), 2),
                    "entities_failed": enriched["entities_failed"],
                    "examples": [
                        {"keyphrases": k, "entities": e}
                        for k, e in stored.order_by("chunk_id").values_list("keyphrases", "entities")[:3]
                    ],
                    "modes": {},
                }
                if args.llm_url:
                    result |= {
                        "with_questions": stored.exclude(questions=[]).count(),
                        "questions_failed": stored.exclude(questions_error="").count(),
                        "llm_seconds_per_chunk": round(enriched["llm_seconds"] / done, 2),
                        "usage": enriched.get("usage"),
                        "question_examples": list(
                            stored.exclude(questions=[]).order_by("chunk_id").values_list("questions", flat=True)[:5]
                        ),
                    }
                log(f"{name} {variant}: enriched {enriched}")
                for mode in args.modes:
                    off = entry["off"][mode]
                    runs = [off if w == 0 else evaluate(tenant, judgment_list, mode, w) for w in args.weights]
                    result["modes"][mode] = [
                        {**r, "headline_delta": round(r[headline] - off[headline], 4)} for r in runs
                    ]
                entry["variants"][variant] = result
            results["datasets"][name] = entry
        finally:
            if not args.keep:
                Tenant.objects.filter(pk=tenant.pk).delete()
    # A weight is acceptable for a variant when no dataset's headline metric drops by more than
    # 0.005 in any mode.
    results["acceptable_weights"] = {
        variant: [
            w
            for i, w in enumerate(args.weights)
            if all(
                run[i]["headline_delta"] >= -0.005
                for data in results["datasets"].values()
                for run in data["variants"][variant]["modes"].values()
            )
        ]
        for variant in args.variants
    }
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / f"{args.output_name}.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
