# A SWE task image: Debian's git, Python and pytest (the offline `debian-swe` parent) and one task's
# repository at /app at its base commit, history of one commit (made on the host by
# gym_compose/engine/images/task_repo.py). Built and content-hashed by gym_compose/engine/images/task_images.py.
ARG SWE_BASE
FROM ${SWE_BASE}
COPY app /app
WORKDIR /app
LABEL io.gym-compose.image=swe-task
CMD ["/bin/bash"]
