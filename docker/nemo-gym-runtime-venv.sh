# The NeMo Gym runtime, first half (`<prefix>/nemo-gym-runtime-venv:<hash>`): the real nemo-gym
# package and its dependencies on a Python it supports (3.13), in one venv shared by every server
# that runs on it, and the non-root server user. Run as root in a container of the parent image
# (the offline Debian trixie image, or python:3.13-slim) by gym_compose/engine/images/nemo_gym_images.py,
# with this folder (wheels/, requirements.txt) at /tmp/gym-compose-build; the container is then
# committed as the image (one layer, not a Dockerfile's stage copied into another). nemo-gym 0.7
# asks for Python >=3.13.14; trixie ships 3.13.5, hence --ignore-requires-python. Argument: pip's
# options (--no-index when wheels/ holds every wheel: offline).
set -eu
build=/tmp/gym-compose-build
pip_options=${1:-}
python3 -m venv /opt/venv
# shellcheck disable=SC2086  # pip_options is a list of options
/opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --quiet --ignore-requires-python --no-compile \
    $pip_options --find-links "$build/wheels" -r "$build/requirements.txt"
# The servers run as a user who cannot write here, so the bytecode is made now: on every core at once
# (pip compiles one file at a time: 135 of its 170 s here). As with pip, a file that does not compile
# (a template, a Python 2 example) is left as it is. Unchecked-hash bytecode: this venv never changes,
# and an image commit may move a file's time by a second, which made 12 of 18,885 timestamped .pyc stale.
/opt/venv/bin/python -W ignore -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/venv/lib >/dev/null || true
# the gym_compose container modules go to /opt/gym-compose in the second half (nemo-gym-runtime.changes)
mkdir -p /opt/gym-compose
echo /opt/gym-compose > "$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gym_compose.pth"
echo 'server:x:10001:10001:gym-compose server:/home/server:/usr/sbin/nologin' >> /etc/passwd
echo 'server:x:10001:' >> /etc/group
mkdir -p /home/server /srv/gym
chown 10001:10001 /home/server /srv/gym
# nft: a server that shares a network with its sandboxes closes that side with it before it starts
# (gym_compose/server/netguard.py). The offline parent has it; python:3.13-slim gets it from apt.
if ! command -v nft >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && apt-get update -qq \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables >/dev/null; then
        rm -rf /var/lib/apt/lists/*
    else
        echo "note: no nft in this image: servers that share a network with their sandboxes will not start" >&2
    fi
fi
rm -rf "$build"
