# syntax=docker/dockerfile:1

# Build a static binary.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The version --version and GET /v1/info report (the build context has no .git to read it
# from): docker build --build-arg VERSION="$(git describe --always --dirty)" ...
ARG VERSION=devel
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.linkedVersion=${VERSION}" -o /out/coordinator ./cmd/coordinator \
 && mkdir -p /out/data

# Run it as a non-root user on a minimal base.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/coordinator /usr/local/bin/coordinator
# The embedded store's data directory, owned by the nonroot user (65532). Mount a volume
# here to keep its data; with --database-url it is not used.
COPY --from=build --chown=65532:65532 /out/data /var/lib/coordinator
# It listens on every address of the container, so it starts only with authentication on:
# give the admin token from a mounted file (COORDINATOR_ADMIN_TOKEN_FILE=/run/secrets/...)
# or in COORDINATOR_ADMIN_TOKEN (or, for a throwaway local try, COORDINATOR_INSECURE_NO_AUTH=true).
# GODEBUG=adaptivestackstart=0: goroutines start with Go's smallest stack (2 KiB) rather
# than the average in use at the last collection, which with thousands of connections
# under a memory limit leaves the heap more room (README, "HTTP/2").
ENV COORDINATOR_LISTEN=:8080 \
    COORDINATOR_DATA_DIR=/var/lib/coordinator \
    GODEBUG=adaptivestackstart=0
USER nonroot:nonroot
EXPOSE 8080
# GET /readyz on the port of COORDINATOR_LISTEN, within 5 s (there is no shell or curl here).
HEALTHCHECK CMD ["/usr/local/bin/coordinator", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/coordinator"]
