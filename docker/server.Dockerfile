# A server implementation with no requirements of its own: only its files on top of the base.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG BASE_IMAGE
LABEL io.gym-compose.image=server io.gym-compose.image.base=${BASE_IMAGE}
COPY server/ /srv/server/
