"""A fake engine for the image code: answers the docker commands it runs, records them and every
build context. The `engine` and `runtime_requirements` fixtures (tests/unit/conftest.py) use it."""

from __future__ import annotations

import json
from pathlib import Path

from gym_compose.engine.docker_cli import DockerResult

NO_HOST = 'Error response from daemon: Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host'


class FakeEngine:
    """Answers the docker commands the image code runs; records them and every build context."""

    def __init__(self, pull_works: bool = True):
        self.images: dict[str, dict] = {}
        self.pull_works = pull_works
        self.calls: list[list[str]] = []
        self.builds: list[dict] = []  # `docker build`s: tag, build args, context files, Dockerfile
        self.commits: list[dict] = []  # committed containers: tag, parent, command, copied files, changes
        self.containers: dict[str, dict] = {}
        self.copied: dict[str, str] = {}  # small text files copied into containers: path there -> content
        self._ids = 0

    def add(self, tag: str, labels: dict | None = None, user: str = "", cmd: list[str] | None = None) -> None:
        self._ids += 1
        self.images[tag] = {"Id": f"sha256:{self._ids:064x}", "Size": 1000 * self._ids, "RepoTags": [tag],
                            "Config": {"Labels": labels, "User": user, "Cmd": cmd or ["python3"]}}

    def commands(self, name: str) -> list[list[str]]:
        return [call for call in self.calls if call[0] == name]

    def __call__(self, args, *, timeout, retries=0, check=True, on_line=None, env=None):
        args = list(args)
        self.calls.append(args)
        if args[:2] == ["image", "inspect"]:  # as docker answers: those it has, the others named on stderr
            found = [self.images[tag] for tag in args[2:] if tag in self.images]
            missing = "".join(f"Error: No such image: {tag}\n" for tag in args[2:] if tag not in self.images)
            return DockerResult(tuple(args), 1 if missing else 0, json.dumps(found), missing)
        if args[0] == "pull":
            if self.pull_works:
                self.add(args[-1])
                return DockerResult(tuple(args), 0, "", "")
            return DockerResult(tuple(args), 1, "", NO_HOST)
        if args[0] == "import":
            self.add(args[-1], {"io.gym-compose.image": "debian-python"})
            return DockerResult(tuple(args), 0, "sha256:abc", "")
        if args[0] == "build":
            self._record_build(args, on_line)
            return DockerResult(tuple(args), 0, "", "")
        if args[0] in ("create", "cp", "start", "commit", "rm"):
            return self._container(args, on_line)
        if args[0] == "save":
            Path(args[args.index("--output") + 1]).write_text(json.dumps({args[-1]: self.images[args[-1]]}))
            return DockerResult(tuple(args), 0, "", "")
        if args[0] == "load":
            saved = json.loads(Path(args[args.index("--input") + 1]).read_text())
            self.images.update(saved)
            return DockerResult(tuple(args), 0, "".join(f"Loaded image: {tag}\n" for tag in saved), "")
        raise AssertionError(f"unexpected docker command {args}")

    def _container(self, args, on_line):
        if args[0] == "create":
            name = args[args.index("--name") + 1]
            rest = args[args.index("--name") + 2:]
            rest = rest[2:] if rest[0] == "--user" else rest
            self.containers[name] = {"parent": rest[0], "command": rest[1:], "files": []}
        elif args[0] == "cp":
            folder = Path(args[1].removesuffix("/."))
            name, target = args[2].split(":", 1)
            for path in sorted(path for path in folder.rglob("*") if path.is_file()):
                there = f"{target}/{path.relative_to(folder)}"
                self.containers[name]["files"].append(there)
                if path.suffix == ".txt" and path.stat().st_size < 65536:
                    self.copied[there] = path.read_text()
        elif args[0] == "start":
            on_line("ran")
        elif args[0] == "commit":
            name, tag = args[-2:]
            changes = [value for flag, value in zip(args, args[1:], strict=False) if flag == "--change"]
            self.commits.append({"tag": tag, **self.containers[name], "changes": changes})
            parent = (self.images.get(self.containers[name]["parent"]) or {}).get("Config", {})
            labels, user = dict(parent.get("Labels") or {}), parent.get("User", "")
            cmd = self.containers[name]["command"] or parent.get("Cmd")  # as docker commit: the container's
            for change in changes:
                if change.startswith("LABEL "):
                    labels.update(pair.split("=", 1) for pair in change.split()[1:])
                if change.startswith("USER "):
                    user = change.split()[1]
                if change.startswith("CMD "):
                    cmd = json.loads(change[4:])
            self.add(tag, labels, user, cmd)
        return DockerResult(tuple(args), 0, "", "")

    def _record_build(self, args, on_line):
        tag = args[args.index("--tag") + 1]
        context = Path(args[-1])
        build_args = dict(value.split("=", 1) for flag, value in zip(args, args[1:], strict=False) if flag == "--build-arg")
        files = sorted(str(path.relative_to(context)) for path in context.rglob("*") if path.is_file())
        self.builds.append(
            {"tag": tag, "args": build_args, "files": files, "dockerfile": (context / "Dockerfile").read_text()}
        )
        on_line("Step 1/2 : FROM x")
        labels = {}
        if tag.startswith("gym-compose/base:"):
            labels = {"io.gym-compose.image.parent": build_args["PARENT_IMAGE"]}
        self.add(tag, labels)


def make_implementation(root: Path, name: str = "tiny_server", requirements: str | None = None) -> Path:
    folder = root / name
    (folder / "data").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "__pycache__").mkdir()
    (folder / "app.py").write_text("APP = 1\n")
    (folder / "data" / "rows.jsonl").write_text('{"q": 1}\n')
    (folder / "tests" / "test_app.py").write_text("def test(): pass\n")
    (folder / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"\0")
    if requirements is not None:
        (folder / "requirements.txt").write_text(requirements)
    return folder
