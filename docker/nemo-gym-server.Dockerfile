# A server on the NeMo Gym runtime: the shared runtime image, the packages of the server's own
# requirements (NeMo Gym's per-server venv, minus nemo-gym itself, which the runtime holds) in a
# staging prefix, and its code where a NeMo Gym checkout has it: /srv/gym/<server_type>/<name>/,
# with the other servers of the same search root it imports beside it.
# shadow.txt (name==version lines, written by gym_compose/engine/images/nemo_gym_images.py) names the
# server's pins that clash with the runtime's versions: they go into /opt/server-packages, which is
# on PYTHONPATH ahead of the runtime's site-packages (the shadow layer); everything else the server
# needs is installed with the runtime's versions as constraints, so it stays shared.
ARG RUNTIME_IMAGE

FROM ${RUNTIME_IMAGE} AS requirements
ARG PIP_INSTALL_OPTIONS=""
USER root
COPY wheels/ /tmp/wheels/
COPY requirements.txt shadow.txt /tmp/
# The markers keep the staging prefix and the shadow folder from being empty: an empty COPY --from
# layer fails to export now and then on Docker 20.10 with fuse-overlayfs ("layer does not exist").
RUN mkdir -p /tmp/staging/share/gym-compose /tmp/shadow \
 && echo "$(cat /tmp/requirements.txt)" > /tmp/staging/share/gym-compose/server-requirements.txt \
 && echo "$(cat /tmp/shadow.txt)" > /tmp/shadow/gym-compose-shadow.txt \
 && if grep -q '[^[:space:]]' /tmp/shadow.txt; then \
        pip install --no-cache-dir --disable-pip-version-check --quiet --ignore-requires-python \
            ${PIP_INSTALL_OPTIONS} --find-links /tmp/wheels --no-deps --target /tmp/shadow -r /tmp/shadow.txt; \
    fi \
 && if grep -q '[^[:space:]]' /tmp/requirements.txt; then \
        pip freeze --exclude-editable | python3 -c 'import re, sys; name = lambda line: re.sub(r"[-_.]+", "-", line.split("==")[0].strip()).lower(); shadowed = {name(line) for line in open("/tmp/shadow.txt") if line.strip()}; sys.stdout.writelines(line for line in sys.stdin if name(line) not in shadowed)' > /tmp/runtime-constraints.txt \
        && cat /tmp/shadow.txt >> /tmp/runtime-constraints.txt \
        && PYTHONPATH=/tmp/shadow pip install --no-cache-dir --disable-pip-version-check --quiet --ignore-requires-python \
            ${PIP_INSTALL_OPTIONS} --find-links /tmp/wheels --prefix /tmp/staging \
            -c /tmp/runtime-constraints.txt -r /tmp/requirements.txt; \
    fi

FROM ${RUNTIME_IMAGE}
ARG RUNTIME_IMAGE
ARG SERVER_DIR
LABEL io.gym-compose.image=server io.gym-compose.image.base=${RUNTIME_IMAGE} io.gym-compose.runtime=nemo_gym
ENV GYM_COMPOSE_SERVER_DIR=${SERVER_DIR} \
    PYTHONPATH=/srv/gym:/opt/server-packages
COPY --from=requirements /tmp/staging/ /opt/venv/
COPY --from=requirements /tmp/shadow/ /opt/server-packages/
# the server's user owns its code: NeMo Gym servers write into their own folder (swebench_pro's logs/)
COPY --chown=10001:10001 gym/ /srv/gym/
