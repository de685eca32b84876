"""The string fields of a JSON reply, read as it streams: ``FieldReader``.

The LLM answers with a flat JSON object (``{"short_answer": "...", "answer": "..."}``,
``retrieval.stages.generate.cited.ANSWER_SCHEMA``). While it streams, the reader hands out the
decoded text of one field (the explanation) piece by piece, so a page can show the prose as it
is written and never the raw JSON; it also reads a reply that is cut off (``max_tokens``) or not
JSON at all. A hand-written state machine over the characters, for this flat shape only: the
top-level keys and their string values (escapes decoded, ``\\uXXXX`` surrogate pairs joined);
a non-string value is skipped up to the next ``,`` or ``}``. A reply that does not open with
``{`` (after whitespace and an optional ```` ```json ```` fence) is prose: all of it is the
streamed field's text (``raw``).
"""

from __future__ import annotations

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_FENCE = "```"


class FieldReader:
    """Reads a streamed flat JSON object; ``feed(delta)`` returns the new text of field ``stream``.

    After each ``feed``: ``fields`` holds every string field seen so far, decoded (the last one
    maybe partial), ``closed`` the names of fields whose string has ended, ``raw`` is true when
    the reply turned out not to be JSON (then ``fields[stream]`` is the whole reply so far), and
    ``text`` is everything fed. ``complete`` says the closing ``}`` was read.
    """

    def __init__(self, stream: str = "answer"):
        self.stream = stream
        self.fields: dict[str, str] = {}
        self.closed: set[str] = set()
        self.raw = False
        self.complete = False
        self.text = ""
        self._state = "start"
        self._key = ""
        self._escape = ""  # "" outside an escape; "\\" after a backslash; "\\uXXX" while reading hex
        self._high = ""  # a high surrogate waiting for its low half
        self._fence = ""

    def feed(self, delta: str) -> str:
        """Read ``delta``; the text it adds to field ``stream`` ("" when none)."""
        out: list[str] = []
        for char in delta:
            self.text += char
            self._char(char, out)
        return "".join(out)

    def _char(self, char: str, out: list[str]) -> None:
        state = self._state
        if state == "raw":
            self._append(char, out)
        elif state == "start":
            if char.isspace():
                return
            if char == "{":
                self._state = "key_or_end"
            elif char == "`":
                self._state, self._fence = "fence", char
            else:
                self._to_raw(out)
        elif state == "fence":  # ```json, then a newline, then the object
            if char == "\n" and self._fence.startswith(_FENCE):
                self._state = "start"
            elif len(self._fence) < len(_FENCE) and char != "`":
                self._to_raw(out)
            else:
                self._fence += char
        elif state == "key_or_end":
            if char == '"':
                self._state, self._key = "key", ""
            elif char == "}":
                self._state, self.complete = "done", True
        elif state == "key":
            if self._escape:
                self._key += self._decoded(char) or ""
            elif char == "\\":
                self._escape = "\\"
            elif char == '"':
                self._state = "colon"
            else:
                self._key += char
        elif state == "colon":
            if char == ":":
                self._state = "value"
        elif state == "value":
            if char == '"':
                self._state = "string"
                self.fields[self._key] = ""
            elif not char.isspace():
                self._state = "other"
        elif state == "string":
            if self._escape:
                decoded = self._decoded(char)
                if decoded:
                    self._append(decoded, out, key=self._key)
            elif char == "\\":
                self._escape = "\\"
            elif char == '"':
                self.closed.add(self._key)
                self._state = "after_value"
            else:
                self._append(char, out, key=self._key)
        elif state in ("after_value", "other"):
            if char == ",":
                self._state = "key_or_end"
            elif char == "}":
                self._state, self.complete = "done", True

    def _to_raw(self, out: list[str]) -> None:
        """Not JSON: everything read so far, and all that follows, is the streamed field's text."""
        self.raw, self._state = True, "raw"
        self.fields = {self.stream: ""}
        self._append(self.text.lstrip(), out)

    def _append(self, text: str, out: list[str], *, key: str | None = None) -> None:
        key = self.stream if key is None else key
        self.fields[key] = self.fields.get(key, "") + text
        if key == self.stream:
            out.append(text)

    def _decoded(self, char: str) -> str | None:
        """The next character of an escape sequence; its text once complete, else ``None``."""
        if self._escape == "\\":
            if char == "u":
                self._escape = "\\u"
                return None
            self._escape = ""
            return _ESCAPES.get(char, char)
        self._escape += char
        if len(self._escape) < 6:
            return None
        hex_digits, self._escape = self._escape[2:], ""
        try:
            code = int(hex_digits, 16)
        except ValueError:
            return ""
        if 0xD800 <= code < 0xDC00:
            self._high = chr(code)
            return ""
        if 0xDC00 <= code < 0xE000 and self._high:
            pair, self._high = self._high + chr(code), ""
            return pair.encode("utf-16", "surrogatepass").decode("utf-16")
        return chr(code)


def fields_read(text: str, *, stream: str = "answer") -> FieldReader:
    """A ``FieldReader`` that has read all of ``text`` (a whole, possibly cut or non-JSON, reply)."""
    reader = FieldReader(stream)
    reader.feed(text)
    return reader
