"""The query-time graph walks build, for one document: facts, the entities they name, and the walk
steps that found them, drawn as a server-rendered SVG.

Seed ``walkingrag-multi-turn.txt``: the walk builds "a knowledge graph of the document ... at query
time". Nodes: the document's live facts the viewer may see, the named entities they name
(``Fact.entities``) and the walk queries that found them. Edges: fact -> entity (``names``), query
-> fact (``found``) and fact -> fact (``led to``: a fact of one round whose next query found the
other in the next round). Only queries the walk itself named (or the viewer's own) are shown: a
member never sees another member's question. Layout: networkx's spring layout (Fruchterman-
Reingold), seeded, so a page draws the same picture each time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

import networkx as nx

from retrieval.filters import RetrievalFilter
from retrieval.walks.models import WalkStep
from retrieval.walks.selectors import facts_visible

MAX_FACTS = 40
WIDTH, HEIGHT, MARGIN = 900, 560, 70
COLORS = {"fact": "#2563eb", "entity": "#059669", "query": "#b45309"}


@dataclass
class Graph:
    """Nodes ``{id: {"kind", "label", "title"}}`` and edges ``[(from, to, relation)]``."""

    nodes: dict[str, dict] = field(default_factory=dict)
    edges: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, node_id: str, kind: str, label: str, title: str = "") -> None:
        self.nodes.setdefault(node_id, {"kind": kind, "label": label, "title": title or label})


def document_graph(*, where: RetrievalFilter, document_id: int, user=None) -> Graph:
    """The graph of document ``document_id`` as ``where``'s asker may see it (module docstring)."""
    facts = facts_visible(where=where, document_id=document_id, limit=MAX_FACTS)
    graph = Graph()
    by_walk_round: dict[tuple[int, int], list[int]] = {}
    for fact in facts:
        graph.add(f"f{fact.pk}", "fact", fact.text[:60] + ("…" if len(fact.text) > 60 else ""), fact.text)
        for entity in fact.entities:
            key = f"e{entity.lower()}"
            graph.add(key, "entity", entity)
            graph.edges.append((f"f{fact.pk}", key, "names"))
        if fact.walk_id is not None:
            by_walk_round.setdefault((fact.walk_id, fact.round), []).append(fact.pk)
    fact_ids = {f.pk for f in facts}
    walk_ids = {walk_id for walk_id, _round in by_walk_round}
    user_id = getattr(user, "pk", None)
    steps = WalkStep.objects.for_tenant(where.tenant_id).filter(walk_id__in=walk_ids).select_related("walk")
    for step in steps:
        found = by_walk_round.get((step.walk_id, step.round), [])
        chunk_ids = set(step.chunk_ids or [])
        reached = [f for f in facts if f.pk in found and f.chunk_id in chunk_ids]
        if not reached:
            continue
        shown = step.origin == "facts" or (user_id is not None and step.walk.user_id == user_id)
        if shown:
            key = f"q{step.pk}"
            graph.add(key, "query", step.query[:50] + ("…" if len(step.query) > 50 else ""), step.query)
            for fact in reached:
                graph.edges.append((key, f"f{fact.pk}", "found"))
        for earlier in step.led_by or []:
            if earlier in fact_ids:
                for fact in reached:
                    graph.edges.append((f"f{earlier}", f"f{fact.pk}", "led to"))
    return graph


def graph_svg(graph: Graph, *, seed: int = 7) -> str:
    """``graph`` drawn as an ``<svg>`` element (a string, labels escaped; no inline styles or
    scripts, so it passes the portal's Content-Security-Policy). Empty string for an empty graph."""
    if not graph.nodes:
        return ""
    network = nx.Graph()
    network.add_nodes_from(graph.nodes)
    network.add_edges_from((a, b) for a, b, _ in graph.edges)
    positions = nx.spring_layout(network, seed=seed, k=1.6 / max(1, len(graph.nodes)) ** 0.5)
    xs = [p[0] for p in positions.values()]
    ys = [p[1] for p in positions.values()]
    span_x, span_y = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0

    def at(node):
        x, y = positions[node]
        return (
            MARGIN + (x - min(xs)) / span_x * (WIDTH - 2 * MARGIN),
            MARGIN / 2 + (y - min(ys)) / span_y * (HEIGHT - 1.5 * MARGIN),
        )

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" class="walk-graph"'
        ' aria-label="Facts found in this document, the entities they name and the walk queries that found them">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#94a3b8"/></marker></defs>',
    ]
    for a, b, relation in graph.edges:
        (x1, y1), (x2, y2) = at(a), at(b)
        dash = ' stroke-dasharray="4 3"' if relation == "names" else ""
        parts.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#94a3b8" stroke-width="1.2"{dash}'
            f' marker-end="url(#arrow)" data-relation="{escape(relation)}"><title>{escape(relation)}</title></line>'
        )
    for node, data in graph.nodes.items():
        x, y = at(node)
        color = COLORS[data["kind"]]
        shape = (
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="7" fill="{color}"/>'
            if data["kind"] != "query"
            else f'<rect x="{x - 7:.1f}" y="{y - 7:.1f}" width="14" height="14" fill="{color}"/>'
        )
        parts.append(
            f'<g class="node {data["kind"]}" data-kind="{data["kind"]}"><title>{escape(data["title"])}</title>{shape}'
            f'<text x="{x:.1f}" y="{y + 20:.1f}" text-anchor="middle" font-size="11" fill="#1f2937">'
            f"{escape(data['label'])}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)
