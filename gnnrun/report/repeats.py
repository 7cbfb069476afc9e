"""The points of a sweep that repeat one configuration (another seed, another of a
dataset's fixed splits), summarised as mean and standard deviation: how papers report
a figure, and how far one run's figure can be trusted.

Points are one configuration's repetitions when their overrides differ only in the
repetition keys (REPEAT_KEYS by default; `gnnrun report --over` names others). A
group's figures are taken over its finished points (done, or stopped early): a point
still running, partial or failed is left out and counted apart.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from gnnrun.report.rows import ReportRow
from gnnrun.report.runs import override_key

# Overrides that repeat an experiment rather than change it: the seed (initialisation,
# dropout, sampling), a dataset's fixed split (dataset.split: Tolokers' 10) and a link
# task's random edge split.
REPEAT_KEYS = ("train.seed", "dataset.split", "task.split_seed")

Figure = Callable[[ReportRow], "float | None"]  # a run's value of a summarised figure

# Statuses of the points a group's figures are taken over.
FINISHED = ("done", "stopped early")


@dataclass
class RepeatGroup:
    run: str  # "A" / "B" in a comparison, else empty
    overrides: list[str]  # what sets the group apart from the others, repetitions left out
    keys: list[str]  # the repetition keys its points vary, in the order they are met
    rows: list[ReportRow]  # every point of the group, finished or not

    @property
    def finished(self) -> list[ReportRow]:
        return [r for r in self.rows if r.status.startswith(FINISHED)]

    @property
    def algorithm(self) -> str:
        """Its points' algorithm (several, joined by "/", where --over names algorithm)."""
        return "/".join(dict.fromkeys(r.algorithm for r in self.rows))

    @property
    def ranks(self) -> int | None:
        """Its points' rank count; None where they differ."""
        counts = {r.ranks for r in self.rows}
        return counts.pop() if len(counts) == 1 else None

    def spread(self, figure: Figure) -> tuple[float | None, float | None]:
        """(mean, sample standard deviation) of `figure(row)` over the finished points
        that have it; the deviation is None below two values."""
        values = [v for v in (figure(r) for r in self.finished) if v is not None]
        if not values:
            return None, None
        return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None

    def reached(self) -> tuple[int, int] | None:
        """(finished points that reached train.target, finished points), where every
        finished point was given one (train.target); None where a point's target was its
        own best figure, which differs from run to run."""
        targets = [r.to_target for r in self.finished]
        if not targets or not all(t and t.get("target_given") for t in targets):
            return None
        return sum(t.get("seconds") is not None for t in targets), len(targets)


def seconds_to_target(row: ReportRow) -> float | None:
    """Training seconds until the run came within 1% of train.target (None: never)."""
    return (row.to_target or {}).get("seconds")


def epochs_to_target(row: ReportRow) -> float | None:
    return (row.to_target or {}).get("epochs")


def summarised_figures(key: str, name: str) -> list[tuple[str, str, Figure]]:
    """(table header, CSV name, value of a run) of each summary of one task figure (`key`,
    as summary.json's figures name it): the best validation figure, the test figure at
    that epoch, and the final test figure."""
    return [
        (f"best val {name}", f"best_val_{key}", lambda r: r.best.get(f"val_{key}")),
        (f"test at best val {name}", f"best_test_{key}", lambda r: r.best.get(f"test_{key}")),
        (f"final test {name}", f"final_test_{key}", lambda r: r.final.get(f"test_{key}")),
    ]


def repeat_groups(rows: list[ReportRow], keys: tuple[str, ...] = REPEAT_KEYS) -> list[RepeatGroup]:
    """The rows grouped by their overrides other than `keys`, per run set, in the order of
    their first points; none where no group has two points (nothing repeats: a lone run,
    or a sweep that does not vary `keys`)."""
    groups: dict[tuple[str, tuple[str, ...]], RepeatGroup] = {}
    for row in rows:
        rest = [o for o in row.overrides if override_key(o) not in keys]
        group = groups.setdefault((row.run, tuple(rest)), RepeatGroup(row.run, rest, [], []))
        group.rows.append(row)
        for o in row.overrides:
            if override_key(o) in keys and override_key(o) not in group.keys:
                group.keys.append(override_key(o))
    if all(len(g.rows) < 2 for g in groups.values()):
        return []
    return list(groups.values())


def best_configurations(groups: list[RepeatGroup]) -> set[int]:
    """The indices of the groups whose mean validation figure (the one that picked each
    run's best epoch) is the highest of their algorithm's in their run set: the
    configuration to take, as DistGNN's tuning does (`+sweep=lr_tune`). Only among two or
    more configurations of an algorithm, with finished points."""
    chosen = set()
    by_algorithm: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for index, group in enumerate(groups):
        metric = next((r.best_metric for r in group.finished if r.best_metric), "val_acc")
        mean, _ = group.spread(lambda r, m=metric: r.best.get(m))
        if mean is not None:
            by_algorithm.setdefault((group.run, group.algorithm), []).append((mean, index))
    for candidates in by_algorithm.values():
        if len(candidates) > 1:
            chosen.add(max(candidates, key=lambda c: (c[0], -c[1]))[1])
    return chosen
