"""reStructuredText to plain text with docutils, tolerant of Sphinx's roles and directives.

``rst_plain(text)`` parses ``text`` with docutils' reST parser (no transforms, no file or raw
inclusion, no messages printed) and returns readable text and its section titles in reading order.
Sphinx and Django add roles and directives docutils does not know; the parser here handles each
one a document uses without registering it anywhere (docutils' ``register_local_role`` and
``register_directive`` are process-wide: every later parse in the process would see them, and a
document naming a million roles would keep a million entries):

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
import types

from docutils import frontend, nodes, utils
from docutils.parsers.rst import Directive, Parser, directives, roles, states

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
_ROLE_TARGET = re.compile(r"^(.*?)\s*<([^<>]*)>$", re.DOTALL)


def rst_plain(text: str) -> tuple[str, list[str]]:
    """``text`` (reST) as readable plain text and its section titles in reading order.

    See the module docstring for what each construct becomes. The titles appear in the text each
    on a line of their own, so ``documents.locate_sections(..., whole_lines=True)`` finds them.
    """
    settings = frontend.get_default_settings(Parser)
    settings.report_level = 5
    settings.halt_level = 5
    settings.warning_stream = False
    settings.file_insertion_enabled = False
    settings.raw_enabled = False
    document = utils.new_document("<rst>", settings)
    _Parser().parse(text.replace("\r\n", "\n"), document)
    blocks: list[str] = []
    headings: list[str] = []
    _emit(document, blocks, headings)
    return "\n\n".join(block for block in blocks if block.strip()), headings


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


def _directive_class(name: str, state: states.RSTState) -> type[Directive]:
    """The directive that handles ``.. name::`` in this parse: ours for code, versions and the
    directives that hold no text (also where docutils has its own, e.g. ``include``, ``raw``,
    ``role``), else docutils' own, else ``GenericDirective``."""
    key = name.lower()
    if key in CODE_DIRECTIVES:
        return CodeDirective
    if key in VERSION_DIRECTIVES:
        return VersionDirective
    if key in SKIPPED_DIRECTIVES:
        return SkippedDirective
    unknown = state.memo.inliner.unknown_names  # this parse's, kept on its inliner
    if ("directive", key) in unknown:
        return GenericDirective
    # docutils' look-up caches only the directives it has (a bounded set), never an unknown name.
    found, _ = directives.directive(name, state.memo.language, state.document)
    if found is None:
        unknown.add(("directive", key))
    return found or GenericDirective


def _directive(self: states.Body, match: re.Match, **option_presets) -> tuple[list[nodes.Node], bool]:
    """``states.Body.directive`` with ``_directive_class`` as the look-up."""
    type_name = match.group(1)
    return self.run_directive(_directive_class(type_name, self), match, type_name, option_presets)


class _ParseLocal:
    """What the parser's states add to docutils': the directive look-up above, and nested parses
    (a directive's content, a list item) that keep these states.

    docutils calls ``Body.directive`` through the table ``Body.explicit.constructs`` (not as a
    method), so the table is copied with ``_directive`` in its place; a nested parse takes its
    states from ``nested_sm_kwargs``, which docutils sets to its own module's states.
    """

    explicit = states.Struct(
        patterns=states.Body.explicit.patterns,
        constructs=[
            (_directive if method is states.Body.directive else method, pattern)
            for method, pattern in states.Body.explicit.constructs
        ],
    )
    directive = _directive
    # docutils keeps finished nested state machines for reuse; ours hold these states, so they
    # are kept apart from docutils' own.
    nested_sm_cache: list = []

    def __init__(self, state_machine, debug=False):
        super().__init__(state_machine, debug)
        self.nested_sm_kwargs = {"state_classes": STATE_CLASSES, "initial_state": "Body"}


# docutils' states, each with ``_ParseLocal`` first (the state machine finds states by class name).
STATE_CLASSES = tuple(type(cls.__name__, (_ParseLocal, cls), {}) for cls in states.state_classes)


def _interpreted(self: states.Inliner, rawsource, text, role, lineno):
    """``states.Inliner.interpreted`` with ``_sphinx_role`` for a role docutils lacks."""
    key = ("role", role.lower())
    if key not in self.unknown_names:
        role_fn, messages = roles.role(role, self.language, lineno, self.reporter)
        if role_fn is not None:
            found, more = role_fn(role, rawsource, text, lineno, self)
            return found, messages + more
        self.unknown_names.add(key)  # docutils registered nothing for it
    return _sphinx_role(role, rawsource, text, lineno, self)


def _inliner() -> states.Inliner:
    """docutils' inline parser with ``_interpreted``, for one parse (not a subclass: docutils
    builds its patterns from the attributes of the inliner's own class). ``unknown_names`` holds
    the ("role" or "directive", name) pairs docutils lacks, met so far in the parse."""
    inliner = states.Inliner()
    inliner.interpreted = types.MethodType(_interpreted, inliner)
    inliner.unknown_names = set()
    return inliner


class _Parser(Parser):
    """docutils' reST parser with the states and the inline parser above: the Sphinx and Django
    roles and directives a document names are handled without registering them anywhere."""

    def __init__(self):
        super().__init__(inliner=_inliner())
        self.state_classes = STATE_CLASSES


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
