"""reStructuredText to plain text with docutils, tolerant of Sphinx's roles and directives.

``rst_plain(text)`` parses ``text`` with docutils' reST parser (no transforms, no file or raw
inclusion, no messages printed) and returns readable text and its section titles in reading order.
Sphinx and Django add roles and directives docutils does not know; each one a document uses is
registered before parsing:

* a role (``:meth:``, ``:class:``, ``:setting:``, ``:doc:`` …) shows its title: the text
  before ``<target>`` when there is one, else the target with ``~a.b.C`` shortened to ``C`` and a
  leading ``!`` dropped and "()" after a ``:meth:`` or ``:func:``, as Sphinx shows it. A role
  may span a line break;
* ``versionadded``, ``versionchanged``, ``versionremoved`` and ``deprecated`` become "New in
  version 5.0." (…) followed by their content;
* ``code-block``, ``sourcecode``, ``code``, ``console``, ``snippet`` and ``doctest`` become
  literal blocks (indented by four spaces in the text, as ``::`` blocks are);
* directives that only index, link or configure (``toctree``, ``index``, ``setting``,
  ``currentmodule``, ``include``, ``raw`` …) are dropped;
* any other directive (``seealso``, ``glossary``, ``method``, ``django-admin`` …) shows its
  argument, if any, then its content.

Text layout: one block per paragraph, title, list item or table row, blocks separated by a blank
line; a paragraph's lines are joined with single spaces. Raises nothing for malformed markup
(docutils reports it at level 5, i.e. not at all, and keeps the text as written).
"""

from __future__ import annotations

import re
import threading

from docutils import frontend, nodes, utils
from docutils.parsers.rst import Directive, Parser, directives, roles

# Directives whose content is code, shown as a literal block.
CODE_DIRECTIVES = frozenset({"code-block", "sourcecode", "code", "console", "snippet", "doctest", "literalinclude"})
# Directives that index, link, or set up the build: nothing of them is text.
SKIPPED_DIRECTIVES = frozenset(
    {
        "toctree",
        "index",
        "highlight",
        "currentmodule",
        "module",
        "default-role",
        "include",
        "raw",
        "contents",
        "sectnum",
        "setting",
        "templatetag",
        "templatefilter",
        "fieldlookup",
        "django-admin-option",
        "tabularcolumns",
        "sectionauthor",
        "meta",
        "role",
        "target-notes",
        "only",
    }
)
VERSION_DIRECTIVES = {
    "versionadded": "New in version",
    "versionchanged": "Changed in version",
    "versionremoved": "Removed in version",
    "deprecated": "Deprecated since version",
}
_ROLE_NAME = re.compile(r"(?<![\w`]):([A-Za-z][\w+.-]*(?::[\w+.-]+)*):`")
_DIRECTIVE_NAME = re.compile(r"^\s*\.\.\s+([A-Za-z][\w+.:-]*)::", re.MULTILINE)
_ROLE_TARGET = re.compile(r"^(.*?)\s*<([^<>]*)>$", re.DOTALL)
_BUILTIN_ROLES = frozenset(roles._role_registry)
_register_lock = threading.Lock()


def rst_plain(text: str) -> tuple[str, list[str]]:
    """``text`` (reST) as readable plain text and its section titles in reading order.

    See the module docstring for what each construct becomes. The titles appear in the text each
    on a line of their own, so ``documents.locate_sections(..., whole_lines=True)`` finds them.
    """
    _register_extensions(text)
    settings = frontend.get_default_settings(Parser)
    settings.report_level = 5
    settings.halt_level = 5
    settings.warning_stream = False
    settings.file_insertion_enabled = False
    settings.raw_enabled = False
    document = utils.new_document("<rst>", settings)
    Parser().parse(text.replace("\r\n", "\n"), document)
    blocks: list[str] = []
    headings: list[str] = []
    _emit(document, blocks, headings)
    return "\n\n".join(block for block in blocks if block.strip()), headings


def _register_extensions(text: str) -> None:
    """Register a generic handler for each role and directive of ``text`` docutils lacks."""
    with _register_lock:
        for name in set(_ROLE_NAME.findall(text)):
            key = name.lower()
            if key not in _BUILTIN_ROLES and key not in roles._roles:
                roles.register_local_role(key, _sphinx_role)
        for name in set(_DIRECTIVE_NAME.findall(text)):
            key = name.lower()
            if key in directives._directives:
                continue
            if key in CODE_DIRECTIVES:
                directives.register_directive(key, CodeDirective)
            elif key in VERSION_DIRECTIVES:
                directives.register_directive(key, VersionDirective)
            elif key in SKIPPED_DIRECTIVES:
                directives.register_directive(key, SkippedDirective)
            elif key not in directives._directive_registry:
                directives.register_directive(key, GenericDirective)


def role_title(text: str) -> str:
    """What Sphinx shows for a role's ``text``: ``title <target>`` -> ``title``; ``~a.b.C`` ->
    ``C``; a leading ``!`` or ``.`` dropped; whitespace (a line break too) collapsed."""
    text = " ".join(text.split())
    match = _ROLE_TARGET.match(text)
    if match and match.group(1):
        return match.group(1)
    target = match.group(2) if match else text
    target = target.lstrip("!")
    return target[1:].rsplit(".", 1)[-1] if target.startswith("~") else target.lstrip(".")


def _sphinx_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    title = role_title(utils.unescape(text))
    if name.rsplit(":", 1)[-1] in ("meth", "func") and "<" not in text and not title.endswith(")"):
        title += "()"  # as Sphinx shows functions and methods
    return [nodes.literal(rawtext, title)], []


class _AnyOptions(dict):
    """An option spec that accepts every option (Sphinx directives have many) and keeps its value."""

    def __missing__(self, key):
        return directives.unchanged


_ANY_OPTIONS = _AnyOptions({"class": directives.unchanged})


class GenericDirective(Directive):
    """An unknown directive: its argument as a paragraph, then its content parsed as reST."""

    optional_arguments = 1
    final_argument_whitespace = True
    option_spec = _ANY_OPTIONS
    has_content = True

    def run(self):
        found: list[nodes.Node] = []
        if self.arguments and self.arguments[0].strip():
            found.append(nodes.paragraph(text=" ".join(self.arguments[0].split())))
        if self.content:
            box = nodes.container()
            self.state.nested_parse(self.content, self.content_offset, box)
            found.append(box)
        return found


class VersionDirective(GenericDirective):
    """``versionadded`` and the like: "New in version 5.0." then the content."""

    def run(self):
        version = " ".join(self.arguments[0].split()) if self.arguments else ""
        found: list[nodes.Node] = [nodes.paragraph(text=f"{VERSION_DIRECTIVES[self.name.lower()]} {version}.".strip())]
        if self.content:
            box = nodes.container()
            self.state.nested_parse(self.content, self.content_offset, box)
            found.append(box)
        return found


class CodeDirective(GenericDirective):
    """``code-block`` and the like: the content as a literal block."""

    def run(self):
        code = "\n".join(self.content)
        return [nodes.literal_block(code, code)] if code.strip() else []


class SkippedDirective(GenericDirective):
    """A directive that holds no text (``toctree``, ``index`` …)."""

    def run(self):
        return []


_SKIPPED_NODES = (
    nodes.comment,
    nodes.system_message,
    nodes.target,
    nodes.substitution_definition,
    nodes.raw,
    nodes.pending,
    nodes.footnote_reference,
    nodes.citation_reference,
)


def _inline(node: nodes.Node) -> str:
    """A text element's text on one line, without footnote marks or system messages."""
    if isinstance(node, nodes.Text):
        return str(node)
    if isinstance(node, _SKIPPED_NODES) or isinstance(node, nodes.image):
        return ""
    return "".join(_inline(child) for child in node.children)


def _emit(node: nodes.Node, blocks: list[str], headings: list[str]) -> None:
    """Append the text blocks of ``node`` to ``blocks`` and its section titles to ``headings``."""
    if isinstance(node, _SKIPPED_NODES):
        return
    if isinstance(node, nodes.title):
        title = " ".join(_inline(node).split())
        if title:
            if isinstance(node.parent, nodes.section):
                headings.append(title)
            blocks.append(title)
        return
    if isinstance(node, (nodes.literal_block, nodes.doctest_block)):
        code = node.astext().rstrip()
        blocks.append("\n".join(f"    {line}" if line.strip() else "" for line in code.split("\n")))
        return
    if isinstance(node, nodes.line_block):
        blocks.append("\n".join(" ".join(_inline(line).split()) for line in node.findall(nodes.line)))
        return
    if isinstance(node, nodes.row):
        cells = [" ".join(" ".join(_inline(p).split()) for p in entry.children) for entry in node.children]
        blocks.append(" | ".join(cell for cell in cells if cell))
        return
    if isinstance(node, nodes.list_item):
        inner: list[str] = []
        for child in node.children:
            _emit(child, inner, headings)
        if inner:
            blocks.append("- " + inner[0])
            blocks.extend(inner[1:])
        return
    if isinstance(node, nodes.TextElement):
        text = " ".join(_inline(node).split())
        if text:
            blocks.append(text)
        return
    for child in node.children:
        _emit(child, blocks, headings)
