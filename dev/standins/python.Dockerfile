# Stand-in for the official python:3.14 slim image (tagged as the gateway's Dockerfile base):
# Debian sid's python3.14 as `python`, with pip (from Debian's own wheel) installing into
# /usr/local like the official image, which has no "externally managed" marker. It trusts the
# certificates this host trusts (a TLS-inspecting proxy in front of the package registries).
ARG BASE
FROM ${BASE}
COPY --from=hostcerts ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt
RUN ln -sfn python3.14 /usr/bin/python \
 && rm -f /usr/lib/python3.14/EXTERNALLY-MANAGED \
 && wheel="$(ls /usr/share/python-wheels/pip-*.whl | head -n 1)" \
 && python "$wheel/pip" install --no-cache-dir --no-index "$wheel" \
 && python -m pip --version
