# gym-compose's default sandbox image: the base image (Python and a Debian userland, buildable with
# no registry) with an unprivileged `sandbox` user that owns the work folder /work. Run as root in
# a container of the base by gym_compose/engine/images/sandbox_images.py, then committed with the metadata
# of sandbox.changes. A server's own sandbox image (`sandbox_config.build`) can start FROM it: its
# Dockerfile gets the build argument SANDBOX_IMAGE.
set -eu
echo 'sandbox:x:10002:10002:gym-compose sandbox:/work:/bin/sh' >> /etc/passwd
echo 'sandbox:x:10002:' >> /etc/group
mkdir -p /work
chown 10002:10002 /work
rm -rf /tmp/gym-compose-build
