"""The local models of ``llm.local``: assembling a GGUF from its installed parts (with small fake
parts), and the real Qwen2.5-Coder-1.5B server answering, in full and streamed."""

import hashlib
import time
from dataclasses import replace

import pytest

from llm import local
from llm.client import LLMClient
from llm.local import (
    QWEN_25_CODER_15B,
    LocalModelChecksumError,
    LocalModelPartMissing,
    ModelPart,
    local_llm_command,
    local_model_assemble,
)

PIECES = [b"GGUF-first-part|", b"second part|", b"the third and last part"]


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Three small part files in ``tmp_path/site`` that the part locator finds instead of packages.
    Returns a model made of them (right size and checksum) and the list of part modules looked up."""
    site = tmp_path / "site"
    site.mkdir()
    files = {}
    for n, piece in enumerate(PIECES, start=1):
        files[f"fake_model_part{n}"] = site / f"part{n:02d}.bin"
        files[f"fake_model_part{n}"].write_bytes(piece)
    opened = []

    def part_path(part):
        opened.append(part.module)
        return files[part.module]

    monkeypatch.setattr(local, "part_path", part_path)
    whole = b"".join(PIECES)
    model = replace(
        QWEN_25_CODER_15B,
        alias="fake",
        filename="fake.gguf",
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
        parts=tuple(
            ModelPart(f"fake-model-part{n}==0.2.0", f"fake_model_part{n}", f"data/part{n:02d}.bin") for n in (1, 2, 3)
        ),
    )
    return model, opened


def test_assembling_concatenates_the_parts_in_order_and_records_the_checksum(fake_parts, tmp_path):
    model, _ = fake_parts
    path = local_model_assemble(model, tmp_path / "models")
    assert path == tmp_path / "models" / "fake.gguf"
    assert path.read_bytes() == b"".join(PIECES)
    assert (tmp_path / "models" / "fake.gguf.sha256").read_text().strip() == model.sha256
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["fake.gguf", "fake.gguf.sha256"]


def test_a_wrong_checksum_raises_and_leaves_no_file(fake_parts, tmp_path):
    model, _ = fake_parts
    with pytest.raises(LocalModelChecksumError, match="expected"):
        local_model_assemble(replace(model, sha256="0" * 64), tmp_path / "models")
    assert list((tmp_path / "models").iterdir()) == []


def test_a_missing_part_names_the_package_to_install(tmp_path):
    missing = replace(
        QWEN_25_CODER_15B,
        parts=(ModelPart("kb-absent-model-part7==0.2.0", "kb_absent_model_part7", "data/part07.bin"),),
    )
    with pytest.raises(LocalModelPartMissing, match=r"pip install kb-absent-model-part7==0\.2\.0") as raised:
        local_model_assemble(missing, tmp_path / "models")
    assert raised.value.package == "kb-absent-model-part7==0.2.0"
    assert not (tmp_path / "models").exists()


def test_an_assembled_model_is_reused_without_reading_its_parts_again(fake_parts, tmp_path, monkeypatch):
    model, opened = fake_parts
    first = local_model_assemble(model, tmp_path / "models")
    opened.clear()
    monkeypatch.setattr(local, "_sha256_of", lambda path: pytest.fail("a reused model is not hashed again"))
    assert local_model_assemble(model, tmp_path / "models") == first
    assert opened == []


def test_a_model_file_without_its_checksum_sidecar_is_hashed_once_then_reused(fake_parts, tmp_path):
    model, opened = fake_parts
    path = local_model_assemble(model, tmp_path / "models")
    path.with_name("fake.gguf.sha256").unlink()
    opened.clear()
    assert local_model_assemble(model, tmp_path / "models") == path
    assert opened == [] and path.with_name("fake.gguf.sha256").read_text().strip() == model.sha256


def test_a_truncated_model_file_is_assembled_again(fake_parts, tmp_path):
    model, _ = fake_parts
    path = local_model_assemble(model, tmp_path / "models")
    path.write_bytes(b"GGUF-first")
    assert local_model_assemble(model, tmp_path / "models").read_bytes() == b"".join(PIECES)


def test_qwen_is_served_with_the_chat_template_of_its_gguf_and_gemma_with_llama_cpps_gemma_format(tmp_path):
    from llm.local import GEMMA_3_270M

    qwen = local_llm_command(QWEN_25_CODER_15B, tmp_path / "q.gguf", port=8001)
    gemma = local_llm_command(GEMMA_3_270M, tmp_path / "g.gguf", port=8001)
    assert "--chat_format" not in qwen and qwen[qwen.index("--model_alias") + 1] == "qwen2.5-1.5b"
    assert gemma[gemma.index("--chat_format") + 1] == "gemma"
    assert "--cache" not in qwen
    cached = local_llm_command(QWEN_25_CODER_15B, tmp_path / "q.gguf", port=8001, cache=True)
    assert cached[cached.index("--cache") + 1] == "true"


def test_the_local_server_runs_the_threads_it_is_given_and_at_least_one(tmp_path):
    def threads(command):
        return command[command.index("--n_threads") + 1]

    assert threads(local_llm_command(QWEN_25_CODER_15B, tmp_path / "q.gguf", port=8001)) == "2"
    assert threads(local_llm_command(QWEN_25_CODER_15B, tmp_path / "q.gguf", port=8001, threads=1)) == "1"
    assert threads(local_llm_command(QWEN_25_CODER_15B, tmp_path / "q.gguf", port=8001, threads=0)) == "1"


# --- the real Qwen2.5-Coder-1.5B (each answer costs 5-40 s on 2 cores) ----------------------------


def test_the_real_qwen_model_answers_that_the_capital_of_france_is_paris(qwen_llm_url):
    llm = LLMClient("qwen2.5-1.5b", base_url=qwen_llm_url, api_key="local", timeout_s=600, retries=0)
    reply = llm.chat(
        [{"role": "user", "content": "What is the capital of France? Answer with one word."}], max_tokens=16
    )
    assert "Paris" in reply.text
    assert reply.usage.tokens_in > 0 and reply.usage.tokens_out > 0


def test_the_real_qwen_model_streams_its_first_token_within_a_minute(qwen_llm_url):
    llm = LLMClient("qwen2.5-1.5b", base_url=qwen_llm_url, api_key="local", timeout_s=600, retries=0)
    messages = [{"role": "user", "content": "Name three French cities, separated by commas."}]
    started = time.perf_counter()
    tokens = llm.stream(messages, max_tokens=24)
    first = next(tokens)
    first_token_s = time.perf_counter() - started
    rest = "".join(tokens)
    total_s = time.perf_counter() - started
    print(f"\nqwen2.5-1.5b on 2 cores: first token after {first_token_s:.2f} s, whole reply after {total_s:.2f} s")
    assert first and first_token_s < 60
    assert (first + rest).strip() and llm.last_stream_usage.tokens_out > 0


# --- manage.py localllm ---------------------------------------------------------------------------


class Served(Exception):
    """Raised instead of replacing the test process with the server."""


def test_localllm_serves_the_chosen_model_and_prints_the_settings_to_use(tmp_path, monkeypatch, capsys):
    from django.core.management import call_command

    from retrieval.management.commands import localllm

    executed = []

    def execv(path, argv):
        executed.append(argv)
        raise Served

    monkeypatch.chdir(tmp_path)  # the command changes directory; monkeypatch changes it back
    monkeypatch.setattr(localllm, "local_llm_model_path", lambda data_dir, model: tmp_path / f"{model}.gguf")
    monkeypatch.setattr(localllm.os, "execv", execv)
    with pytest.raises(Served):
        call_command("localllm", "--model", "qwen2.5-1.5b", "--port", "8123")
    printed = capsys.readouterr().out
    assert "OPENAI_BASE_URL=http://127.0.0.1:8123/v1" in printed and "KB_LLM_MODEL=qwen2.5-1.5b" in printed
    assert executed[0][executed[0].index("--model") + 1] == str(tmp_path / "qwen2.5-1.5b.gguf")
    assert "--chat_format" not in executed[0]


def test_localllm_without_the_models_parts_names_the_package_to_install(monkeypatch):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    absent = ModelPart("kb-absent-model-part1==0.2.0", "kb_absent_model_part1", "data/part01.bin")
    monkeypatch.setitem(local.LOCAL_MODELS, "qwen2.5-1.5b", replace(QWEN_25_CODER_15B, parts=(absent,), size=1))
    with pytest.raises(CommandError, match=r"kb-absent-model-part1==0\.2\.0.*requirements-llm\.txt"):
        call_command("localllm", "--model", "qwen2.5-1.5b")
