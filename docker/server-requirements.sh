# A server image with a requirements.txt: its packages installed into the base's /opt/venv. Run as
# root in a container of the base by gym_compose/engine/images/lean_images.py, with this folder (wheels/,
# requirements.txt) at /tmp/gym-compose-build and the server's files already at /srv/server; the
# container is then committed, so the image gains only those packages and the files (this folder
# is removed, and leaves nothing); the folder's image_setup.py, when present, runs last, with
# /opt/venv as its argument. The base's own packages are pinned (constraints), so a server
# cannot replace the runtime's; pip, setuptools and wheel are not (plain `pip freeze` leaves them
# out): a server may ask for a newer setuptools (grl_sokoban: setuptools>=70) without making its
# requirements unsatisfiable. Argument: pip's options (--no-index offline).
set -eu
build=/tmp/gym-compose-build
pip_options=${1:-}
/opt/venv/bin/pip freeze --exclude-editable > "$build/base-constraints.txt"
# shellcheck disable=SC2086  # pip_options is a list of options
/opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --quiet $pip_options \
    --find-links "$build/wheels" -c "$build/base-constraints.txt" -r "$build/requirements.txt"
mkdir -p /opt/venv/share/gym-compose
cp "$build/requirements.txt" /opt/venv/share/gym-compose/server-requirements.txt
# the server's own build step, when it has one (local_llama_cpp_model assembles its model file)
if [ -f /srv/server/image_setup.py ]; then
    /opt/venv/bin/python /srv/server/image_setup.py /opt/venv
fi
rm -rf "$build"
