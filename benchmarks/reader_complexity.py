"""How the text readers' time grows on inputs shaped to make them backtrack, and what an upload of
that shape at the upload limit costs.

Usage: python benchmarks/reader_complexity.py [--sizes 1024,2048,4096,8192] [--upload-mb 20]
       [--timeout-s 60] [--only SUBSTRING]

For each shape of ``tests/security/test_reader_complexity.py`` (Markdown headings of spaces or
``#``, reST role-like chains and blank lines, unclosed HTML tags, runs of combining marks …):

* ``cpu_s``: the CPU seconds of one read at each size (characters), the reader run in a forked
  child of this process with the parse sandbox bypassed, so a read that passes ``--timeout-s`` is
  stopped and shown as ``null``;
* ``upload``: the file of that shape at ``--upload-mb`` (a web page: at ``KB_WEB_MAX_PAGE_MB``)
  read as the ingestion job reads it (``read_bytes``, or the web connector's ``page_read``), the
  sandbox in place where the code has one: wall seconds and the outcome ("ok", an error code, or
  "timeout" past ``--timeout-s``).

Prints one JSON object. Runs against any version of the readers (it calls only ``read_bytes`` and
``page_read``).
"""

import argparse
import json
import os
import platform
import signal
import struct
import sys
import time

from _setup import django_setup


def _in_child(function, timeout_s: float) -> tuple[str, float | None]:
    """(outcome, seconds) of ``function()`` run in a forked child: "ok" or an error code with its
    CPU seconds (``function`` returns them), or "timeout" and None once ``timeout_s`` wall seconds
    pass."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            outcome, seconds = function()
            os.write(write_fd, struct.pack("<d", seconds) + outcome.encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    deadline = time.monotonic() + timeout_s
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_fd)
            return "timeout", None
        time.sleep(0.02)
    reply = os.read(read_fd, 4096)
    os.close(read_fd)
    if len(reply) < 8:
        return "crashed", None
    return reply[8:].decode(), struct.unpack("<d", reply[:8])[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1024,2048,4096,8192")
    parser.add_argument("--upload-mb", type=float, default=20)
    parser.add_argument("--timeout-s", type=float, default=60)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    django_setup()

    from django.conf import settings

    from core.errors import ApplicationError
    from knowledge.ingestion import sandbox
    from tests.security.test_reader_complexity import READERS, SHAPES

    sizes = [int(size) for size in args.sizes.split(",")]
    isolated = sandbox.parse_isolated

    def upload_of(reader: str, make) -> str:
        """The shape at the upload limit (a web page: at ``KB_WEB_MAX_PAGE_MB``), in bytes."""
        limit = int((settings.KB_WEB_MAX_PAGE_MB * 2**20) if reader == "page" else (args.upload_mb * 10**6))
        sample = make(100_000)
        return make(int(100_000 * limit / len(sample.encode())) - 100)

    def timed(read, text: str, *, in_process: bool):
        def run():
            sandbox.parse_isolated = (lambda parse, **kwargs: parse()) if in_process else isolated
            cpu, wall = time.process_time(), time.monotonic()
            try:
                read(text)
                outcome = "ok"
            except ApplicationError as exc:
                outcome = exc.code
            spent = time.process_time() - cpu if in_process else time.monotonic() - wall
            return outcome, spent

        return run

    results = []
    for reader, shape, make in SHAPES:
        if args.only and args.only not in f"{reader}: {shape}":
            continue
        read = READERS[reader]
        timed(read, make(sizes[0]), in_process=True)()  # here, so that every child has the imports
        cpu_s = {}
        for size in sizes:
            outcome, seconds = _in_child(timed(read, make(size), in_process=True), args.timeout_s)
            cpu_s[size] = None if seconds is None else round(seconds, 4)
            if seconds is None:
                break
        upload = upload_of(reader, make)
        outcome, seconds = _in_child(timed(read, upload, in_process=False), args.timeout_s)
        results.append(
            {
                "reader": reader,
                "shape": shape,
                "cpu_s": cpu_s,
                "upload": {
                    "mb": round(len(upload.encode()) / 10**6, 1),
                    "wall_s": None if seconds is None else round(seconds, 2),
                    "outcome": outcome,
                },
            }
        )
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(
        json.dumps(
            {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load_average": [round(load, 1) for load in os.getloadavg()],
                "timeout_s": args.timeout_s,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
