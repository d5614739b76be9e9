# syntax=docker/dockerfile:1
# Cicada's container image: a static binary on distroless, run as non-root.
#
#   docker build --build-arg VERSION="$(git describe --tags --always --dirty)" -t cicada .
#   (or: make image)
#
# No HEALTHCHECK: orchestrators probe /healthz and /readyz on the admin port.

# go.mod's go line: the golang image sets GOTOOLCHAIN=local, so an older
# patch release would refuse the module.
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
# Printed by `cicada --version`; .git is not in the build context, so the
# version comes from outside (make image passes git describe).
ARG VERSION=dev
# The module and build caches persist between builds; go build downloads
# only the modules the binary needs (not the test-only ones).
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/cicada ./cmd/cicada

# distroless/static: CA certificates, tzdata and /etc/passwd, no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/cicada /usr/local/bin/cicada
# 65532 is distroless's nonroot user.
USER 65532:65532
# RESP (--listen) and admin HTTP (--admin: /metrics, /healthz, /readyz).
EXPOSE 6380 9121
ENTRYPOINT ["/usr/local/bin/cicada"]
