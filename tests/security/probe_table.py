"""The probe table: what each attack of ``test_source_attacks``, ``test_upload_attacks`` and
``test_git_folder_attacks`` got, printed at the end of the test run (``tests/security/conftest.py``),
for ``docs/security.md``.

    bash scripts/test.sh tests/security/test_source_attacks.py tests/security/test_upload_attacks.py \
        tests/security/test_git_folder_attacks.py
"""

from __future__ import annotations

ROWS: list[dict] = []


def probe_record(*, attack: str, guard: str, outcome: str, detail: str = "", **figures) -> None:
    """One row: ``attack`` (what was sent), ``guard`` (on/off), ``outcome`` (what happened, in
    short), ``detail`` (the message a user sees) and ``figures`` (seconds, MB, connections...)."""
    ROWS.append({"attack": attack, "guard": guard, "outcome": outcome, "detail": detail[:160], **figures})


def probe_table() -> str:
    """The rows as a Markdown table (guard on first), or "" when none was recorded."""
    if not ROWS:
        return ""
    extra = sorted({key for row in ROWS for key in row} - {"attack", "guard", "outcome", "detail"})
    columns = ["attack", "guard", "outcome", *extra, "detail"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in sorted(ROWS, key=lambda r: (r["guard"] != "on", r["attack"])):
        cells = [str(row.get(column, "")).replace("|", "\\|").replace("\n", " ") for column in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
