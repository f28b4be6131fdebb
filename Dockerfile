# Multi-stage build of the production ferry binary into a small non-root image.
#   docker build -t ferry .
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
# No cgo: the binary is static and runs on distroless/static.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/cache/go-build \
    cd cmd/ferry && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ferry .

# distroless/static: CA certificates (for sslmode=verify-full, amqps and
# Temporal TLS), tzdata, /etc/passwd with nonroot (65532); no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ferry /ferry
USER nonroot:nonroot
ENTRYPOINT ["/ferry"]
CMD ["--help"]
