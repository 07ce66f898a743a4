# A server on the NeMo Gym runtime whose requirements add nothing to it (most of NeMo Gym's agents
# and many servers list only nemo-gym): the runtime and the server's code, with no requirements
# stage. On Docker 20.10's classic builder every instruction commits a layer over the ~1.5 GB
# runtime, which took 50-60 s a step on the shared machine; this file has four steps where
# nemo-gym-server.Dockerfile has twelve.
ARG RUNTIME_IMAGE
FROM ${RUNTIME_IMAGE}
ARG SERVER_DIR
ENV GYM_COMPOSE_SERVER_DIR=${SERVER_DIR}
LABEL io.gym-compose.image=server io.gym-compose.runtime=nemo_gym
# the server's user owns its code: NeMo Gym servers write into their own folder (swebench_pro's logs/)
COPY --chown=10001:10001 gym/ /srv/gym/
