# gym-compose base image, first half (`<prefix>/base-venv:<hash>`): Python's venv in /opt/venv with
# the runtime requirements, and the non-root server user. Run as root in a container of the parent
# image (python:3.11-slim, GYM_COMPOSE_BASE_IMAGE, or the offline Debian image) by
# gym_compose/engine/images/lean_images.py, with this folder at /tmp/gym-compose-build; the container is
# then committed as the image. Arguments: the Python version the parent must have, and pip's
# options (--no-index when wheels/ holds every wheel: offline).
set -eu
build=/tmp/gym-compose-build
python_version=$1
pip_options=${2:-}
python3 -c 'import sys; v = "%d.%d" % sys.version_info[:2]; sys.exit(0 if v == sys.argv[1] else "the parent image has Python " + v + ", gym-compose needs " + sys.argv[1])' "$python_version"
# nft: a server that shares a network with its sandboxes closes that side with it before it starts
# (gym_compose/server/netguard.py). The offline parent has it; a public slim image gets it from apt.
if ! command -v nft >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && apt-get update -qq \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables >/dev/null; then
        rm -rf /var/lib/apt/lists/*
    else
        echo "note: no nft in this image: servers that share a network with their sandboxes will not start" >&2
    fi
fi
python3 -m venv /opt/venv
# shellcheck disable=SC2086  # pip_options is a list of options
/opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --quiet $pip_options \
    --find-links "$build/wheels" -r "$build/runtime-requirements.txt"
echo /opt/gym-compose > "$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gym_compose.pth"
echo 'server:x:10001:10001:gym-compose server:/home/server:/usr/sbin/nologin' >> /etc/passwd
echo 'server:x:10001:' >> /etc/group
mkdir -p /home/server /srv/server
chown 10001:10001 /home/server /srv/server
rm -rf "$build"
