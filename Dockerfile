# Multi-stage build of the production ferry binary into a small non-root image.
#   docker build --build-arg FERRY_COMMIT=$(git rev-parse HEAD) -t ferry .
# The Go version matches go.mod (compose_test.go checks it). The binary is
# the command module cmd/ferry, which links no embedded Temporal server
# (`ferry dev` is in ferry-dev, module dev, which the image does not build).

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
# The build cache lives in a cache mount, outside the image's layers.
ENV GOCACHE=/cache/go-build
# cmd/ferry's go.mod replaces the library with the repository root.
COPY go.mod go.sum ./
COPY cmd/ferry/go.mod cmd/ferry/go.sum ./cmd/ferry/
RUN --mount=type=cache,target=/go/pkg/mod cd cmd/ferry && go mod download
COPY . .
# What `ferry version` prints as the commit and the version: the build
# context has no .git (.dockerignore), so the build has no VCS stamp.
ARG FERRY_COMMIT=
ARG FERRY_VERSION=
# No cgo: the binary is static and runs on an image without a libc.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/cache/go-build \
    cd cmd/ferry && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/ferry-outbox/ferry/cmd/ferry/cli.commit=${FERRY_COMMIT} -X github.com/ferry-outbox/ferry/cmd/ferry/cli.version=${FERRY_VERSION}" -o /out/ferry .
# The image's whole content: the binary, CA certificates and time zones from
# this stage's Debian packages, and the non-root user nonroot (65532).
RUN deploy/image/rootfs.sh /out/ferry /out/rootfs

# The final stage, exactly as dev/e2e/image_test.go builds it with buildah
# (TestDockerfile checks the text): no shell, no package manager.
FROM scratch
COPY --from=build /out/rootfs/ /
USER 65532:65532
ENTRYPOINT ["/ferry"]
CMD ["--help"]
