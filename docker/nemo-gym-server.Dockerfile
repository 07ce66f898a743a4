# A server on the NeMo Gym runtime: the shared runtime image, the packages of the server's own
# requirements (NeMo Gym's per-server venv, minus nemo-gym itself, which the runtime holds) in a
# staging prefix, and its code where a NeMo Gym checkout has it: /srv/gym/<server_type>/<name>/,
# with the other servers of the same search root it imports beside it.
ARG RUNTIME_IMAGE

FROM ${RUNTIME_IMAGE} AS requirements
ARG PIP_INSTALL_OPTIONS=""
USER root
COPY wheels/ /tmp/wheels/
COPY requirements.txt /tmp/requirements.txt
# The marker keeps the staging prefix from being empty: an empty COPY --from layer fails to
# export now and then on Docker 20.10 with fuse-overlayfs ("layer does not exist").
RUN mkdir -p /tmp/staging/share/gym-compose && echo "$(cat /tmp/requirements.txt)" > /tmp/staging/share/gym-compose/server-requirements.txt \
 && if grep -q '[^[:space:]]' /tmp/requirements.txt; then \
        pip freeze --exclude-editable > /tmp/runtime-constraints.txt \
        && pip install --no-cache-dir --disable-pip-version-check --quiet --ignore-requires-python \
            ${PIP_INSTALL_OPTIONS} --find-links /tmp/wheels --prefix /tmp/staging \
            -c /tmp/runtime-constraints.txt -r /tmp/requirements.txt; \
    fi

FROM ${RUNTIME_IMAGE}
ARG RUNTIME_IMAGE
ARG SERVER_DIR
LABEL io.gym-compose.image=server io.gym-compose.image.base=${RUNTIME_IMAGE} io.gym-compose.runtime=nemo_gym
ENV GYM_COMPOSE_SERVER_DIR=${SERVER_DIR}
COPY --from=requirements /tmp/staging/ /opt/venv/
COPY gym/ /srv/gym/
