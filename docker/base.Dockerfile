# gym-compose base image: Python 3.11 in /opt/venv, the runtime requirements, the gym_compose
# runtime packages, and a non-root user. Built by gym_compose/engine/images.py, which fills the
# build arguments: PARENT_IMAGE is python:3.11-slim (or GYM_COMPOSE_BASE_IMAGE), or the offline
# Debian image; PIP_INSTALL_OPTIONS is --no-index when wheels/ holds every wheel (offline).
# Everything is prepared in the first stage and copied last, so that a change to the sources
# re-runs only the last few steps (the classic builder commits a container for every step).
ARG PARENT_IMAGE

FROM ${PARENT_IMAGE} AS venv
ARG PYTHON_VERSION
ARG PIP_INSTALL_OPTIONS=""
COPY wheels/ /tmp/wheels/
COPY runtime-requirements.txt /tmp/runtime-requirements.txt
RUN python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '${PYTHON_VERSION}' else 'the parent image has Python ' + v + ', gym-compose needs ${PYTHON_VERSION}')" \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --quiet ${PIP_INSTALL_OPTIONS} \
        --find-links /tmp/wheels -r /tmp/runtime-requirements.txt \
 && echo /opt/gym-compose > "$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gym_compose.pth"
COPY gym_compose/ /opt/gym-compose/gym_compose/
RUN /opt/venv/bin/python -m compileall -q /opt/gym-compose

FROM ${PARENT_IMAGE}
ARG PARENT_IMAGE
LABEL io.gym-compose.image=base io.gym-compose.image.parent=${PARENT_IMAGE}
RUN echo 'server:x:10001:10001:gym-compose server:/home/server:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'server:x:10001:' >> /etc/group \
 && mkdir -p /home/server /srv/server \
 && chown 10001:10001 /home/server /srv/server
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    VIRTUAL_ENV=/opt/venv \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LANG=C.UTF-8 \
    HOME=/home/server \
    GYM_COMPOSE_SERVER_DIR=/srv/server
USER 10001:10001
WORKDIR /srv/server
CMD ["python", "-m", "gym_compose.server"]
COPY --from=venv /opt/venv /opt/venv
COPY --from=venv /opt/gym-compose /opt/gym-compose
