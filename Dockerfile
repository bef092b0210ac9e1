# Duplex: the loopback server (duplex-server) and the command-line client (duplex) in one image.
#
#   docker build -t duplex .
#   docker run --rm -p 8080:8080 duplex                      # duplex-server on port 8080
#   docker run --rm -it duplex duplex --help                 # the client
#
# docker-compose.yml runs the server and chat clients from this image.

# ---- build: a Swift 6 toolchain ----
FROM swift:6.3-noble AS build
RUN export DEBIAN_FRONTEND=noninteractive \
    && apt-get -q update \
    && apt-get -q install -y --no-install-recommends libssl-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /build
# Dependencies first, so that a change to the sources does not fetch them again.
COPY Package.swift ./
RUN mkdir -p Sources Server Client Tests && swift package resolve
COPY . .
# The Swift runtime is linked statically, so the runtime image needs no toolchain.
RUN swift build -c release --static-swift-stdlib --product duplex-server \
    && swift build -c release --static-swift-stdlib --product duplex \
    && mkdir /staging \
    && cp "$(swift build -c release --show-bin-path)/duplex-server" "$(swift build -c release --show-bin-path)/duplex" /staging/ \
    && cp -R "$(swift build -c release --show-bin-path)/duplex_DuplexServer.resources" /staging/ \
    && strip /staging/duplex-server /staging/duplex

# ---- runtime: a slim Ubuntu with the two binaries ----
FROM ubuntu:noble
RUN export DEBIAN_FRONTEND=noninteractive \
    && apt-get -q update \
    && apt-get -q install -y --no-install-recommends ca-certificates tzdata libstdc++6 zlib1g \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --user-group --create-home --system --home-dir /app duplex
COPY --from=build /staging/duplex-server /staging/duplex /usr/local/bin/
# The demo page at / is a package resource: it sits next to the binary.
COPY --from=build /staging/duplex_DuplexServer.resources /usr/local/bin/duplex_DuplexServer.resources
USER duplex:duplex
WORKDIR /app
EXPOSE 8080
# Listen on every interface: inside a container, loopback is unreachable from outside.
CMD ["duplex-server", "--host", "0.0.0.0", "--port", "8080"]
