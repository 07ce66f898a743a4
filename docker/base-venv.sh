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
# What the offline parent has and a public slim image may lack, from apt: nft (a server that shares
# a network with its sandboxes closes that side with it before it starts: gym_compose/server/netguard.py)
# and OpenMP's runtime, libgomp1 (manylinux wheels such as xllamacpp or lightgbm link it without
# vendoring it; python:3.11-slim has none).
missing=""
command -v nft >/dev/null 2>&1 || missing="$missing nftables"
ldconfig -p 2>/dev/null | grep -q 'libgomp\.so\.1' || missing="$missing libgomp1"
if [ -n "$missing" ]; then
    # shellcheck disable=SC2086  # missing is a list of packages
    if command -v apt-get >/dev/null 2>&1 && apt-get update -qq \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null; then
        rm -rf /var/lib/apt/lists/*
    else
        echo "note: could not install$missing from apt: without nft, servers that share a network with their" \
             "sandboxes will not start; without libgomp1, packages that need OpenMP's runtime will not load" >&2
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
