# syntax=docker/dockerfile:1
# llm-latency-exporter image: docker build -t llm-latency-exporter:dev .
#
# Reproducible: the base is pinned to a patch release, every Python package (build
# backend included) is installed from deploy/docker/requirements.txt by hash, and the
# bytecode is compiled with content hashes instead of timestamps. Small: a slim base, no
# compiler, no pip cache, the venv copied alone into the final stage.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY deploy/docker/requirements.txt ./requirements.txt
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-compile --require-hashes --no-deps -r requirements.txt
COPY pyproject.toml README.md ./
COPY exporter ./exporter
# No build isolation: the backend (setuptools, wheel) already came from the hashed lock.
RUN /opt/venv/bin/pip install --no-compile --no-deps --no-build-isolation . \
 && /opt/venv/bin/python -m compileall -q --invalidation-mode unchecked-hash /opt/venv/lib

FROM ${PYTHON_IMAGE}
ARG VERSION=dev
LABEL org.opencontainers.image.title="llm-latency-exporter" \
      org.opencontainers.image.description="Prometheus exporter for LLM inference latency: engine queue vs compute, synthetic streaming probes, per-carrier network paths, GPU" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/llm-latency-exporter/llm-latency-exporter"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# ICMP path checks open a raw socket when the kernel offers no ping socket. A non-root
# process only gets CAP_NET_RAW from a file capability, so the interpreter carries exactly
# that one (effective + permitted). Written as the security.capability xattr (VFS cap v2)
# so that no libcap package has to be installed and removed again. The runtime must keep
# NET_RAW in the bounding set (Docker's default; docker-compose.yml adds it back after
# dropping ALL): exec refuses a file capability the bounding set lacks. The setuid and
# setgid bits of the base image go: a runtime that honours file capabilities (no
# no_new_privs) would otherwise also honour them.
RUN python -c 'import os, struct, sys; os.setxattr(os.path.realpath(sys.executable), "security.capability", struct.pack("<5I", 0x02000001, 1 << 13, 0, 0, 0))' \
 && find / -xdev -type f -perm /6000 -exec chmod a-s {} + \
 && groupadd --system --gid 10001 exporter \
 && useradd --system --uid 10001 --gid exporter --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin exporter
COPY --from=build /opt/venv /opt/venv
USER 10001:10001
EXPOSE 9400
# The listen port is the config's server.listen_address; 9400 is the default everywhere
# this image is deployed (compose, Kubernetes). Python, because the slim base has no curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9400/-/healthy', timeout=4).status == 200 else 1)"]
ENTRYPOINT ["llm-latency-exporter"]
# No config is baked in: mount one here (compose, Kubernetes and README show how).
CMD ["run", "--config", "/etc/llm-latency-exporter/config.yaml"]
