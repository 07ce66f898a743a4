"""The checks before a SWE run whose images come from a registry, with fakes for the registry and
the engine: a missing image (stop, or --skip-missing-images and its rows left out), a registry that
wants a login, too little disk, too little memory; the registry client's answers (tag, digest, a
manifest list, basic auth, a token); the host's `docker login` handed to the broker."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest

from gym_compose.config import load
from gym_compose.config.request import ConfigRequest
from gym_compose.contract import SANDBOX_REGISTRY_AUTH_SECRET, image_registry
from gym_compose.engine.registry_login import registry_credentials, write_registry_auth
from gym_compose.engine.registry_manifests import ImageReference, ManifestAnswer, ManifestClient
from gym_compose.errors import UserError
from gym_compose.paths import PROJECT_ROOT
from gym_compose.plan.model import StackOptions
from gym_compose.plan.planner import plan_stack
from gym_compose.render.compose import RenderOptions, compose_model, write_project
from gym_compose.render.sandbox_services import broker_settings
from gym_compose.sandbox.broker.registry_auth import auth_for, load_registry_auth, pull_failure
from gym_compose.stack.engine_room import check_engine_room
from gym_compose.stack.swe_preflight import ImagesToPull, check_pulled_images, rows_without_images

REPOSITORY = "registry.example:5000/swe/sweap-images"
GIB = 1 << 30


def loaded_pro(*overrides: str):
    return load(ConfigRequest(benchmarks=["swebench_pro"], overrides=[
        f"++swebench_pro_resources_server.resources_servers.swebench_pro.image_repository={REPOSITORY}",
        *overrides]), cwd=PROJECT_ROOT)


def rows(tmp_path: Path, count: int = 3) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"instance_id": f"i{n}", "dockerhub_tag": f"tag{n}", "image_digest": ""}) + "\n"
                            for n in range(count)))
    return path


def registry_with(missing: set[str] = frozenset(), login: bool = False):
    def answer(images: list[str]) -> dict[str, ManifestAnswer]:
        return {image: ManifestAnswer(image, None, problem="registry.example:5000 asks for credentials (HTTP 401)",
                                      needs_login=True) if login
                else ManifestAnswer(image, image.split(":")[-1] not in missing, 2_000_000_000)
                for image in images}
    return answer


def check(tmp_path, manifests, **kwargs):
    loaded = loaded_pro()
    return check_pulled_images(loaded.data, loaded.search_roots, rows(tmp_path), image_present=lambda image: False,
                               probe=lambda host: None, manifests=manifests, **kwargs)


def test_a_missing_image_stops_the_run_naming_it_and_the_flag(tmp_path, capsys):
    with pytest.raises(UserError) as raised:
        check(tmp_path, registry_with(missing={"tag1"}))
    message = str(raised.value)
    assert f"1 of the rows' images are not in their registry: {REPOSITORY}:tag1" in message
    assert "--skip-missing-images" in message and "nothing was started" in message
    err = capsys.readouterr().err
    assert "checking 3 task image(s) not on the engine in registry.example:5000" in err
    assert "2 found (4.00 GB to pull), 1 missing" in err


def test_skip_missing_images_leaves_their_rows_out(tmp_path, capsys):
    found = check(tmp_path, registry_with(missing={"tag1"}), skip_missing=True)
    assert found.skipped == {f"{REPOSITORY}:tag1"} and found.count == 2 and found.pull_bytes == 4_000_000_000
    assert "leaving out the rows of 1 image(s)" in capsys.readouterr().err
    loaded = loaded_pro()
    kept = tmp_path / "kept.jsonl"
    assert rows_without_images(rows(tmp_path), kept, loaded.data, loaded.search_roots, found.skipped) == 1
    assert [json.loads(line)["dockerhub_tag"] for line in kept.read_text().splitlines()] == ["tag0", "tag2"]


def test_a_registry_that_wants_a_login_names_it_and_docker_login(tmp_path):
    with pytest.raises(UserError) as raised:
        check(tmp_path, registry_with(login=True), skip_missing=True)
    assert "registry registry.example:5000 needs a login" in str(raised.value)
    assert "run `docker login registry.example:5000`" in str(raised.value)


def stack_of(loaded):
    return plan_stack(loaded.data, loaded.search_roots, StackOptions(project="p"))


def test_too_little_disk_for_the_largest_image_stops_the_run_and_more_images_than_fit_get_a_budget(capsys):
    stack = stack_of(loaded_pro())
    assert stack.sandboxes.options.image_cache_gib is None
    with pytest.raises(UserError) as raised:
        check_engine_room(stack, ImagesToPull(set(), {"a": 2_500_000_000, "b": 1_000_000_000}),
                          room=lambda: (64 * GIB, 8, 3_000_000_000))
    assert ("task image a is about 5.0 GB unpacked (2.5 GB compressed), more than the image budget of 2.4 GB"
            in str(raised.value))
    assert "nothing was started" in raised.value.hint
    stack = stack_of(loaded_pro())
    check_engine_room(stack, ImagesToPull(set(), {"a": 1_000_000_000, "b": 1_000_000_000}),
                      room=lambda: (64 * GIB, 8, 3_000_000_000))
    err = capsys.readouterr().err
    assert "image budget 2.2 GiB = 2.4 GB (80% of the free space; the sandbox setting image_cache_gib sets it)" in err
    assert "image budget: the pulled images will not all fit; each is removed once no sandbox uses it" in err
    assert stack.sandboxes.options.image_cache_gib == 2.2  # what the broker is told
    assert broker_settings(stack, {}).image_cache_bytes == int(2.2 * GIB)


def test_an_image_budget_beyond_the_free_space_is_refused():
    stack = stack_of(loaded_pro("++swebench_pro_resources_server.resources_servers.swebench_pro."
                                "sandbox_provider={gym_compose: {image_cache_gib: 10}}"))
    assert stack.sandboxes.options.image_cache_gib == 10.0
    with pytest.raises(UserError, match=r"the image budget \(image_cache_gib 10 GiB, 10.7 GB\) is more than the "
                                        r"3.0 GB free"):
        check_engine_room(stack, ImagesToPull(set(), {"a": 1_000_000_000}), room=lambda: (64 * GIB, 8, 3_000_000_000))
    with pytest.raises(UserError, match="image_cache_gib must be a number of GiB above 0, got 0"):
        stack_of(loaded_pro("++swebench_pro_resources_server.resources_servers.swebench_pro."
                            "sandbox_provider={gym_compose: {image_cache_gib: 0}}"))


def test_memory_per_sandbox_and_sandboxes_at_once_against_the_engine(capsys):
    check_engine_room(stack_of(loaded_pro()), ImagesToPull(set()), room=lambda: (16 * GIB, 4, None))
    err = capsys.readouterr().err
    assert "memory: up to 1 sandbox(es) at once, 30.0 GiB each at most; the engine has 16.0 GiB" in err
    assert "warning: one sandbox may use 30.0 GiB, more than the engine's 16.0 GiB" in err
    many = loaded_pro("++swebench_pro_resources_server.resources_servers.swebench_pro.sandbox_config.resources."
                      "memory_mib=8192", "++swebench_pro_resources_server.resources_servers.swebench_pro."
                      "sandbox_provider={gym_compose: {max_live: 4}}")
    check_engine_room(stack_of(many), ImagesToPull(set()), room=lambda: (16 * GIB, 4, None))
    err = capsys.readouterr().err
    assert "memory: up to 4 sandbox(es) at once, 8.0 GiB each at most" in err
    assert "warning: 4 sandboxes of 8.0 GiB may need 32.0 GiB, more than the engine's 16.0 GiB" in err


def test_image_references_and_their_registries():
    assert image_registry("127.0.0.1:5000/swe/sweap-images:t") == "127.0.0.1:5000"
    assert image_registry("jefzda/sweap-images:t") == image_registry("docker.io/jefzda/x") == "docker.io"
    assert ImageReference.parse("docker.io/jefzda/sweap-images:t") == ImageReference("docker.io", "jefzda/sweap-images", "t")
    assert ImageReference.parse("python:3.11").repository == "library/python"
    ref = ImageReference.parse("127.0.0.1:5000/swe/x@sha256:ab")
    assert (ref.registry, ref.repository, ref.reference, ref.api_host) == ("127.0.0.1:5000", "swe/x", "sha256:ab",
                                                                           "127.0.0.1:5000")
    assert ImageReference.parse("localhost:5000/x").reference == "latest"


def fake_registry(login: tuple[str, str] | None, token: bool = False):
    """A registry API: swe/x:one (a manifest list), swe/x:two (a manifest); basic auth or a token."""
    single = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "config": {"size": 10},
              "layers": [{"size": 1000}, {"size": 500}]}
    listing = {"mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
        {"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64"}},
        {"digest": "sha256:amd", "platform": {"os": "linux", "architecture": "amd64"}}]}
    manifests = {"one": listing, "two": single, "sha256:amd": {**single, "layers": [{"size": 7}]}}
    basic = "Basic " + base64.b64encode(":".join(login).encode()).decode() if login else None

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/token":
            if request.headers.get("authorization") != basic:
                return httpx.Response(401)
            assert request.url.params["scope"] == "repository:swe/x:pull"
            return httpx.Response(200, json={"token": "T"})
        if request.url.path == "/v2/":
            return httpx.Response(401)
        wanted = "Bearer T" if token else basic
        if login and request.headers.get("authorization") != wanted:
            challenge = ('Bearer realm="https://reg.example/token",service="reg"' if token
                         else 'Basic realm="test"')
            return httpx.Response(401, headers={"www-authenticate": challenge})
        reference = request.url.path.rsplit("/", 1)[1]
        if reference not in manifests:
            return httpx.Response(404, json={"errors": [{"code": "MANIFEST_UNKNOWN"}]})
        return httpx.Response(200, json=manifests[reference])

    return httpx.Client(transport=httpx.MockTransport(handle))


@pytest.mark.parametrize("token", [False, True])
def test_the_registry_client_finds_sizes_and_missing_images_with_a_login(token):
    client = ManifestClient(lambda registry: ("u", "p"), lambda host: False, fake_registry(("u", "p"), token))
    answers = client.ask_all(["reg.example/swe/x:one", "reg.example/swe/x:two", "reg.example/swe/x:three",
                              "reg.example/swe/x@sha256:amd"])
    assert answers["reg.example/swe/x:one"] == ManifestAnswer("reg.example/swe/x:one", True, 17)  # amd64's layers
    assert answers["reg.example/swe/x:two"].compressed_bytes == 1510
    assert answers["reg.example/swe/x:three"].found is False
    assert "reg.example has no swe/x:three" in answers["reg.example/swe/x:three"].problem
    assert answers["reg.example/swe/x@sha256:amd"].found is True


def test_the_registry_client_without_a_login_says_it_needs_one():
    client = ManifestClient(lambda registry: None, lambda host: False, fake_registry(("u", "p")))
    answer = client.ask("reg.example/swe/x:two")
    assert answer.found is None and answer.needs_login and "asks for credentials (HTTP 401)" in answer.problem
    wrong = ManifestClient(lambda registry: ("u", "wrong"), lambda host: False, fake_registry(("u", "p"), True))
    assert "refused the credentials of `docker login reg.example`" in wrong.ask("reg.example/swe/x:two").problem


def test_the_hosts_docker_login_goes_to_the_broker_for_its_registries_only(tmp_path, monkeypatch):
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"auths": {
        "127.0.0.1:5000": {"auth": base64.b64encode(b"gym:secret").decode()},
        "https://index.docker.io/v1/": {"auth": base64.b64encode(b"hub:pw").decode()},
        "other.example": {"auth": base64.b64encode(b"x:y").decode()}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    assert registry_credentials("127.0.0.1:5000") == ("gym", "secret")
    assert registry_credentials("docker.io") == ("hub", "pw")
    assert registry_credentials("ghcr.io") is None
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    assert write_registry_auth(secrets, ["127.0.0.1:5000", "ghcr.io"]) == ["127.0.0.1:5000"]
    entries = load_registry_auth(secrets / SANDBOX_REGISTRY_AUTH_SECRET)
    assert entries == {"127.0.0.1:5000": {"username": "gym", "password": "secret"}}  # not other.example's
    assert auth_for(entries, "127.0.0.1:5000/swe/x:t") == {"username": "gym", "password": "secret"}
    assert auth_for(entries, "docker.io/jefzda/x:t") is None


def test_a_pull_the_registry_refuses_says_docker_login():
    assert "run `docker login 127.0.0.1:5000` on the host" in pull_failure(
        "127.0.0.1:5000/x:t", "no basic auth credentials", had_credentials=False)
    assert "refused the credentials" in pull_failure("127.0.0.1:5000/x:t", "unauthorized", had_credentials=True)
    assert pull_failure("x:t", "i/o timeout", had_credentials=False) == "i/o timeout"  # no advice to give


def test_a_pull_that_fails_otherwise_says_what_the_engines_words_mean_and_what_to_do():
    def said(message: str) -> str:
        return pull_failure("127.0.0.1:5000/x:t", message, had_credentials=False)

    assert "does not match its digest" in said("filesystem layer verification failed for digest sha256:ab")
    # a digest that holds "401" is no refusal (a CI run drew this one)
    digest = "sha256:9ccdfeb75e74bd295c771401005841c30530423c9701e339b0e794e2036fa945"
    assert "does not match its digest" in said(f"filesystem layer verification failed for digest {digest}")
    assert "docker login" in said("received unexpected HTTP status: 401 Unauthorized")
    assert "docker login" in said("pull access denied for x, repository does not exist or may require 'docker login'")
    assert "lower the sandbox setting image_cache_gib" in said("write /var/lib/docker/x: no space left on device")
    assert "--skip-missing-images" in said("manifest for 127.0.0.1:5000/x:t not found: manifest unknown")
    assert "resuming the layers already on the engine" in said("unexpected EOF")
    assert said("unexpected EOF").startswith("unexpected EOF (")  # the engine's words first


def test_pull_stall_s_reaches_the_broker_and_nonsense_is_refused():
    assert broker_settings(stack_of(loaded_pro()), {}).pull_stall_s == 120.0
    setting = "++swebench_pro_resources_server.resources_servers.swebench_pro.sandbox_provider="
    assert broker_settings(stack_of(loaded_pro(setting + "{gym_compose: {pull_stall_s: 30}}")), {}).pull_stall_s == 30
    for bad in ("0", "true", "soon"):
        with pytest.raises(UserError, match="pull_stall_s must be a number of seconds of 5 or more"):
            stack_of(loaded_pro(setting + "{gym_compose: {pull_stall_s: %s}}" % bad))


def test_the_broker_gets_a_credentials_secret_when_it_pulls(tmp_path):
    stack = stack_of(loaded_pro())
    assert stack.sandboxes.pulled_registries() == ["registry.example:5000"]
    images = {"base": "b", "sandbox-broker": "sb"}
    model = compose_model(stack, images, options=RenderOptions(docker_socket=("/var/run/docker.sock", 999, False)))
    assert SANDBOX_REGISTRY_AUTH_SECRET in model["services"]["sandbox-broker"]["secrets"]
    write_project(stack, images, tmp_path, options=RenderOptions(docker_socket=("/var/run/docker.sock", 999, False)))
    assert (tmp_path / "secrets" / SANDBOX_REGISTRY_AUTH_SECRET).read_text() == "{}"
    mini = stack_of(load(ConfigRequest(benchmarks=["swebench_mini"]), cwd=PROJECT_ROOT))
    assert mini.sandboxes.pulled_registries() == []
    model = compose_model(mini, images, options=RenderOptions(docker_socket=("/var/run/docker.sock", 999, False)))
    assert SANDBOX_REGISTRY_AUTH_SECRET not in model["services"]["sandbox-broker"]["secrets"]


def test_build_pull_pulls_what_the_engine_lacks_a_few_at_a_time_and_lists_failures(tmp_path, monkeypatch):
    from gym_compose.engine.images.task_pulls import pull_task_images
    from tests.support.fake_docker_cli import install_fake_docker

    calls = install_fake_docker(tmp_path, monkeypatch)(
        '"pull --quiet reg.example/x:gone") echo "manifest for reg.example/x:gone not found" >&2; exit 1 ;;')
    lines: list[str] = []
    report = pull_task_images(["reg.example/x:a", "reg.example/x:b", "reg.example/x:gone", "reg.example/x:here"],
                              {"reg.example/x:a": 1_000_000_000, "reg.example/x:b": 500_000_000}, 2, lines.append,
                              present=lambda image: image.endswith(":here"))
    assert sorted(report.pulled) == ["reg.example/x:a", "reg.example/x:b"] and report.present == ["reg.example/x:here"]
    assert report.failed == {"reg.example/x:gone": "manifest for reg.example/x:gone not found"}
    assert lines[0] == "pulling 3 task image(s) (1.50 GB compressed), 2 at a time; 1 already on the engine"
    assert any("pulled reg.example/x:a in" in line and "of 1.50 GB" in line for line in lines)
    assert "pull --quiet reg.example/x:here" not in calls()  # resumable: what is there is not pulled again


def test_docker_hub_is_asked_by_head_only_and_the_disk_line_says_so(capsys):
    methods: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        methods.append(f"{request.method} {request.url.host}{request.url.path}")
        return httpx.Response(200, json={"layers": [{"size": 5}]})

    client = ManifestClient(lambda registry: None, lambda host: False, httpx.Client(transport=httpx.MockTransport(handle)))
    answer = client.ask("jefzda/sweap-images:t")
    assert answer == ManifestAnswer("jefzda/sweap-images:t", True, None)  # no GET: Docker Hub counts those as pulls
    assert [m for m in methods if "/manifests/" in m] == ["HEAD registry-1.docker.io/v2/jefzda/sweap-images/manifests/t"]
    check_engine_room(stack_of(loaded_pro()), ImagesToPull(set(), {"a": 1_000_000_000, "b": None}),
                      room=lambda: (64 * GIB, 8, 100_000_000_000))
    assert "disk: 2 image(s) to pull, 1.00 GB compressed for the 1 whose size was asked (Docker Hub's are not" in \
        capsys.readouterr().err
