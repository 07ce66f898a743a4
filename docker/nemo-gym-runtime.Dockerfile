# The NeMo Gym runtime (docs/nemo-gym-runtime.md): the real nemo-gym package and its dependencies
# on a Python it supports (3.13), in one venv shared by every server that runs on it, plus the
# gym_compose container modules for the launcher and the healthcheck (copied last). Built by
# gym_compose/engine/images/nemo_gym_images.py: PARENT_IMAGE is the offline Debian trixie image (or
# python:3.13-slim); PIP_INSTALL_OPTIONS is --no-index when wheels/ holds every wheel (offline).
# nemo-gym 0.7 asks for Python >=3.13.14; trixie ships 3.13.5, hence --ignore-requires-python.
ARG PARENT_IMAGE

FROM ${PARENT_IMAGE} AS venv
ARG PIP_INSTALL_OPTIONS=""
COPY wheels/ /tmp/wheels/
COPY requirements.txt /tmp/requirements.txt
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --quiet --ignore-requires-python \
        ${PIP_INSTALL_OPTIONS} --find-links /tmp/wheels -r /tmp/requirements.txt \
 && echo /opt/gym-compose > "$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gym_compose.pth"

FROM ${PARENT_IMAGE}
ARG PARENT_IMAGE
LABEL io.gym-compose.image=nemo-gym-runtime io.gym-compose.image.parent=${PARENT_IMAGE}
# nft: a server that shares a network with its sandboxes closes that side with it before it starts
# (gym_compose/server/netguard.py). The offline parent has it; python:3.13-slim gets it from apt.
RUN echo 'server:x:10001:10001:gym-compose server:/home/server:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'server:x:10001:' >> /etc/group \
 && mkdir -p /home/server /srv/gym \
 && chown 10001:10001 /home/server /srv/gym \
 && if ! command -v nft >/dev/null 2>&1; then \
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables \
          >/dev/null && rm -rf /var/lib/apt/lists/*; } \
        || echo "note: no nft in this image: servers that share a network with their sandboxes will not start" >&2; \
    fi
# GIT_PYTHON_REFRESH: nemo_gym imports GitPython, which refuses to import without a git binary.
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    VIRTUAL_ENV=/opt/venv \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LANG=C.UTF-8 \
    HOME=/tmp/nemo_gym/home \
    GIT_PYTHON_REFRESH=quiet \
    RAY_USAGE_STATS_ENABLED=0 \
    HF_HUB_OFFLINE=1 \
    PYTHONPATH=/srv/gym
USER 10001:10001
WORKDIR /srv/gym
CMD ["python", "-m", "gym_compose.server.nemo_gym_launch"]
COPY --from=venv /opt/venv /opt/venv
# Last, so an edit to gym_compose's container modules rebuilds only this small layer, never the
# ~1.3 GB venv above (the context's other files do not change with gym_compose).
COPY gym_compose/ /opt/gym-compose/gym_compose/
# NeMo Gym's sandbox registry finds provider `gym_compose` (the project's sandbox broker) through
# this entry point; /opt/gym-compose is on sys.path, so importlib.metadata reads the dist-info there.
COPY gym_compose/sandbox/nemo_gym_entry_point/ /opt/gym-compose/gym_compose_sandbox_provider-1.0.dist-info/
