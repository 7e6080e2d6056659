# syntax=docker/dockerfile:1
# The uexec network service image: a statically linked uexec (musl) on a small Debian userland that the commands
# it runs need (a shell, coreutils, git, python3). Builds from the repository alone:
#
#   docker build -t uexec .
#   docker run --rm -p 8080:8080 -v "$PWD/token:/run/uexec/token:ro" \
#     --cap-add SYS_ADMIN --security-opt apparmor=unconfined --userns=... uexec
#
# Kubernetes: deploy/kubernetes (and docs/deploy.md for what the sandbox needs from the node).
#
# BINARY=prebuilt takes a binary already built on the host (`cargo build --release --locked --target
# x86_64-unknown-linux-musl -p uexec`) instead of building one in the `build` stage.

ARG RUST_IMAGE=docker.io/library/rust:1.95-slim-bookworm
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim
ARG BINARY=build

# --- build: a static binary, independent of the runtime image's libc --------------------------------------------
FROM ${RUST_IMAGE} AS build
RUN rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN CARGO_PROFILE_RELEASE_STRIP=symbols cargo build --release --locked --target x86_64-unknown-linux-musl -p uexec \
    && install -D -m 0755 target/x86_64-unknown-linux-musl/release/uexec /out/uexec

# --- prebuilt: the same binary from the host's target directory -------------------------------------------------
FROM scratch AS prebuilt
COPY target/x86_64-unknown-linux-musl/release/uexec /out/uexec

FROM ${BINARY} AS binary

# --- runtime --------------------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS runtime
# What commands run with: the login shell and the usual tools of a coding agent. Replace this list (or the base
# image) with the toolchain your agents need; uexec itself needs nothing from it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bash ca-certificates coreutils git procps python3 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=binary /out/uexec /usr/local/bin/uexec
# The workspace and /tmp are the sandbox's writable roots; mount volumes there when the root filesystem is
# read-only (deploy/kubernetes/deployment.yaml does).
RUN mkdir -p /workspace
WORKDIR /workspace
ENV HOME=/workspace SHELL=/bin/bash
EXPOSE 8080
STOPSIGNAL SIGTERM
# Without a token (UEXEC_AUTH_TOKEN_FILE or --auth-token-file) uexec refuses to listen on 0.0.0.0: mount one.
ENV UEXEC_AUTH_TOKEN_FILE=/run/uexec/token
ENTRYPOINT ["/usr/local/bin/uexec"]
CMD ["mcp", "--listen", "0.0.0.0:8080", "--cd", "/workspace", "--log-format", "json"]
