"""`gym-compose up --benchmark swebench_pro` through a registry (docs/swe.md): a real registry on
loopback (Debian's docker-registry, plain HTTP) holds swebench_mini's task images under SWE-bench
Pro's naming, `<registry>/<namespace>/sweap-images:<dockerhub_tag>` (one row by digest), and the
engine does not have them; the run overrides nothing but `image_repository`. Each image is pulled
when its first rollout leases it (the broker's pull lines), the oracle resolves every row, and a
second run pulls nothing; a row whose image the registry lacks stops the run before anything starts,
or, with --skip-missing-images, is left out; a layer that fails its digest check (made so by
tests/support/registry_proxy.py in front of the registry) fails only its image's rows, naming the
cause, and `--resume` runs them once the registry serves it whole. A registry behind basic auth (htpasswd): without `docker login` the
run stops before anything starts, naming the registry and `docker login`; after it, it runs.

Each pushed image is the task image plus one layer of its own (random bytes), so that removing it
from the engine really removes it (the pull downloads that layer) while the task images the other
tests build stay."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.e2e import CLI, REPO, free_port, gym_compose, labelled, read_jsonl
from tests.support.registry import LoopbackRegistry, docker_config_dir, start_registry
from tests.support.registry_proxy import RegistryProxy

# the first test builds the swebench_mini task images when no earlier module has (in file order this one
# comes before test_swebench.py): minutes on a fresh 2-core machine
pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

MINI_ROWS = REPO / "benchmarks" / "swebench_mini" / "data" / "swebench_mini.jsonl"
TASKS = ("intervals_merge", "leap_year_century", "pager_last_page")  # the last one by digest
NAMESPACE = "swe/sweap-images"
REPOSITORY_KEY = "swebench_pro_resources_server.resources_servers.swebench_pro.image_repository"
AGENT = "swebench_pro_coding_agent"


def docker(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, env=env)


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def task_images(tmp_path_factory) -> dict[str, str]:
    """dockerhub_tag -> the local task image swebench_mini builds (built here when missing)."""
    ok(gym_compose("build", "--benchmark", "swebench_mini", cwd=tmp_path_factory.mktemp("build"), timeout=1800))
    listed = ok(docker("images", "--format", "{{.Repository}}:{{.Tag}}", "gym-compose/swebench-mini")).split()
    found = {}
    for task in TASKS:  # newest first: the one this checkout builds
        found[task] = next(image for image in listed if image.split(":", 1)[1].startswith(f"{task}-"))
    return found


def push_unique(registry: LoopbackRegistry, task_images: dict[str, str], folder: Path,
                env: dict | None = None) -> dict[str, str]:
    """Push each task image plus a layer of its own as REGISTRY/swe/sweap-images:<task>, then remove
    it from the engine; returns task -> the pushed image's digest."""
    folder.mkdir(parents=True, exist_ok=True)
    digests = {}
    for task, local in task_images.items():
        # random bytes, so the layer is each image's own and above the size registry_proxy.py touches
        (folder / "token").write_bytes(os.urandom(256 << 10))
        name = f"{registry.address}/{NAMESPACE}:{task}"
        (folder / "Dockerfile").write_text(f"FROM {local}\nCOPY token /gym-compose-registry-test\n")
        ok(docker("build", "-q", "-t", name, str(folder), env=env))
        ok(docker("push", name, env=env))
        digest = ok(docker("image", "inspect", "--format", "{{index .RepoDigests 0}}", name))
        digests[task] = digest.strip().split("@", 1)[1]
        ok(docker("rmi", name))
        assert docker("image", "inspect", name).returncode != 0
    return digests


def remove_pushed(registry: LoopbackRegistry | RegistryProxy) -> None:
    """Remove what the runs pulled from the registry (by tag and by digest)."""
    listed = docker("images", "-q", f"{registry.address}/{NAMESPACE}").stdout.split()
    if listed:
        docker("rmi", "-f", *sorted(set(listed)))
    assert docker("images", "-q", f"{registry.address}/{NAMESPACE}").stdout.split() == []


def rows_file(path: Path, digests: dict[str, str], by_digest: tuple[str, ...] = ()) -> Path:
    rows = []
    for line in MINI_ROWS.read_text().splitlines():
        row = json.loads(line)
        if row["dockerhub_tag"] in digests:
            row["agent_ref"] = {"name": AGENT}
            row["image_digest"] = digests[row["dockerhub_tag"]] if row["dockerhub_tag"] in by_digest else ""
            rows.append(row)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def with_missing_row(rows: Path, target: Path) -> Path:
    """`rows` and one more whose image the registry does not have."""
    first = json.loads(rows.read_text().splitlines()[0])
    missing = {**first, "instance_id": "swebench_mini__not_pushed", "dockerhub_tag": "not_pushed", "image_digest": ""}
    target.write_text(rows.read_text() + json.dumps(missing) + "\n")
    return target


def run_pro(cwd: Path, project: str, rows: Path, registry: LoopbackRegistry | RegistryProxy, *extra: str,
            env: dict | None = None,
            ) -> tuple[subprocess.CompletedProcess, Path]:
    results = cwd / "results"
    before = set(results.glob("*"))
    done = subprocess.run(
        [*CLI, "up", "--benchmark", "swebench_pro", "-p", project,
         "--head-port", str(free_port()), "--input", str(rows), "--results-dir", str(results),
         f"++{REPOSITORY_KEY}={registry.address}/{NAMESPACE}", *extra],
        cwd=cwd, capture_output=True, text=True, timeout=1500, env=env)
    made = set(results.glob("*")) - before
    assert labelled("container", project) == [], "containers left after the run"
    return done, (made.pop() if made else cwd / "no-run-folder")


def pulls(run_dir: Path) -> list[str]:
    log = run_dir / "sandbox-broker.log"
    return [line for line in log.read_text().splitlines() if "pulling " in line or "pulled " in line] \
        if log.exists() else []


def test_swebench_pro_pulls_each_image_from_a_plain_http_registry_once(task_images, tmp_path):
    registry = start_registry(tmp_path / "registry")
    try:
        digests = push_unique(registry, task_images, tmp_path / "image")
        rows = rows_file(tmp_path / "rows.jsonl", digests, by_digest=(TASKS[-1],))
        images = [f"{registry.address}/{NAMESPACE}:{task}" for task in TASKS[:-1]] + \
                 [f"{registry.address}/{NAMESPACE}@{digests[TASKS[-1]]}"]
        project = f"{PROJECT_PREFIX}-swereg-{os.getpid()}"

        refused, _ = run_pro(tmp_path, project, with_missing_row(rows, tmp_path / "missing.jsonl"), registry)
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert (f"1 of the rows' images are not in their registry: {registry.address}/{NAMESPACE}:not_pushed"
                in refused.stderr) and "--skip-missing-images" in refused.stderr and "Traceback" not in refused.stderr
        assert not (tmp_path / "results").exists() and labelled("network", project) == []  # nothing started

        first, run_dir = run_pro(tmp_path, project, tmp_path / "missing.jsonl", registry, "--skip-missing-images")
        assert first.returncode == 0, first.stderr[-4000:]
        assert "checking 4 task image(s) not on the engine" in first.stderr and "3 found" in first.stderr
        assert "left out 1 row(s) of missing.jsonl" in first.stderr
        scored = read_jsonl(run_dir / "rollouts.jsonl")
        assert sorted(row["dockerhub_tag"] for row in scored) == sorted(TASKS)
        assert all(row["reward"] == 1.0 and row["resolved"] for row in scored), \
            [(row["instance_id"], row.get("error")) for row in scored]
        pulled = pulls(run_dir)
        for image in images:  # pulled on first use, once, and the progress says so
            assert sum(f"pulled {image} in" in line for line in pulled) == 1, pulled
            assert f"pulled {image}" in first.stderr, first.stderr[-3000:]
        for image in images:
            assert docker("image", "inspect", image).returncode == 0, image

        second, run_dir = run_pro(tmp_path, project, rows, registry)
        assert second.returncode == 0, second.stderr[-4000:]
        assert all(row["reward"] == 1.0 for row in read_jsonl(run_dir / "rollouts.jsonl"))
        assert pulls(run_dir) == [] and "not on the engine" not in second.stderr  # every image is on the engine now

        removed = subprocess.run([*CLI, "down", "-p", project, "--images"], cwd=tmp_path, capture_output=True,
                                 text=True, timeout=300)
        assert removed.returncode == 0, removed.stderr[-3000:]
        assert f"removed {len(images)} task image(s) that project {project!r}'s sandbox broker pulled" \
            in removed.stdout + removed.stderr, removed.stdout + removed.stderr
        for image in images + list(task_images.values()):  # what the run pulled goes; what was there stays
            assert (docker("image", "inspect", image).returncode == 0) == (image in task_images.values()), image
    finally:
        registry.stop()
        remove_pushed(registry)


def test_a_layer_failing_its_digest_check_fails_only_its_rows_naming_why_and_resume_runs_them(task_images,
                                                                                               tmp_path):
    registry = start_registry(tmp_path / "registry")
    try:
        with RegistryProxy(registry.address) as proxy:
            digests = push_unique(registry, task_images, tmp_path / "image")
            rows = rows_file(tmp_path / "rows.jsonl", digests)
            layers = {task: set(proxy.layers(NAMESPACE, task)) for task in TASKS}
            broken = TASKS[1]
            own = layers[broken] - set().union(*(layers[task] for task in TASKS if task != broken))
            assert own, layers
            proxy.set("corrupt", only=tuple(sorted(own)))
            project = f"{PROJECT_PREFIX}-swedigest-{os.getpid()}"

            first, run_dir = run_pro(tmp_path, project, rows, proxy)
            assert first.returncode == 1, first.stderr[-4000:]
            assert proxy.applied and {digest for _, digest in proxy.applied} <= own, proxy.applied
            scored = read_jsonl(run_dir / "rollouts.jsonl")
            assert sorted(row["dockerhub_tag"] for row in scored) == sorted(set(TASKS) - {broken})
            assert all(row["reward"] == 1.0 for row in scored)
            (failure,) = read_jsonl(run_dir / "rollouts_failures.jsonl")
            said = json.dumps(failure)
            assert f"{proxy.address}/{NAMESPACE}:{broken}" in said and "verification failed" in said, said[-2000:]
            assert "does not match its digest" in said
            assert "some rollouts failed" in first.stderr and "--resume" in first.stderr

            proxy.set("pass")  # the blob pushed again, say
            resumed, _ = run_pro(tmp_path, project, rows, proxy, "--resume")  # into the same run folder
            assert resumed.returncode == 0, resumed.stderr[-4000:]
            finished = read_jsonl(run_dir / "rollouts.jsonl")
            assert sorted(row["dockerhub_tag"] for row in finished) == sorted(TASKS)  # each row once
            assert all(row["reward"] == 1.0 for row in finished)
            remove_pushed(proxy)
    finally:
        registry.stop()


def test_an_image_budget_below_the_runs_images_removes_each_once_its_rows_are_done(task_images, tmp_path):
    sizes = [int(ok(docker("image", "inspect", "--format", "{{.Size}}", image))) for image in task_images.values()]
    budget_gib = 1.5 * max(sizes) / (1 << 30)  # one pulled image fits, two do not
    registry = start_registry(tmp_path / "registry")
    try:
        digests = push_unique(registry, task_images, tmp_path / "image")
        rows = rows_file(tmp_path / "rows.jsonl", digests)
        project = f"{PROJECT_PREFIX}-swebudget-{os.getpid()}"
        done, run_dir = run_pro(
            tmp_path, project, rows, registry, "--num-samples-in-parallel", "1",
            "++swebench_pro_resources_server.resources_servers.swebench_pro.sandbox_provider="
            f"{{gym_compose: {{image_cache_gib: {budget_gib:.6f}}}}}")
        assert done.returncode == 0, done.stderr[-4000:]
        assert f"image budget {round(budget_gib, 6):g} GiB" in done.stderr, done.stderr[-3000:]
        scored = read_jsonl(run_dir / "rollouts.jsonl")
        assert sorted(row["dockerhub_tag"] for row in scored) == sorted(TASKS)
        assert all(row["reward"] == 1.0 for row in scored), [(row["instance_id"], row.get("error")) for row in scored]
        log = (run_dir / "sandbox-broker.log").read_text()
        removed = [line for line in log.splitlines() if "removed the pulled image" in line]
        pulled = [line for line in log.splitlines() if "pulled " in line and " in " in line]
        assert len(pulled) == 3 and len(removed) == 2, log[-3000:]  # each image pulled once, all but the last removed
        images = [f"{registry.address}/{NAMESPACE}:{task}" for task in TASKS]
        on_engine = [image for image in images if docker("image", "inspect", image).returncode == 0]
        assert len(on_engine) == 1 and all(image.split(":")[-1] not in "".join(removed) for image in on_engine)
    finally:
        registry.stop()
        remove_pushed(registry)


def test_a_registry_with_basic_auth_needs_docker_login_and_then_runs(task_images, tmp_path):
    registry = start_registry(tmp_path / "registry", credentials=("gym", uuid.uuid4().hex))
    assert registry.credentials is not None
    logged_in = {**os.environ, "DOCKER_CONFIG": str(docker_config_dir(tmp_path / "logged-in"))}
    anonymous = {**os.environ, "DOCKER_CONFIG": str(docker_config_dir(tmp_path / "anonymous"))}
    try:
        login = subprocess.run(["docker", "login", registry.address, "-u", registry.credentials[0],
                                "--password-stdin"], input=registry.credentials[1], capture_output=True, text=True,
                               timeout=60, env=logged_in)
        assert login.returncode == 0, login.stderr
        task = {TASKS[0]: task_images[TASKS[0]]}
        digests = push_unique(registry, task, tmp_path / "image", env=logged_in)
        rows = rows_file(tmp_path / "rows.jsonl", digests)
        project = f"{PROJECT_PREFIX}-sweauth-{os.getpid()}"

        refused, _ = run_pro(tmp_path, project, rows, registry, env=anonymous)
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert f"registry {registry.address} needs a login" in refused.stderr
        assert f"docker login {registry.address}" in refused.stderr and "Traceback" not in refused.stderr
        assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())
        assert labelled("network", project) == []

        done, run_dir = run_pro(tmp_path, project, rows, registry, env=logged_in)
        assert done.returncode == 0, done.stderr[-4000:]
        (row,) = read_jsonl(run_dir / "rollouts.jsonl")
        assert row["reward"] == 1.0, row.get("error")
        assert any(f"pulled {registry.address}/{NAMESPACE}:{TASKS[0]} in" in line for line in pulls(run_dir))
    finally:
        registry.stop()
        remove_pushed(registry)


def test_build_pull_pulls_ahead_lists_what_is_missing_and_goes_on_where_it_stopped(task_images, tmp_path):
    registry = start_registry(tmp_path / "registry")
    try:
        digests = push_unique(registry, {TASKS[1]: task_images[TASKS[1]]}, tmp_path / "image")
        rows = rows_file(tmp_path / "rows.jsonl", digests)
        image = f"{registry.address}/{NAMESPACE}:{TASKS[1]}"
        build = ["build", "--benchmark", "swebench_pro", "--pull", f"++{REPOSITORY_KEY}={registry.address}/{NAMESPACE}"]
        first = gym_compose(*build, "--input", str(with_missing_row(rows, tmp_path / "missing.jsonl")), cwd=tmp_path)
        assert first.returncode == 1, first.stderr[-3000:]
        assert f"pulled {image} in" in first.stderr and "(1 of 1," in first.stderr
        assert f"{registry.address}/{NAMESPACE}:not_pushed: not in its registry" in first.stderr
        assert docker("image", "inspect", image).returncode == 0
        again = gym_compose(*build, "--input", str(rows), cwd=tmp_path)
        assert again.returncode == 0, again.stderr[-3000:]
        assert "nothing to pull: every task image the rows name is on the engine" in again.stderr
    finally:
        registry.stop()
        remove_pushed(registry)


def test_saved_task_images_load_and_run_where_the_registry_cannot_be_reached(task_images, tmp_path):
    registry = start_registry(tmp_path / "registry")
    archives = tmp_path / "archives"
    tasks = {task: task_images[task] for task in TASKS[:2]}
    try:
        digests = push_unique(registry, tasks, tmp_path / "image")
        rows = rows_file(tmp_path / "rows.jsonl", digests)
        build = ["build", "--benchmark", "swebench_pro", f"++{REPOSITORY_KEY}={registry.address}/{NAMESPACE}"]
        saved = gym_compose(*build, "--pull", "--input", str(rows), "--save", str(archives), cwd=tmp_path)
        assert saved.returncode == 0, saved.stderr[-3000:]
        assert "saved 2, kept 0 already saved, of 2 task image(s)" in saved.stderr
        index = json.loads((archives / "index.json").read_text())
        images = sorted(f"{registry.address}/{NAMESPACE}:{task}" for task in tasks)
        assert sorted(index) == images and all((archives / entry["file"]).is_file() for entry in index.values())
        again = gym_compose(*build, "--pull", "--input", str(rows), "--save", str(archives), cwd=tmp_path)
        assert "saved 0, kept 2 already saved" in again.stderr, again.stderr[-3000:]  # resumable
    finally:
        registry.stop()
        remove_pushed(registry)  # the engine has neither image now, and their registry is gone
    assert all(docker("image", "inspect", image).returncode != 0 for image in images)
    try:
        loaded = gym_compose(*build, "--load", str(archives), cwd=tmp_path)
        assert loaded.returncode == 0, loaded.stderr[-3000:]
        assert "loaded 2, 0 already on the engine, of 2 task image(s)" in loaded.stderr
        project = f"{PROJECT_PREFIX}-sweload-{os.getpid()}"
        done, run_dir = run_pro(tmp_path, project, rows, registry)  # its address answers nothing now
        assert done.returncode == 0, done.stderr[-4000:]
        scored = read_jsonl(run_dir / "rollouts.jsonl")
        assert sorted(row["dockerhub_tag"] for row in scored) == sorted(tasks)
        assert all(row["reward"] == 1.0 for row in scored) and pulls(run_dir) == []
        broken = tmp_path / "broken"
        broken.mkdir()
        (broken / "index.json").write_text("[1, 2]")
        refused = gym_compose(*build, "--load", str(broken), cwd=tmp_path)
        assert refused.returncode == 2 and "is not an archive index" in refused.stderr
        assert "Traceback" not in refused.stderr
    finally:
        remove_pushed(registry)
