"""Bounded memory under real cgroup limits: ranks on hosts of their own (network
namespaces, tests/launch/netns.py), each host held by a cgroup v1 memory limit, prepare
and partition a chunked synthetic graph and train one epoch on it; and one process
partitioning the same graph with partitioner=metis, under a limit of its own.

    sudo python scripts/bench_bounded_memory.py --work /big/folder [--hosts 4] [--host-gb 3]
        [--nodes 5000000] [--avg-degree 24] [--feat-dim 16] [--metis-gb 12]

Needs root (ip netns, /sys/fs/cgroup/memory written) and cgroup v1's memory controller.
Steps, every one a fresh `gnnrun` command as a user runs it:

1. `gnnrun data chunk` writes the graph (synthetic, drawn file by file; not limited);
2. on every host at once, in its cgroup: `gnnrun data prepare ... cluster=hosts`, then
   `gnnrun partition ... partitioner=random cluster=hosts`, then `gnnrun train ...
   train.epochs=1 cluster=hosts` (one rank per host; each host's launcher is in its
   cgroup too);
3. one process: `gnnrun partition ... partitioner=metis` (the prepared copy is current,
   so it only opens it and runs METIS) in a cgroup of --metis-gb; killed there, it
   needed more.

Per host and step: the cgroup's max_usage_in_bytes (which counts the page cache the
host's processes dirtied or read: the kernel reclaims it at the limit, so it sits near
the limit whenever files outgrow it), failcnt (charges that failed at the limit: it
read 0 on Linux 6.18 even for a group killed there), OOM kills (memory.oom_control),
the largest resident anonymous memory of the group (memory.stat total_rss, sampled
every 0.2 s) and the rank's own peak (VmHWM, from the manifest,
meta.json or the training metrics). `--cleanup` removes the big files at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "launch"))
import netns  # noqa: E402  (the test bed of the multi-host tests)

CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
GIB = 1 << 30
MIB = 1 << 20
PORT = 29617


class MemoryGroup:
    """A cgroup v1 memory group with a hard limit (and no swap beyond it)."""

    def __init__(self, name: str, limit_bytes: int) -> None:
        self.path = CGROUP_ROOT / name
        if self.path.exists():
            self.path.rmdir()
        self.path.mkdir()
        self.limit = limit_bytes
        self._write("memory.limit_in_bytes", limit_bytes)
        with contextlib.suppress(OSError):  # no swap accounting here: nothing to limit
            self._write("memory.memsw.limit_in_bytes", limit_bytes)
        self.rss_peak = 0
        self._sampling = False

    def _write(self, name: str, value: int) -> None:
        (self.path / name).write_text(str(value))

    def read(self, name: str) -> str:
        return (self.path / name).read_text()

    def stat(self) -> dict[str, int]:
        return {
            k: int(v) for k, v in (line.split() for line in self.read("memory.stat").splitlines())
        }

    def oom_kills(self) -> int:
        for line in self.read("memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return -1  # a kernel without the counter

    def reset(self) -> None:
        """Start a step: max usage and failcnt back to 0 (cgroup v1 takes a write of 0)."""
        self._write("memory.max_usage_in_bytes", 0)
        self._write("memory.failcnt", 0)
        self.rss_peak = 0

    def figures(self) -> dict:
        return {
            "limit_gib": self.limit / GIB,
            "max_usage_gib": int(self.read("memory.max_usage_in_bytes")) / GIB,
            "failcnt": int(self.read("memory.failcnt")),
            "oom_kills": self.oom_kills(),
            "rss_peak_gib": self.rss_peak / GIB,
        }

    def command(self, command: list[str]) -> list[str]:
        """`command`, started inside this group (its children stay in it)."""
        procs = self.path / "cgroup.procs"
        return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *command]

    def sample(self) -> None:
        self.rss_peak = max(self.rss_peak, self.stat().get("total_rss", 0))

    def close(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


@contextlib.contextmanager
def sampling(groups: list[MemoryGroup], every_s: float = 0.2):
    done = threading.Event()

    def loop() -> None:
        while not done.is_set():
            for group in groups:
                with contextlib.suppress(OSError, ValueError):
                    group.sample()
            done.wait(every_s)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def gnnrun_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "gnnrun.cli", *args]


# `gnnrun ARGS` as the CLI runs it, saying (with the time and VmRSS) when pymetis starts
# and ends: where a process killed at its limit was.
METIS_PROBE = """
import sys, time
import pymetis
from gnnrun.cli import main
start, original = time.perf_counter(), pymetis.part_graph
def rss():
    return [int(l.split()[1]) / 2**20 for l in open("/proc/self/status") if l.startswith("VmRSS")][0]
def part_graph(*args, **kwargs):
    print(f"probe: pymetis.part_graph starts at {time.perf_counter() - start:.1f} s, VmRSS {rss():.2f} GiB", flush=True)
    result = original(*args, **kwargs)
    print(f"probe: pymetis.part_graph returned at {time.perf_counter() - start:.1f} s, VmRSS {rss():.2f} GiB", flush=True)
    return result
pymetis.part_graph = part_graph
sys.exit(main(sys.argv[1:]))
"""


def environment(work: Path) -> dict[str, str]:
    return os.environ | {"GNNRUN_DATA_ROOT": str(work / "data"), "PYTHONPATH": str(REPO)}


def on_hosts(bed, groups, work: Path, step: str, args: list[str], port: int) -> dict:
    """`gnnrun ARGS cluster=hosts` on every host at once, each in its group."""
    for group in groups:
        group.reset()
    procs, logs = [], []
    start = time.perf_counter()
    with sampling(groups):
        for host in range(bed.hosts):
            logs.append(work / f"{step}-host{host}.log")
            command = gnnrun_command(*args, *bed.cluster_overrides(host, port))
            if step == "train":
                command.append(f"hydra.run.dir={work / 'train' / f'host{host}'}")
            # Into the group first: `ip netns exec` mounts a sysfs of its own, without it.
            command = groups[host].command(["ip", "netns", "exec", bed.names[host], *command])
            with open(logs[-1], "w") as log:
                procs.append(
                    subprocess.Popen(
                        command,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=work,
                        env=environment(work),
                    )  # fmt: skip
                )
        codes = [proc.wait() for proc in procs]
    seconds = time.perf_counter() - start
    result = {"seconds": seconds, "codes": codes, "hosts": [g.figures() for g in groups]}
    if any(codes):
        tails = [log.read_text().strip().splitlines()[-3:] for log in logs]
        print(json.dumps(result, indent=1))
        sys.exit(f"{step} failed on the hosts: {tails}")
    return result


def one_process(group: MemoryGroup, work: Path, step: str, args: list[str]) -> dict:
    group.reset()
    log = work / f"{step}.log"
    start = time.perf_counter()
    with sampling([group]), open(log, "w") as out:
        code = subprocess.run(
            group.command([sys.executable, "-c", METIS_PROBE, *args]), stdout=out,
            stderr=subprocess.STDOUT, cwd=work, env=environment(work),
        ).returncode  # fmt: skip
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    return {
        "seconds": time.perf_counter() - start,
        "code": code,
        "group": group.figures(),
        "last_lines": lines[-4:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="a folder with room (~8 GB)")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--host-gb", type=float, default=3.0, help="each host's cgroup limit")
    parser.add_argument("--rank-gb", type=float, default=2.6, help="memory_gb of each rank")
    parser.add_argument("--nodes", type=int, default=5_000_000)
    parser.add_argument("--avg-degree", type=float, default=24)
    parser.add_argument("--feat-dim", type=int, default=16)
    parser.add_argument("--metis-gb", type=float, default=12.0)
    parser.add_argument("--skip-metis", action="store_true")
    parser.add_argument("--skip-hosts", action="store_true", help="METIS only (prepared before)")
    parser.add_argument("--cleanup", action="store_true", help="remove the big files at the end")
    args = parser.parse_args()
    reason = netns.unavailable()
    if reason is not None or not os.access(CGROUP_ROOT, os.W_OK):
        sys.exit(f"needs root, network namespaces and cgroup v1 memory: {reason or CGROUP_ROOT}")
    work = args.work.absolute()
    work.mkdir(parents=True, exist_ok=True)
    report: dict = {"args": {k: str(v) for k, v in vars(args).items()}}
    print(f"load average at start: {os.getloadavg()}", flush=True)

    # 1. The chunked graph.
    data = ["dataset=chunked", "dataset.name=big", "dataset.path=chunks/metadata.json"]
    if not (work / "chunks" / "metadata.json").is_file():
        synthetic = [
            "dataset=synthetic-large", "dataset.name=big", f"dataset.num_nodes={args.nodes}",
            f"dataset.avg_degree={args.avg_degree}", f"dataset.feat_dim={args.feat_dim}",
            "dataset.num_classes=16", "dataset.split.train=0.002", "dataset.split.val=0.001",
            "dataset.split.test=0.001",
        ]  # fmt: skip
        start = time.perf_counter()
        subprocess.run(
            gnnrun_command("data", "chunk", *synthetic, "--output", "chunks"),
            cwd=work, env=environment(work), check=True,
        )  # fmt: skip
        report["chunk_s"] = time.perf_counter() - start
    meta = json.loads((work / "chunks" / "metadata.json").read_text())
    chunk_bytes = sum(p.stat().st_size for p in (work / "chunks").rglob("*") if p.is_file())
    report["graph"] = {
        "num_nodes": meta["num_nodes"],
        "chunk_gib": chunk_bytes / GIB,
    }
    print(json.dumps(report, indent=1), flush=True)

    # 2. The hosts, each in its group.
    if not args.skip_hosts:
        bed = netns.TestBed(args.hosts)
        groups = [
            MemoryGroup(f"gnnrun-bench-host{h}", int(args.host_gb * GIB)) for h in range(args.hosts)
        ]
        try:
            report["prepare"] = on_hosts(
                bed, groups, work, "prepare",
                ["data", "prepare", *data, f"dataset.memory_gb={args.rank_gb}"], PORT,
            )  # fmt: skip
            prepared = json.loads((work / "data" / "prepared" / "big" / "meta.json").read_text())
            report["prepare"]["ranks"] = prepared["distributed"]["ranks"]
            report["graph"]["directed_edges"] = prepared["num_edges"]
            report["graph"]["prepared_gib"] = (
                sum(f["bytes"] for f in prepared["files"].values()) / GIB
            )
            print(json.dumps(report["prepare"], indent=1), flush=True)

            partition = ["partitioner=random", f"partitioner.memory_gb={args.rank_gb}"]
            report["partition"] = on_hosts(
                bed, groups, work, "partition", ["partition", *data, *partition], PORT + 10
            )
            manifest_path = work / "data" / "partitions" / "big" / f"random-{args.hosts}"
            manifest = json.loads((manifest_path / "manifest.json").read_text())
            report["partition"]["ranks"] = manifest["distributed"]["ranks"]
            report["partition"]["summary"] = manifest["summary"]
            print(json.dumps(report["partition"], indent=1), flush=True)

            train = [
                "train", *data, "partitioner=random", "algorithm=minibatch", "train.epochs=1",
                "model.hidden=32",
            ]  # fmt: skip
            report["train"] = on_hosts(bed, groups, work, "train", train, PORT + 20)
            report["train"]["ranks"] = []
            for host in range(args.hosts):
                lines = (work / "train" / f"host{host}" / f"metrics.rank{host}.jsonl").read_text()
                last = json.loads(lines.splitlines()[-1])
                report["train"]["ranks"].append(
                    {
                        "rank": host,
                        "peak_rss_mb": last["peak_rss_mb"],
                        "time": last.get("time"),
                        "loss": last.get("loss"),
                    }  # fmt: skip
                )
            print(json.dumps(report["train"], indent=1), flush=True)
        finally:
            bed.close()
            for group in groups:
                group.close()

    # 3. One process, METIS.
    if not args.skip_metis:
        group = MemoryGroup("gnnrun-bench-metis", int(args.metis_gb * GIB))
        try:
            metis = [
                "partition", *data, "partitioner=metis", f"partitioner.num_parts={args.hosts}",
                f"partitioner.output_dir={work / 'metis'}",
            ]  # fmt: skip
            report["metis"] = one_process(group, work, "metis", metis)
        finally:
            group.close()
        print(json.dumps(report["metis"], indent=1), flush=True)

    print(f"load average at the end: {os.getloadavg()}")
    (work / "report.json").write_text(json.dumps(report, indent=1))
    print(f"report: {work / 'report.json'}")
    if args.cleanup:
        for name in ("chunks", "data", "metis", "train"):
            shutil.rmtree(work / name, ignore_errors=True)


if __name__ == "__main__":
    main()
