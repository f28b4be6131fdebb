# Multi-stage build of the ferry binary into a small non-root image.
#   docker build -t ferry .
# The Go version matches go.mod (compose_test.go checks it). The first build
# compiles the embedded Temporal server (`ferry dev`) and takes minutes; the
# module and build caches make later builds fast.

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
# The build cache lives in a cache mount, outside the image's layers.
ENV GOCACHE=/cache/go-build
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# No cgo: the embedded server's SQLite (modernc.org/sqlite) is pure Go, so
# the binary is static and runs on distroless/static.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ferry ./cmd/ferry

# distroless/static: CA certificates (for sslmode=verify-full, amqps and
# Temporal TLS), tzdata, /etc/passwd with nonroot (65532); no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ferry /ferry
USER nonroot:nonroot
ENTRYPOINT ["/ferry"]
CMD ["--help"]
