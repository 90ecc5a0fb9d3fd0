# The gate's image: a static binary on distroless, run as a non-root user,
# with the default rules folder. Build: docker build -t antifatigue/gate .
#
# There is no HEALTHCHECK: the orchestrator probes the gate over HTTP,
# /healthz for liveness and /readyz for readiness (see docs/operating.md).

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO off: a static binary the distroless static image can run (the embedded
# SQLite is pure Go). -trimpath keeps build paths out of the binary.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/gate ./cmd/gate && mkdir /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gate /gate
COPY rules /rules
# /data belongs to the non-root user, so a fresh named volume mounted on it
# (which takes the ownership of the image's directory) is writable.
COPY --from=build --chown=65532:65532 /out/data /data
# Listen on every interface inside the container: the container's network is
# its boundary, and docker-compose.yml publishes the port on 127.0.0.1 only.
# /metrics, /healthz and /readyz answer without a token; set GATE_API_TOKEN
# for /v1/*. Without it a gate on 0.0.0.0 refuses to start unless
# GATE_HTTP_ALLOW_NO_TOKEN=true is passed: the image does not open the API
# by itself, so `docker run -p 0.0.0.0:8080:8080` without a token fails
# loudly instead of serving every host. docker-compose.yml and
# deploy/kubernetes set a token.
ENV GATE_HTTP_ADDR=0.0.0.0:8080 \
    GATE_RULES=/rules \
    GATE_DATA_DIR=/data
# The embedded default (GATE_NATS_URL etc. unset) keeps its state here; mount
# a volume on it. distroless's nonroot user is uid 65532.
VOLUME ["/data"]
EXPOSE 8080
USER nonroot:nonroot
ENTRYPOINT ["/gate", "serve"]
