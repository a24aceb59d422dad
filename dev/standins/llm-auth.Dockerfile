# Stand-in for nginx:1.30.5-alpine: Debian sid's nginx with njs, the module where the official
# image keeps it (/etc/nginx/modules), a user "nginx", busybox-like wget for the healthcheck,
# and an entrypoint that renders /etc/nginx/templates/*.template the way the official one does.
ARG BASE
FROM ${BASE}
RUN apt-get -q -o Acquire::Check-Valid-Until=false update \
 && apt-get install -y -q --no-install-recommends nginx libnginx-mod-http-js gettext-base \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --no-create-home --shell /usr/sbin/nologin nginx \
 && ln -sfn /usr/lib/nginx/modules /etc/nginx/modules \
 && mkdir -p /etc/nginx/conf.d
COPY nginx-entrypoint.sh /docker-entrypoint.sh
ENTRYPOINT ["/docker-entrypoint.sh"]
CMD ["nginx", "-g", "daemon off;"]
STOPSIGNAL SIGQUIT
