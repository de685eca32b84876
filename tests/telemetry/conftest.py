"""Telemetry on, exporting to a real OTLP receiver on loopback, and a scripted LLM endpoint."""

import pytest

from core.telemetry import telemetry_flush, telemetry_setup, telemetry_shutdown
from tests.telemetry.receiver import LLMEndpoint, OTLPReceiver

QUESTION = "How long should spaghetti cook?"
# The default (quoted) answer style asks the model for one line: the answer and its passages.
REPLY = "Nine to eleven minutes [1]"


@pytest.fixture
def receiver():
    with OTLPReceiver() as server:
        yield server


@pytest.fixture
def telemetry_on(receiver, monkeypatch):
    """This process exports spans to ``receiver`` as a gunicorn worker would (Django requests and
    Celery tasks instrumented) until the test ends; ``flush()`` sends what is finished."""
    telemetry_shutdown()  # forget the decision an earlier test's first span made (off)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "kb-tests")
    assert telemetry_setup(django=True, celery=True)
    receiver.flush = telemetry_flush
    yield receiver
    telemetry_shutdown()


@pytest.fixture
def llm_endpoint(settings):
    """The configured LLM (``KB_LLM_MODEL``) is a scripted endpoint that answers ``REPLY``."""
    from llm import circuit_reset

    with LLMEndpoint(REPLY) as endpoint:
        settings.KB_LLM_MODEL = "scripted-model"
        settings.OPENAI_BASE_URL = f"{endpoint.url}/v1"
        settings.OPENAI_API_KEY = "test"
        settings.KB_LLM_RETRIES = 0
        circuit_reset()
        yield endpoint
        circuit_reset()
