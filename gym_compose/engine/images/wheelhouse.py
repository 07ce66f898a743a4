"""Host-side wheelhouses for builds with no network inside: wheels for the image's platform.

A wheelhouse is a folder of wheels under the cache dir, keyed by everything that decides its
content (requirements, constraints, target platform), so a second build downloads nothing.
Pure-Python packages that only ship an sdist are built into wheels on the host.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gym_compose.engine.images import native_build
from gym_compose.engine.images.build_lock import make_once, publish_complete
from gym_compose.engine.images.image_hash import ContentHash
from gym_compose.engine.images.image_settings import LEAN_PLATFORM, PythonPlatform, machine_arch
from gym_compose.errors import UserError
from gym_compose.plan.requirements import canonical_name

PIP_TIMEOUT_S = 900
MAX_SDIST_BUILDS = 20
MAX_RELEASED_ROUNDS = 20
_MISSING_DISTRIBUTION = re.compile(r"satisfies the requirement (\S+)")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
# The causes of a conflict, one line each. With --only-binary, a dependency that ships only an
# sdist shows as one: "    reasoning-gym 0.1.25 depends on cellpylib==2.4.0" for every candidate
# version; a clash as several: "    google-api-core 2.44.0 depends on protobuf<8.0.0 and >=6.33.5".
_DEPENDS_ON = re.compile(r"^\s+(\S+) (\S+) depends on (.+)$", re.MULTILINE)
# A requirement (or a dependency of one) that a constraint forbids:
# "    The user requested (constraint) datasets==3.6.0"
_RESOLUTION_IMPOSSIBLE = "ResolutionImpossible"
_ALL = "*"  # in the released names: every constraint was dropped
_CONSTRAINT_CLASH = re.compile(r"^\s+The user requested \(constraint\) ([A-Za-z0-9][A-Za-z0-9._-]*)", re.MULTILINE)
# A requirement fetched from outside the package index: `name @ URL`, or a bare VCS/archive URL.
_DIRECT_REFERENCE = re.compile(r"^\s*(?:[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?\s*@\s*)?((?:git\+|https?://|file:)\S+)")


def platform_tags(arch: str | None = None, platform: PythonPlatform = LEAN_PLATFORM) -> list[str]:
    """manylinux tags that run on the offline base (its Debian release's glibc), newest first."""
    arch = arch or machine_arch()
    major, newest_minor = platform.glibc
    tags = [f"manylinux_{major}_{minor}_{arch}" for minor in range(newest_minor, 16, -1)]
    return tags + [f"manylinux2014_{arch}"]  # pip widens this one to manylinux2010 and manylinux1


def target_options(platform: PythonPlatform = LEAN_PLATFORM) -> list[str]:
    python_tag = "cp" + platform.python.replace(".", "")
    version = platform.download_python or platform.python
    options = ["--only-binary=:all:", "--python-version", version, "--implementation", "cp"]
    options += ["--abi", python_tag]
    for tag in platform_tags(platform=platform):
        options += ["--platform", tag]
    return options


def ensure_wheelhouse(
    requirements: str,
    cache_dir: Path,
    progress: Callable[[str], None],
    constraints: str = "",
    platform: PythonPlatform = LEAN_PLATFORM,
    find_links: tuple[Path, ...] = (),
    release_clashes: bool = False,
    resolve_with: str = "",
) -> Path:
    """A folder with wheels for `requirements` (and their dependencies) for the offline base.

    `find_links`: wheelhouses whose wheels may satisfy the constraints, e.g. the runtime's own, so
    a constraint on a wheel built here from an sdist (antlr4-python3-runtime==4.9.3, which
    math-verify's dependencies allow) is met from it instead of being unsatisfiable.
    `release_clashes`: a constraint pip reports as the cause of a conflict is dropped and the
    download retried, so the wheelhouse may hold other versions of constrained packages (a NeMo
    Gym server's own pins, which shadow the runtime's: `server_requirements.shadowing_pins`).
    When the clash runs through packages the requirements do not pin, they are resolved together
    with `resolve_with` (the runtime's own requirements: nemo-gym) and no constraints, as NeMo Gym
    resolves a server's venv; wheels the `find_links` folders hold already are then left out."""
    digest = (
        ContentHash()
        .add_text("requirements", requirements)
        .add_text("constraints", constraints)
        .add_text("target", " ".join(target_options(platform)))
    )
    if release_clashes:  # only then: the keys of every other wheelhouse stay as they were
        digest.add_text("release-clashes", "yes").add_text("resolve-with", resolve_with)
    key = digest.hexdigest()
    wheelhouse = cache_dir / "wheels" / key

    def make() -> None:
        progress(f"wheelhouse: downloading wheels for {_describe(requirements)} (python {platform.python})")
        wheelhouse.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=wheelhouse.parent))
        started = time.monotonic()
        try:
            released = _download(requirements, constraints, staging, platform, find_links, release_clashes,
                                 cache_dir=cache_dir, progress=progress, resolve_with=resolve_with)
            if _ALL in released:
                progress("wheelhouse: these requirements clash with the runtime's pins beyond single packages; "
                         "resolved together with the runtime's own requirements, unpinned (the packages whose "
                         "versions differ shadow the runtime's)")
            elif released:
                progress(f"wheelhouse: the runtime's pins of {', '.join(sorted(released))} clash with these "
                         "requirements; their own versions are kept")
            progress(f"wheelhouse: {len(list(staging.glob('*.whl')))} wheels in {time.monotonic() - started:.1f} s")
            publish_complete(staging, wheelhouse)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    make_once(wheelhouse, cache_dir / "locks" / f"wheels-{key}.lock", make)
    return wheelhouse


def pinned_versions(wheelhouse: Path) -> str:
    """Constraints (`name==version` lines) for every wheel in the wheelhouse."""
    lines = []
    for wheel in sorted(wheelhouse.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        lines.append(f"{name}=={version}")
    return "\n".join(lines) + "\n"


def _download(requirements: str, constraints: str, target: Path, platform: PythonPlatform = LEAN_PLATFORM,
              find_links: tuple[Path, ...] = (), release_clashes: bool = False, *, cache_dir: Path | None = None,
              progress: Callable[[str], None] = print, resolve_with: str = "") -> set[str]:
    """Download into `target`; the names of the constraints released (see ensure_wheelhouse)."""
    (target / "requirements.txt").write_text(requirements)
    (target / "constraints.txt").write_text(constraints)
    released: set[str] = set()
    # not --quiet: a conflict's causes (which pin lacks wheels) are only printed at info level
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check"]
    command += ["--dest", str(target), "--find-links", str(target)]
    for folder in find_links:
        command += ["--find-links", str(folder)]
    command += ["-r", str(target / "requirements.txt"), "-c", str(target / "constraints.txt")]
    command += target_options(platform)
    for _ in range(MAX_SDIST_BUILDS + MAX_RELEASED_ROUNDS):
        completed = _run_pip(command)
        if completed.returncode == 0:
            (target / "requirements.txt").unlink()
            (target / "constraints.txt").unlink()
            if _ALL in released:
                _drop_shared_wheels(target, find_links)
            return released
        output = completed.stdout + completed.stderr
        clashes = {canonical_name(name) for name in _CONSTRAINT_CLASH.findall(output)} - released
        if release_clashes and clashes:
            released |= clashes
            (target / "constraints.txt").write_text(_without(constraints, released))
            continue
        missing = _missing_distribution(output)
        if not missing and release_clashes and _RESOLUTION_IMPOSSIBLE in output and _ALL not in released:
            # the clash runs through packages of the runtime the requirements do not pin (evalplus:
            # google-ai-generativelanguage needs protobuf<5, the runtime's google-api-core
            # protobuf>=6.33.5): resolve them with the runtime's own requirements, as NeMo Gym does
            released |= {_ALL}
            (target / "requirements.txt").write_text(requirements + resolve_with)
            (target / "constraints.txt").write_text("")
            continue
        if not missing:  # pip prints a conflict's causes on stdout, its verdict on stderr
            raise _pip_error("download wheels", output, direct_references(requirements))
        if not _build_pure_python_wheel(missing, target, platform):
            if cache_dir is None:
                raise _not_pure_python(missing, platform)
            wheel = native_build.build_sdist_wheel(missing, platform, cache_dir, progress)
            shutil.copy2(wheel, target / wheel.name)
            # pip's --platform list names manylinux tags only; this wheel is tagged linux_<arch>
            native_platform = f"linux_{machine_arch()}"
            if native_platform not in command:
                command += ["--platform", native_platform]
    raise UserError(f"Too many packages without wheels, or clashing with the constraints, in:\n{requirements}")


def _drop_shared_wheels(target: Path, find_links: tuple[Path, ...]) -> None:
    shared = {wheel.name for folder in find_links for wheel in folder.glob("*.whl")}
    for wheel in target.glob("*.whl"):
        if wheel.name in shared:
            wheel.unlink()


def _without(constraints: str, names: set[str]) -> str:
    kept = []
    for line in constraints.splitlines():
        match = _NAME.match(line)
        if not (match and canonical_name(match.group(1)) in names):
            kept.append(line)
    return "\n".join(kept) + "\n" if kept else ""


def _missing_distribution(stderr: str) -> str | None:
    """The requirement pip found no wheel for: named outright, or the one requirement every
    candidate of a conflict depends on (`cellpylib==2.4.0`, `zss>=1.2.0`) when no constraint is
    part of the conflict (then the versions clash; nothing is missing)."""
    missing = _MISSING_DISTRIBUTION.search(stderr)
    if missing:
        return missing.group(1)
    causes = {cause.strip() for _, _, cause in _DEPENDS_ON.findall(stderr)}
    if len(causes) == 1 and " " not in next(iter(causes)) and not _CONSTRAINT_CLASH.search(stderr):
        return causes.pop()
    return None


def _build_pure_python_wheel(requirement: str, target: Path, platform: PythonPlatform = LEAN_PLATFORM) -> bool:
    """No wheel for the image's platform: build one on the host; True when it is pure Python (and
    now in `target`), False when it is not or does not build here (a C extension: the caller
    compiles it for the image's Python, native_build.build_sdist_wheel)."""
    with tempfile.TemporaryDirectory() as scratch:
        command = [sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--quiet"]
        command += ["--no-deps", "--wheel-dir", scratch, requirement]
        completed = _run_pip(command)
        if completed.returncode != 0:
            return False
        wheels = list(Path(scratch).glob("*.whl"))
        if not wheels or not all(wheel.name.endswith("-none-any.whl") for wheel in wheels):
            return False
        for wheel in wheels:
            shutil.move(str(wheel), target / wheel.name)
        return True


def _not_pure_python(requirement: str, platform: PythonPlatform) -> UserError:
    return UserError(
        f"{requirement!r} has no wheel for Linux {machine_arch()} / Python {platform.python}, "
        "and it is not pure Python, so it cannot be installed into the offline base image.",
        hint="pin a version that publishes manylinux wheels, or build with a registry "
        "reachable (unset GYM_COMPOSE_OFFLINE)",
    )


def _run_pip(command: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(
            f"pip did not finish within {PIP_TIMEOUT_S} s while preparing wheels.",
            hint="check that PyPI (or your PIP_INDEX_URL) is reachable from this machine",
        ) from None


def direct_references(requirements: str) -> list[str]:
    """The lines of `requirements` fetched from a git repository or a URL, not the package index."""
    return [line.strip() for line in requirements.splitlines() if _DIRECT_REFERENCE.match(line)]


def _pip_error(what: str, stderr: str, direct: list[str] | None = None) -> UserError:
    tail = "\n".join("    " + line for line in stderr.strip().splitlines()[-15:])
    if direct:  # the likelier cause: a host outside the package index that this machine cannot reach
        named = "\n".join(f"    {line}" for line in direct)
        return UserError(
            f"pip could not {what} for the offline image build. These requirements are fetched from "
            f"outside the package index, from hosts this machine may not reach:\n{named}\npip said:\n{tail}",
            hint="build where those hosts are reachable, or replace each line with a released package "
            "(docs/nemo-gym-runtime.md#requirements-from-git-or-a-url)",
        )
    return UserError(
        f"pip could not {what} for the offline image build:\n{tail}",
        hint="check the requirement names and that PyPI (or PIP_INDEX_URL) is reachable from this host",
    )


def _describe(requirements: str) -> str:
    names = [line.split(";")[0].strip() for line in requirements.splitlines()]
    names = [name for name in names if name and not name.startswith("#")]
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
