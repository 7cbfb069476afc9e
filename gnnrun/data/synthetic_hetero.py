"""A MAG-shaped heterogeneous graph whose paper classes only a relation-aware model reads well.

Four vertex types as in ogbn-mag: `paper` (the labelled target, with features),
`author`, `institution` and `field` (featureless: a model learns an embedding
per vertex). Every vertex has a class; the relations, each with its reverse
(`rev_<name>`, so that messages flow both ways, as DGL's MAG examples add them):

- `author -writes-> paper`: a paper's authors, each of the paper's class with
  probability `author_homophily`, else anyone; authors weighted by a power-law
  productivity;
- `paper -has_topic-> field`: a paper's fields, of its class with probability
  `topic_homophily`;
- `paper -cites-> paper`: a paper of class c cites papers of class c + 1 (mod
  C) with probability `citation_homophily`, weighted by power-law popularity:
  a cited paper's citers are of its class minus one, the papers it cites of its
  class plus one. Both kinds of paper neighbour are papers, so a model that
  ignores relations sees them mixed, one that tells `cites` from `rev_cites`
  reads each;
- `author -affiliated_with-> institution`: one institution per author, of the
  author's class with probability `institution_homophily`.

Paper features are the class centroid plus Gaussian noise (`feature_noise`, as
in gnnrun.data.synthetic: alone they classify poorly). Everything is drawn from
one numpy Generator seeded by `dataset.seed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gnnrun.config import check
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.hetero import HeteroSchema, add_reverses
from gnnrun.data.registry import DatasetConfig, SplitFractions, register_source
from gnnrun.data.synthetic import _noisy_centroid_features


@dataclass
class SyntheticHeteroConfig(DatasetConfig):
    source: str = "synthetic_hetero"
    num_papers: int = 20000
    authors_per_paper: float = 1.5  # vertex counts relative to the papers (MAG: 1.5)
    institutions_per_paper: float = 0.0125  # MAG: 0.012
    fields_per_paper: float = 0.08  # MAG: 0.081
    num_classes: int = 16
    feat_dim: int = 64
    # Edges per paper (written by, topics, citations); one institution per author.
    paper_authors: float = 4.0
    paper_topics: float = 5.0
    paper_citations: float = 6.0
    author_homophily: float = 0.5
    topic_homophily: float = 0.5
    citation_homophily: float = 0.7
    institution_homophily: float = 0.6
    power_law_exponent: float = 2.5  # of author productivity and paper popularity
    feature_noise: float = 2.0
    split: SplitFractions = field(
        default_factory=lambda: SplitFractions(train=0.6, val=0.2, test=0.2)
    )

    def validate(self) -> None:
        super().validate()
        check(self.num_papers >= 10, "dataset.num_papers must be at least 10")
        check(
            2 <= self.num_classes <= self.num_papers,
            "dataset.num_classes must be in [2, num_papers]",
        )
        check(self.feat_dim >= 1, "dataset.feat_dim must be positive")
        for name in ("authors_per_paper", "institutions_per_paper", "fields_per_paper"):
            check(getattr(self, name) > 0, f"dataset.{name} must be positive")
        for name in ("paper_authors", "paper_topics", "paper_citations"):
            check(getattr(self, name) >= 0, f"dataset.{name} must be >= 0")
        for name in (
            "author_homophily",
            "topic_homophily",
            "citation_homophily",
            "institution_homophily",
        ):
            check(0 <= getattr(self, name) <= 1, f"dataset.{name} must be in [0, 1]")
        check(self.power_law_exponent > 2, "dataset.power_law_exponent must exceed 2")
        check(self.feature_noise >= 0, "dataset.feature_noise must be >= 0")
        self.split.validate("dataset.split")


NODE_TYPES = ("paper", "author", "institution", "field")
FORWARD = (
    ("author", "writes", "paper"),
    ("paper", "cites", "paper"),
    ("paper", "has_topic", "field"),
    ("author", "affiliated_with", "institution"),
)


class _ClassPicker:
    """Draws vertices of a type, weighted, either of a given class or of any."""

    def __init__(
        self, rng: np.random.Generator, classes: np.ndarray, weight: np.ndarray, num_classes: int
    ) -> None:
        self.rng = rng
        self.order = np.argsort(classes, kind="stable")
        self.cumulative = np.concatenate([[0.0], np.cumsum(weight[self.order])])
        bounds = np.concatenate([[0], np.cumsum(np.bincount(classes, minlength=num_classes))])
        self.starts, self.ends = self.cumulative[bounds[:-1]], self.cumulative[bounds[1:]]

    def draw(self, wanted: np.ndarray, homophily: float) -> np.ndarray:
        """One vertex per entry of `wanted` (a class): of that class with probability
        `homophily`, else any."""
        low = np.zeros(wanted.size)
        span = np.full(wanted.size, self.cumulative[-1])
        # A class without vertices of this type (fewer vertices than classes) draws from all.
        inside = (self.rng.random(wanted.size) < homophily) & (self.ends > self.starts)[wanted]
        low[inside] = self.starts[wanted[inside]]
        span[inside] = self.ends[wanted[inside]] - low[inside]
        target = low + self.rng.random(wanted.size) * span
        position = np.searchsorted(self.cumulative, target, side="right") - 1
        return self.order[np.clip(position, 0, self.order.size - 1)]


def _power_law(rng: np.random.Generator, n: int, exponent: float) -> np.ndarray:
    return rng.pareto(exponent - 1, size=n) + 1.0


def _links(rng: np.random.Generator, count: int, per_vertex: float) -> np.ndarray:
    """Which of `count` vertices each of about per_vertex * count links starts at: each
    vertex gets a Poisson number of them."""
    return np.repeat(np.arange(count), rng.poisson(per_vertex, size=count))


@register_source("synthetic_hetero", SyntheticHeteroConfig)
def generate(cfg: SyntheticHeteroConfig) -> GraphDataset:
    rng = np.random.default_rng(cfg.seed)
    c = cfg.num_classes
    counts = {
        "paper": cfg.num_papers,
        "author": max(1, round(cfg.num_papers * cfg.authors_per_paper)),
        "institution": max(1, round(cfg.num_papers * cfg.institutions_per_paper)),
        "field": max(1, round(cfg.num_papers * cfg.fields_per_paper)),
    }
    classes = {name: rng.integers(0, c, size=count) for name, count in counts.items()}
    for few in ("institution", "field"):  # every class has one where there are enough
        covered = min(c, counts[few])
        classes[few][:covered] = np.arange(covered)
    weights = {
        "paper": _power_law(rng, counts["paper"], cfg.power_law_exponent),
        "author": _power_law(rng, counts["author"], cfg.power_law_exponent),
        "institution": np.ones(counts["institution"]),
        "field": np.ones(counts["field"]),
    }
    pick = {name: _ClassPicker(rng, classes[name], weights[name], c) for name in NODE_TYPES}
    paper_class = classes["paper"]
    edges = {}
    papers = _links(rng, counts["paper"], cfg.paper_authors)
    edges[FORWARD[0]] = (pick["author"].draw(paper_class[papers], cfg.author_homophily), papers)
    papers = _links(rng, counts["paper"], cfg.paper_citations)
    shifted = (paper_class[papers] + 1) % c
    edges[FORWARD[1]] = (papers, pick["paper"].draw(shifted, cfg.citation_homophily))
    papers = _links(rng, counts["paper"], cfg.paper_topics)
    edges[FORWARD[2]] = (papers, pick["field"].draw(paper_class[papers], cfg.topic_homophily))
    authors = np.arange(counts["author"])
    edges[FORWARD[3]] = (
        authors,
        pick["institution"].draw(classes["author"], cfg.institution_homophily),
    )
    relations = add_reverses(list(FORWARD), edges)

    feat = _noisy_centroid_features(rng, paper_class, c, cfg.feat_dim, cfg.feature_noise)
    schema = HeteroSchema(
        node_types=list(NODE_TYPES),
        type_counts=[counts[t] for t in NODE_TYPES],
        feat_dims=[cfg.feat_dim, 0, 0, 0],
        relations=relations,
        target="paper",
    )
    perm = rng.permutation(counts["paper"])
    a = int(cfg.split.train * counts["paper"])
    b = a + int(cfg.split.val * counts["paper"])
    e = min(counts["paper"], b + int(cfg.split.test * counts["paper"]))
    splits = tuple(np.sort(perm[lo:hi]).astype(np.int64) for lo, hi in ((0, a), (a, b), (b, e)))
    return GraphDataset.heterogeneous(
        cfg.name, schema, edges, {"paper": feat}, paper_class, splits, c,
        {"source": "synthetic_hetero"},
    )  # fmt: skip
