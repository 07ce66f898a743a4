# A server implementation with packages compiled from source (native-requirements.txt), e.g. a
# C extension PyPI ships only as an sdist for Linux. Three stages:
# 1. native: BUILDER_IMAGE (the offline debian-build image with g++/cmake/make and the Python
#    headers, or the public Python image, which gets the tools from apt) compiles each sdist in
#    native/sdists into a wheel, with native/native-build.env exported (CMAKE_ARGS ...) and
#    native/native-prepare.sh, when present, run in each unpacked source tree first; build
#    backends come from native/build-wheels. The C++ runtime it linked against is kept beside the
#    wheels.
# 2. requirements: requirements.txt plus the built wheels into a staging prefix (as in
#    server-requirements.sh); native/image_setup.py, when present, then runs with that
#    prefix importable and may add files to it or drop packages from it (e.g. assemble a model file).
# 3. the image: the base + the C++ runtime + the staging prefix + the server's files.
# Stage 1 depends only on the native inputs, so editing the server's files never recompiles.
ARG BASE_IMAGE
ARG BUILDER_IMAGE

FROM ${BUILDER_IMAGE} AS native
USER root
COPY native/ /tmp/native/
RUN set -e; \
    if ! command -v g++ >/dev/null || ! command -v cmake >/dev/null || ! command -v make >/dev/null; then \
        apt-get update -qq && apt-get install -y -qq --no-install-recommends g++ cmake make >/dev/null \
        && rm -rf /var/lib/apt/lists/*; \
    fi; \
    python3 -m venv /tmp/build-venv; \
    /tmp/build-venv/bin/pip install --no-cache-dir --disable-pip-version-check --quiet --no-index \
        --find-links /tmp/native/build-wheels -r /tmp/native/build-requirements.txt; \
    set -a; . /tmp/native/native-build.env; set +a; \
    export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"; \
    mkdir -p /tmp/src /tmp/native-wheels /tmp/native-libs; \
    for sdist in /tmp/native/sdists/*; do \
        tree="/tmp/src/$(basename "$sdist")"; mkdir -p "$tree"; tar -xzf "$sdist" -C "$tree" --strip-components=1; \
        if [ -f /tmp/native/native-prepare.sh ]; then (cd "$tree" && sh /tmp/native/native-prepare.sh); fi; \
        /tmp/build-venv/bin/pip wheel --no-cache-dir --disable-pip-version-check --quiet --no-deps \
            --no-build-isolation --no-index --wheel-dir /tmp/native-wheels "$tree"; \
    done; \
    cp "$(g++ -print-file-name=libstdc++.so.6)" /tmp/native-libs/; \
    rm -rf /tmp/src /tmp/build-venv

FROM ${BASE_IMAGE} AS requirements
ARG PIP_INSTALL_OPTIONS=""
USER root
COPY wheels/ /tmp/wheels/
COPY --from=native /tmp/native-wheels/ /tmp/native-wheels/
COPY requirements.txt image_setup/ /tmp/setup/
RUN pip freeze --exclude-editable > /tmp/base-constraints.txt \
 && pip install --no-cache-dir --disable-pip-version-check --quiet ${PIP_INSTALL_OPTIONS} \
        --find-links /tmp/wheels --find-links /tmp/native-wheels --prefix /tmp/staging \
        -c /tmp/base-constraints.txt -r /tmp/setup/requirements.txt /tmp/native-wheels/*.whl \
 && if [ -f /tmp/setup/image_setup.py ]; then \
        PYTHONPATH="$(python -c 'import sysconfig; print(sysconfig.get_path("purelib", vars={"base": "/tmp/staging"}))')" \
        python /tmp/setup/image_setup.py /tmp/staging; \
    fi

FROM ${BASE_IMAGE}
ARG BASE_IMAGE
LABEL io.gym-compose.image=server io.gym-compose.image.base=${BASE_IMAGE}
USER root
COPY --from=native /tmp/native-libs/ /usr/local/lib/
RUN ldconfig
USER 10001:10001
COPY --from=requirements /tmp/staging/ /opt/venv/
COPY server/ /srv/server/
