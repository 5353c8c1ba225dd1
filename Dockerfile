# The adevents server, built from source. `docker compose up` uses it with ScyllaDB.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
# The manifest names the benches as targets: cargo reads them even to build the binary.
COPY src ./src
COPY benches ./benches
COPY migrations ./migrations
RUN cargo build --release --locked --bin adevents

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 adevents \
    && install -d -o adevents -g adevents /var/lib/adevents
COPY --from=build /src/target/release/adevents /usr/local/bin/adevents
USER adevents
# The embedded store's folder, when the container runs without Cassandra.
VOLUME /var/lib/adevents
ENV ADEVENTS_LISTEN=0.0.0.0:8080 \
    ADEVENTS_DATA_DIR=/var/lib/adevents \
    ADEVENTS_LOG_FORMAT=json
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["adevents"]
CMD ["serve"]
