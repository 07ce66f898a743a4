# A server on the NeMo Gym runtime (`<prefix>/<name>-nemo-gym:<hash>`): run as root in a container
# of the runtime image by gym_compose/engine/images/nemo_gym_images.py, with the server's code (and
# the other servers of its search root it imports) already at /srv/gym/<server_type>/<name>/ and,
# for a server with requirements of its own, this folder (wheels/, requirements.txt, shadow.txt)
# at /tmp/gym-compose-build; the container is then committed, one layer.
# The server's own packages (NeMo Gym's per-server venv, minus nemo-gym itself, which the runtime
# holds) are installed with the runtime's versions as constraints, so they stay shared. shadow.txt
# (name==version lines) names the server's pins that clash with the runtime's versions: they go into
# /opt/server-packages, which is on PYTHONPATH ahead of the runtime's site-packages (the shadow
# layer). Argument: pip's options (--no-index offline); none: the server has no requirements.
set -eu
build=/tmp/gym-compose-build
mkdir -p /opt/server-packages
if [ -f "$build/requirements.txt" ]; then
    pip_options=${1:-}
    if grep -q '[^[:space:]]' "$build/shadow.txt"; then
        # shellcheck disable=SC2086  # pip_options is a list of options
        /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --quiet --ignore-requires-python --no-compile \
            $pip_options --find-links "$build/wheels" --no-deps --target /opt/server-packages -r "$build/shadow.txt"
    fi
    cp "$build/shadow.txt" /opt/server-packages/gym-compose-shadow.txt
    # the runtime's pins, less the shadowed ones, whose server versions take their place
    /opt/venv/bin/pip freeze --exclude-editable | /opt/venv/bin/python3 -c '
import re, sys
name = lambda line: re.sub(r"[-_.]+", "-", line.split("==")[0].strip()).lower()
shadowed = {name(line) for line in open(sys.argv[1]) if line.strip()}
sys.stdout.writelines(line for line in sys.stdin if name(line) not in shadowed)' "$build/shadow.txt" \
        > "$build/runtime-constraints.txt"
    cat "$build/shadow.txt" >> "$build/runtime-constraints.txt"
    # staged in a prefix first, with the shadow layer on the path: pip counts those packages as
    # installed and leaves the runtime's own copies alone
    # shellcheck disable=SC2086
    PYTHONPATH=/opt/server-packages /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --quiet \
        --ignore-requires-python --no-compile $pip_options --find-links "$build/wheels" --prefix "$build/staging" \
        -c "$build/runtime-constraints.txt" -r "$build/requirements.txt"
    mkdir -p "$build/staging/share/gym-compose"
    cp "$build/requirements.txt" "$build/staging/share/gym-compose/server-requirements.txt"
    cp -R "$build/staging/." /opt/venv/
    # bytecode for what was added (the staged packages, the shadow layer), made where it stays: made in
    # the staging prefix it would name that prefix and, the copy having new times, be stale, compiled
    # again in memory at every start (the server's user cannot write it). As pip does, a file that
    # does not compile is left as it is.
    (cd "$build/staging" && find . -name '*.py') | sed 's|^\.|/opt/venv|' > "$build/added.txt"
    /opt/venv/bin/python -W ignore -m compileall -q -j 0 --invalidation-mode unchecked-hash -i "$build/added.txt" /opt/server-packages >/dev/null || true
fi
# the server's user owns its code: NeMo Gym servers write into their own folder (swebench_pro's logs/)
chown -R 10001:10001 /srv/gym
rm -rf "$build"
