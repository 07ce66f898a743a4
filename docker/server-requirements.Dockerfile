# A server implementation with a requirements.txt: its packages are installed into a staging
# prefix in a throw-away stage, so the image gains only those packages and the server's files.
# The base's own packages are pinned (constraints), so a server cannot replace the runtime's;
# pip, setuptools and wheel are not (plain `pip freeze` leaves them out): a server may ask for a
# newer setuptools (grl_sokoban: setuptools>=70) without making its requirements unsatisfiable.
ARG BASE_IMAGE

FROM ${BASE_IMAGE} AS requirements
ARG PIP_INSTALL_OPTIONS=""
USER root
COPY wheels/ /tmp/wheels/
COPY requirements.txt /tmp/requirements.txt
RUN pip freeze --exclude-editable > /tmp/base-constraints.txt \
 && pip install --no-cache-dir --disable-pip-version-check --quiet ${PIP_INSTALL_OPTIONS} \
        --find-links /tmp/wheels --prefix /tmp/staging \
        -c /tmp/base-constraints.txt -r /tmp/requirements.txt \
 && mkdir -p /tmp/staging/share/gym-compose \
 && cp /tmp/requirements.txt /tmp/staging/share/gym-compose/server-requirements.txt
# The marker keeps the staging prefix from being empty (every requirement already in the base):
# an empty COPY --from layer fails to export now and then on Docker 20.10 with fuse-overlayfs
# ("layer does not exist"), as gui_coordinate's build did.

FROM ${BASE_IMAGE}
ARG BASE_IMAGE
LABEL io.gym-compose.image=server io.gym-compose.image.base=${BASE_IMAGE}
COPY --from=requirements /tmp/staging/ /opt/venv/
COPY server/ /srv/server/
