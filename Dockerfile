# The podres-exporter image: one image for `podres export`, `plugin`, `top` and `snapshot`.
#
#   make image            # tags ghcr.io/podres-exporter/podres-exporter:<version from pyproject.toml>
#
# Both stages are the same Debian release, so the virtualenv built in the first one finds its
# interpreter (/usr/bin/python3, Python 3.11) at the same path in the second one.

# ---- build: a virtualenv at /opt/podres with the package and its runtime dependencies ----
FROM debian:bookworm-slim AS build

# Not pinned: the base image's release is the pin; Debian replaces a stable package only with
# security and point-release fixes, and drops the superseded version from its mirrors, so an
# exact version pin would break the build at the next point release.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*

# The package version, passed by `make image` from pyproject.toml; it becomes the image's
# version label, and must be the version of what is installed.
ARG VERSION
RUN test -n "${VERSION}" \
 || { echo "error: build with --build-arg VERSION=<version in pyproject.toml> (make image does)" >&2; exit 1; }

WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY src ./src

# Runtime dependencies only, at the floors pyproject.toml sets. The bytecode is compiled once
# here, with hashes rather than timestamps so that it stays valid whatever mtimes the copy into
# the final stage gives the sources: at run time the root filesystem may be read-only.
# pip and setuptools then leave the virtualenv: nothing installs anything at run time.
# On a network that intercepts TLS, give pip its CA bundle as the build secret `pip-ca`
# (`--secret id=pip-ca,src=FILE`); it is mounted for this step only and never stored in a layer.
RUN --mount=type=secret,id=pip-ca \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
 && python3 -m venv /opt/podres \
 && /opt/podres/bin/pip install --no-cache-dir --no-compile --disable-pip-version-check . \
 && /opt/podres/bin/python -c 'import sys; from importlib.metadata import version; v = version("podres-exporter"); sys.exit(None if v == sys.argv[1] else f"error: --build-arg VERSION={sys.argv[1]} but the package is {v}")' "${VERSION}" \
 && /opt/podres/bin/pip uninstall -y --disable-pip-version-check pip setuptools \
 && /opt/podres/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/podres/lib

# ---- the image: Debian's python3, CA certificates (top over https) and the virtualenv ----
FROM debian:bookworm-slim

# Not pinned, for the reason given in the build stage.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 ca-certificates \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*

COPY --from=build /opt/podres /opt/podres

ARG VERSION
# The git commit built (make image passes it): podres_build_info{revision} reads it at run time.
ARG PODRES_REVISION=unknown
LABEL org.opencontainers.image.title="podres-exporter" \
      org.opencontainers.image.description="Kubernetes node agent: which container holds which CPUs, devices and memory, as Prometheus metrics" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/podres-exporter/podres-exporter"

ENV PATH=/opt/podres/bin:$PATH \
    PODRES_REVISION=${PODRES_REVISION} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# The user stays root, on purpose: `podres export` and `podres snapshot` read the kubelet's
# pod-resources socket, which is root's in a 0750 directory, and `podres plugin` creates its
# sockets in the kubelet's device-plugin directory, which is root's too. `podres top
# --prometheus URL` and `podres top --exporter URL` only make HTTP requests and run as any
# uid, e.g. `--user 65534`.

EXPOSE 9842 9843
# A daemon command (export, plugin, demo) ignores SIGHUP from the container's first
# instruction: the shell sets it and execs podres, which inherits it (an ignored signal stays
# ignored across exec) through the interpreter's own start, until the daemon serves and
# takes SIGHUP as a reload. `podres snapshot` and `podres top` keep the default.
ENTRYPOINT ["/bin/sh", "-c", "case \"$1\" in export|plugin|demo) trap '' HUP;; esac; exec podres \"$@\"", "podres"]
CMD ["export"]
