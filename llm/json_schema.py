"""JSON output checked on our side: the ``response_format`` forms an endpoint may accept, the
schema spelled out in a prompt, a reply's JSON object found and a schema's validator built.

``LLMClient.structured``, ``tool_call`` and ``stream(schema=...)`` use these; nothing here sends
a request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from jsonschema import SchemaError
from jsonschema.validators import validator_for

from llm.endpoint import Messages

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_NAME = re.compile(r"[^A-Za-z0-9_-]")


def schema_name(name: str) -> str:
    """``name`` as OpenAI accepts a schema's or function's name: letters, digits, ``_``, ``-``, 64 at most."""
    return _NAME.sub("_", name)[:64] or "output"


def _strict_compatible(schema: Any) -> bool:
    """Whether OpenAI's strict mode accepts ``schema``: closed objects, every property required."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" and "properties" in schema:
            properties = schema["properties"]
            if schema.get("additionalProperties") is not False or set(schema.get("required", [])) != set(properties):
                return False
        return all(_strict_compatible(value) for value in schema.values())
    if isinstance(schema, list):
        return all(_strict_compatible(value) for value in schema)
    return True


# The response_format forms, in the order tried: OpenAI's; llama.cpp's; none (schema in the prompt).
JSON_MODES: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    "json_schema": lambda schema, name: {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": schema_name(name), "schema": schema, "strict": _strict_compatible(schema)},
        }
    },
    "json_object": lambda schema, name: {"response_format": {"type": "json_object", "schema": schema}},
    "prompt": lambda schema, name: {},
}


def with_schema_instruction(messages: Messages, schema: dict[str, Any]) -> Messages:
    """``messages`` with the JSON schema spelled out at the end of the last user turn."""
    instruction = f"Reply with only a JSON object that matches this JSON schema:\n{json.dumps(schema)}"
    if messages and messages[-1].get("role") == "user" and isinstance(messages[-1].get("content"), str):
        last = messages[-1]
        return [*messages[:-1], {**last, "content": f"{last['content']}\n\n{instruction}"}]
    return [*messages, {"role": "user", "content": instruction}]


def schema_validator(schema: dict[str, Any]) -> Any:
    """A ``jsonschema`` validator of ``schema``'s draft; ``ValueError`` if ``schema`` is not valid."""
    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"Invalid JSON schema: {exc.message}") from exc
    return cls(schema)


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in ``text``: bare, in a ```json fence, or between the outer braces."""
    text = (text or "").strip()
    if not text:
        raise ValueError("empty reply")
    candidates = [text]
    fenced = _FENCE.search(text)
    if fenced:
        candidates.append(fenced.group(1).strip())
    first, last = text.find("{"), text.rfind("}")
    if 0 <= first < last:
        candidates.append(text[first : last + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    raise ValueError("not JSON")
