"""The query-time graph walks build, for one document: facts, the entities they name, and the walk
steps that found them, drawn as a server-rendered SVG (template ``retrieval/walks/graph.svg``).

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

import networkx as nx
from django.template.loader import render_to_string

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
    """``graph`` drawn as an ``<svg>`` element (template ``retrieval/walks/graph.svg``: labels
    escaped, no inline styles or scripts, so it passes the portal's Content-Security-Policy).
    Empty string for an empty graph."""
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

    edges = []
    for a, b, relation in graph.edges:
        (x1, y1), (x2, y2) = at(a), at(b)
        edges.append({"x1": f"{x1:.1f}", "y1": f"{y1:.1f}", "x2": f"{x2:.1f}", "y2": f"{y2:.1f}", "relation": relation})
    nodes = []
    for node, data in graph.nodes.items():
        x, y = at(node)
        nodes.append(
            {
                **data,
                "color": COLORS[data["kind"]],
                "x": f"{x:.1f}",
                "y": f"{y:.1f}",
                "left": f"{x - 7:.1f}",
                "top": f"{y - 7:.1f}",
                "label_y": f"{y + 20:.1f}",
            }
        )
    context = {"width": WIDTH, "height": HEIGHT, "edges": edges, "nodes": nodes}
    return render_to_string("retrieval/walks/graph.svg", context).strip()
