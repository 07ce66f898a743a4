# gym-compose base image, second half (`<prefix>/base:<hash>`): the container half of the
# gym_compose package at /opt/gym-compose (on sys.path through the .pth file base-venv.sh wrote),
# compiled. Run as root in a container of the base-venv image with this folder at
# /tmp/gym-compose-build, then committed with the metadata of base.changes. Kept apart from
# base-venv.sh so that an edit to the package re-runs only this part.
set -eu
build=/tmp/gym-compose-build
mkdir -p /opt/gym-compose
cp -R "$build/gym_compose" /opt/gym-compose/
/opt/venv/bin/python -m compileall -q /opt/gym-compose
rm -rf "$build"
