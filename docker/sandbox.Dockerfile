# gym-compose's default sandbox image: the base image (Python and a Debian userland, buildable with
# no registry) with an unprivileged `sandbox` user that owns the work folder /work. Built by
# gym_compose/engine/sandbox_images.py; a server's own sandbox image (`sandbox_config.build`) can
# start FROM it: its Dockerfile gets the build argument SANDBOX_IMAGE.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG BASE_IMAGE
LABEL io.gym-compose.image=sandbox io.gym-compose.image.base=${BASE_IMAGE}
USER root
RUN echo 'sandbox:x:10002:10002:gym-compose sandbox:/work:/bin/sh' >> /etc/passwd \
 && echo 'sandbox:x:10002:' >> /etc/group \
 && mkdir -p /work \
 && chown 10002:10002 /work
ENV HOME=/work
USER 10002:10002
WORKDIR /work
CMD ["/bin/sh"]
