# The caching proxy's image (docker-compose.yml's proxy service): Debian's nginx and envsubst,
# with the project's configuration template (deploy/nginx.conf.template), run as an
# unprivileged user. The service's command renders the template from its environment and runs
# nginx (docs/deploying.md, "The caching proxy").
#
# BASE: as the service's Dockerfile, a Debian bookworm (`make image-test` imports one).
ARG BASE=debian:bookworm-20250113-slim
FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends nginx gettext-base \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 1000 --home-dir /var/cache/dandizarr proxy \
    && mkdir -p /var/cache/dandizarr /etc/dandizarr \
    && chown proxy /var/cache/dandizarr
COPY deploy/nginx.conf.template /etc/dandizarr/nginx.conf.template
USER proxy
EXPOSE 8080
