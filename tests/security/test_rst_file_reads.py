"""A tenant's reStructuredText never makes the server read its own files: ``include``,
``literalinclude`` and ``raw :file:`` in an uploaded or synced .rst leave the server's files out
of the document's text."""

from pathlib import Path

from knowledge.ingestion.readers import read_bytes

SECRET = "operator-secret-7f3a9c"


def test_an_uploaded_rst_file_cannot_include_a_file_of_the_server(tmp_path: Path):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    rst = (
        "Title\n=====\n\nBefore.\n\n"
        f".. include:: {secret}\n\n"
        f".. literalinclude:: {secret}\n\n"
        f".. raw:: html\n   :file: {secret}\n\n"
        "After.\n"
    ).encode()

    document = read_bytes(rst, name="attack.rst")[0]

    assert SECRET not in document.text
    assert "Before." in document.text and "After." in document.text
