"""`up --benchmark swebench_pro` at scale through a registry: several hundred rows over many distinct
task images that the engine does not have, 8-16 sandboxes live at once, an image budget that holds
only a few of them (so the broker removes images while the run goes on), and the oracle agent.

    .venv/bin/python -m bench.bench_swe_registry_scale [--images 64] [--rows 256] [--parallel 8]
                                                        [--budget-images 6]

The task images are swebench_mini's eight, each pushed as several distinct images to a loopback
registry (Debian's docker-registry): the task image plus a layer of its own (a marker and
`--payload-mib` of random bytes, so every pull downloads something and the disk grows with what is
kept), named as SWE-bench Pro names its images (`<registry>/swe/sweap-images:<tag>`). The rows are
swebench_mini's, one instance id and tag per (image, copy). Reported: instances per minute (the
collector's own rate), the whole run's wall time, pulls and removals from the broker's log, the peak
of the engine's data root's used bytes over the run's start, the machine's peak memory in use, the
peak of live sandboxes, rows scored 1.0 / failed, and what is left after `down --images`
(containers, networks, pulled images: all should be 0).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from gym_compose.contract import PROJECT_LABEL, ROLE_LABEL, SANDBOX_LABEL

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "gym_compose"]
MINI_ROWS = REPO / "benchmarks" / "swebench_mini" / "data" / "swebench_mini.jsonl"
NAMESPACE = "swe/sweap-images"
SERVER_KEY = "swebench_pro_resources_server.resources_servers.swebench_pro"
AGENT = "swebench_pro_coding_agent"


def run(argv: list[str], timeout: float = 3600, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=kwargs.pop("cwd", REPO), capture_output=True, text=True, timeout=timeout,
                          **kwargs)


def ok(done: subprocess.CompletedProcess, what: str) -> str:
    if done.returncode != 0:
        sys.exit(f"{what} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def memory_in_use() -> int:
    fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()}
    return fields["MemTotal"] - fields["MemAvailable"]


class Peaks(threading.Thread):
    """The data root's used bytes, the machine's memory in use and the project's live sandboxes,
    about twice a second."""

    def __init__(self, project: str, data_root: str):
        super().__init__(daemon=True)
        self.project, self.data_root = project, data_root
        self.disk_before = shutil.disk_usage(data_root).used
        self.memory_before = memory_in_use()
        self.disk = self.memory = self.sandboxes = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            self.disk = max(self.disk, shutil.disk_usage(self.data_root).used)
            self.memory = max(self.memory, memory_in_use())
            live = run(["docker", "ps", "-q", "--filter", f"label={PROJECT_LABEL}={self.project}",
                        "--filter", f"label={SANDBOX_LABEL}=1", "--filter", f"label={ROLE_LABEL}=sandbox"],
                       timeout=60).stdout.split()
            self.sandboxes = max(self.sandboxes, len(live))
            self.stopping.wait(0.5)


def start_registry(folder: Path) -> tuple[subprocess.Popen, str]:
    binary = shutil.which("docker-registry")
    if binary is None:
        sys.exit("no docker-registry (Debian's package; scripts/setup installs it)")
    address = f"127.0.0.1:{free_port()}"
    config = {"version": 0.1, "storage": {"filesystem": {"rootdirectory": str(folder / "blobs")}},
              "http": {"addr": address}}
    (folder / "registry.yml").write_text(json.dumps(config))
    process = subprocess.Popen([binary, "serve", str(folder / "registry.yml")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://{address}/v2/", timeout=2):
                return process, address
        except OSError:
            time.sleep(0.1)
    process.kill()
    sys.exit(f"docker-registry did not answer on {address}")


def local_task_images() -> dict[str, str]:
    """swebench_mini's task -> its local image (built when missing)."""
    ok(run([*CLI, "build", "--benchmark", "swebench_mini"], timeout=3600), "building swebench_mini's task images")
    listed = ok(run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "gym-compose/swebench-mini"]),
                "listing the task images").split()
    tasks = sorted({json.loads(line)["dockerhub_tag"] for line in MINI_ROWS.read_text().splitlines()})
    return {task: next(image for image in listed if image.split(":", 1)[1].startswith(f"{task}-")) for task in tasks}


def push_images(address: str, locals_: dict[str, str], count: int, payload_mib: int, folder: Path) -> dict[str, str]:
    """`count` distinct images, round robin over the tasks; returns tag -> task."""
    tags: dict[str, str] = {}
    tasks = sorted(locals_)
    began = time.monotonic()
    for index in range(count):
        task = tasks[index % len(tasks)]
        tag = f"{task}-{index:04d}"
        build = folder / "build"
        build.mkdir(exist_ok=True)
        (build / "marker").write_text(f"{tag} {os.urandom(8).hex()}\n")
        (build / "payload").write_bytes(os.urandom(payload_mib << 20))
        (build / "Dockerfile").write_text(f"FROM {locals_[task]}\nCOPY marker payload /opt/scale-bench/\n")
        name = f"{address}/{NAMESPACE}:{tag}"
        ok(run(["docker", "build", "-q", "-t", name, str(build)]), f"building {name}")
        ok(run(["docker", "push", "-q", name]), f"pushing {name}")
        ok(run(["docker", "rmi", name]), f"removing {name}")
        tags[tag] = task
    print(f"pushed {count} images in {time.monotonic() - began:.0f} s", file=sys.stderr)
    return tags


def write_rows(path: Path, tags: dict[str, str], rows: int) -> None:
    by_task = {json.loads(line)["dockerhub_tag"]: json.loads(line) for line in MINI_ROWS.read_text().splitlines()}
    ordered = sorted(tags)
    lines = []
    for index in range(rows):  # image by image, as a dataset sorted by instance is
        tag = ordered[index * len(ordered) // rows]
        row = dict(by_task[tags[tag]])
        row.update(instance_id=f"{row['instance_id']}__{tag}__{index}", dockerhub_tag=tag, image_digest="",
                   agent_ref={"name": AGENT})
        lines.append(json.dumps(row) + "\n")
    path.write_text("".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--max-live", type=int, default=16, help="the broker's max_live (agent + verification)")
    parser.add_argument("--budget-images", type=float, default=6, help="the image budget, in task images")
    parser.add_argument("--payload-mib", type=int, default=2, help="random bytes in each image's own layer")
    parser.add_argument("--memory-mib", type=int, default=1024, help="each sandbox's memory limit")
    args = parser.parse_args()
    locals_ = local_task_images()
    image_bytes = max(int(ok(run(["docker", "image", "inspect", "--format", "{{.Size}}", image]), "sizing"))
                      for image in locals_.values()) + (args.payload_mib << 20)
    budget_gib = args.budget_images * image_bytes / (1 << 30)
    project = f"gym-compose-bench-swescale-{os.getpid()}"
    data_root = ok(run(["docker", "info", "--format", "{{.DockerRootDir}}"]), "docker info").strip()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        registry, address = start_registry(folder)
        try:
            tags = push_images(address, locals_, args.images, args.payload_mib, folder)
            rows = folder / "rows.jsonl"
            write_rows(rows, tags, args.rows)
            peaks = Peaks(project, data_root)
            peaks.start()
            began = time.monotonic()
            done = run([*CLI, "up", "--benchmark", "swebench_pro", "-p", project, "--head-port", str(free_port()),
                        "--input", str(rows), "--results-dir", str(folder / "results"),
                        "--num-samples-in-parallel", str(args.parallel),
                        f"++{SERVER_KEY}.image_repository={address}/{NAMESPACE}",
                        f"++{SERVER_KEY}.sandbox_config.resources.memory_mib={args.memory_mib}",
                        f"++{SERVER_KEY}.sandbox_provider={{gym_compose: {{image_cache_gib: {budget_gib:.4f}, "
                        f"max_live: {args.max_live}}}}}"], timeout=7200)
            wall = time.monotonic() - began
            peaks.stopping.set()
            peaks.join()
            (run_dir,) = (folder / "results").glob("*")
            scored = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
            failures_file = run_dir / "rollouts_failures.jsonl"
            failed = failures_file.read_text().splitlines() if failures_file.exists() else []
            log = (run_dir / "sandbox-broker.log").read_text().splitlines()
            progress = json.loads((run_dir / "progress.json").read_text())
            removed = run([*CLI, "down", "-p", project, "--images"], timeout=600)
            left = {
                "containers": len(run(["docker", "ps", "-aq", "--filter", f"label={PROJECT_LABEL}={project}"]).stdout.split()),
                "networks": len(run(["docker", "network", "ls", "-q", "--filter",
                                     f"label={PROJECT_LABEL}={project}"]).stdout.split()),
                "pulled images": len(run(["docker", "images", "-q", f"{address}/{NAMESPACE}"]).stdout.split()),
            }
        finally:
            registry.kill()
            registry.wait(timeout=30)
            run(["docker", "rmi", "-f", *run(["docker", "images", "-q", f"{address}/{NAMESPACE}"]).stdout.split()])
    if done.returncode not in (0, 1):
        sys.exit(f"the run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    figures = {
        "rows": args.rows, "images": args.images, "parallel": args.parallel, "max_live": args.max_live,
        "image budget": f"{budget_gib:.2f} GiB ({args.budget_images:g} images of {image_bytes / 1e6:.0f} MB)",
        "instances per minute": round(progress["rollouts_per_second"] * 60, 1),
        "wall s (up to down)": round(wall, 1),
        "pulls": sum("pulled " in line and " in " in line for line in log),
        "images removed for the budget": sum("for the image budget" in line for line in log),
        "scored 1.0": sum(row.get("reward") == 1.0 for row in scored),
        "failed": len(failed),
        "peak data-root growth MB": round((peaks.disk - peaks.disk_before) / 1e6),
        "peak memory in use GiB (before)": f"{peaks.memory / (1 << 30):.1f} ({peaks.memory_before / (1 << 30):.1f})",
        "peak live sandboxes": peaks.sandboxes,
        "left after down --images": left, "down": removed.returncode,
    }
    print(json.dumps(figures, indent=2))
    if failed:
        print("first failure:", failed[0][:2000], file=sys.stderr)


if __name__ == "__main__":
    main()
