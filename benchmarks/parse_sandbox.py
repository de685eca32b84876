"""What the parse sandbox costs per file: the fork, the pipe and the wait.

Usage: python benchmarks/parse_sandbox.py [--rounds R] [--no-embedder]
Reads a one-page PDF and a small .docx (a heading, two paragraphs, a table) ``R`` times each with
``read_bytes`` as it runs (in a forked child, ``knowledge.ingestion.sandbox``) and with the same
reader called in this process, and prints one JSON object with the medians and the difference.
The process first loads the default embedder and embeds a sentence (unless ``--no-embedder``), so
it is as large as a worker that ingests: a fork copies the page tables of what is resident.
"""

import argparse
import io
import json
import os
import platform
import statistics
import time

from _setup import django_setup


def small_pdf() -> bytes:
    stream = b"BT /F1 12 Tf 72 720 Td (Quarterly travel policy for all staff) Tj ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def small_docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Travel policy", level=1)
    document.add_paragraph("Staff may book economy flights for trips under six hours.")
    document.add_paragraph("Hotels are booked through the travel desk.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "City", "Nightly rate"
    table.cell(1, 0).text, table.cell(1, 1).text = "Paris", "180 EUR"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


def median_ms(function, rounds: int) -> float:
    function()  # warm: imports, caches
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        function()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--no-embedder", action="store_true")
    args = parser.parse_args()
    django_setup()
    from django.conf import settings

    from knowledge.ingestion import sandbox
    from knowledge.ingestion.readers import read_bytes

    if not args.no_embedder:
        from knowledge.embedders import get_embedder

        get_embedder(settings.KB_EMBEDDER).embed(["A sentence to load the model."])
    isolated = sandbox.parse_isolated
    results = {}
    for name, data in (("policy.pdf", small_pdf()), ("travel.docx", small_docx())):
        sandbox.parse_isolated = isolated
        sandboxed = median_ms(lambda data=data, name=name: read_bytes(data, name=name), args.rounds)
        sandbox.parse_isolated = lambda parse, **kwargs: parse()
        in_process = median_ms(lambda data=data, name=name: read_bytes(data, name=name), args.rounds)
        sandbox.parse_isolated = isolated
        results[name] = {
            "bytes": len(data),
            "in_process_ms": round(in_process, 1),
            "sandboxed_ms": round(sandboxed, 1),
            "overhead_ms": round(sandboxed - in_process, 1),
        }
    print(
        json.dumps(
            {
                "rounds": args.rounds,
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "kernel": platform.release(),
                "process_rss_mb": round(rss_mb()),
                "embedder_loaded": not args.no_embedder,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
