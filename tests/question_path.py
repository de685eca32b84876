"""How far a question travels: the functions that receive it, from an entry point to the run.

``question_path(call, question)`` runs ``call()`` under a profiler hook (``sys.setprofile``) and
records, in order, every function of the project (not of the tests or the libraries) that is
called with the question among its arguments: its text, or the ``AnswerRequest`` that carries it.
The entry point itself (a view, an API method, an MCP tool), which receives the HTTP request or
the tool's arguments before the question is read from them, is counted first. The path ends where
the pipeline puts the request down in the run's state (``RunState``): the stages read it there,
and what happens to the answer afterwards is the answer's path.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from retrieval.request import AnswerRequest

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = ("tests/", ".venv/", "benchmarks/")
# Where the path ends: the run's state is built (the dataclass's __init__ has no file; its
# __post_init__ has). The stages read the request from the state; what is done with the answer
# afterwards (the turn stored, the page rendered) is the answer's path, not the question's.
RUN_STATE = ("retrieval/state.py", "RunState.__post_init__")


@dataclass
class QuestionPath:
    """The stops of one question: ``(file, function)`` pairs in call order, each once."""

    stops: list[tuple[str, str]]

    @property
    def functions(self) -> int:
        return len(self.stops)

    @property
    def files(self) -> int:
        return len({file for file, _ in self.stops})

    def as_dict(self) -> dict:
        return {
            "functions": self.functions,
            "files": self.files,
            "stops": [f"{file}:{function}" for file, function in self.stops],
        }


def _project_file(filename: str) -> str | None:
    if filename.startswith("<"):  # code made at run time (a dataclass's __init__) has no file
        return None
    try:
        relative = Path(filename).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    return None if relative.startswith(OUTSIDE) else relative


def _carries(value, question: str) -> bool:
    if isinstance(value, AnswerRequest):
        return True
    return isinstance(value, str) and value.strip() == question and question != ""


def question_path(call, question: str, *, entry: tuple[str, str]) -> QuestionPath:
    """Run ``call()`` and return the ``QuestionPath`` of ``question``, starting at ``entry``
    (``(file, function)``, counted first). Functions receiving the question are those with an
    argument that is an ``AnswerRequest`` or the question's text (stripped)."""
    question = question.strip()
    stops: list[tuple[str, str]] = [entry]
    seen = {entry}

    arrived = [False]  # the run's state is built: the path ends

    def profile(frame, event, _arg):
        code = frame.f_code
        if event != "call" or arrived[0]:
            return
        file = _project_file(code.co_filename)
        if file is None:
            return
        count = code.co_argcount + code.co_kwonlyargcount
        names = code.co_varnames[: count + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)]
        values = [frame.f_locals.get(name) for name in names]
        flat = []
        for value in values:  # a mapping (keyword arguments, a form's data) is looked into, once
            if isinstance(value, dict):
                flat.extend(value.values())
            elif isinstance(value, tuple):
                flat.extend(value)
            else:
                flat.append(value)
        if (file, code.co_qualname) == RUN_STATE or any(_carries(value, question) for value in flat):
            stop = (file, code.co_qualname)
            if stop not in seen:
                seen.add(stop)
                stops.append(stop)
            if stop == RUN_STATE:
                arrived[0] = True

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(previous)
    return QuestionPath(stops=stops)
