"""The real llm-auth nginx proxy (Debian nginx + njs) on loopback, from compose's own template.

The template is rendered the way the official nginx image's 20-envsubst-on-templates.sh does it:
only variables that are defined (and pass NGINX_ENVSUBST_FILTER, ``^LLM_`` in compose) are
replaced, so nginx's own ``$variables`` survive. Only the main context differs from the
container: pid, logs and temp paths point into a private prefix.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .paths import REPO
from .procs import Service, free_port

NGINX = Path("/usr/sbin/nginx")
NJS_MODULE = Path("/usr/lib/nginx/modules/ngx_http_js_module.so")
COMPOSE_NGINX = REPO / "compose" / "nginx"
TEMPLATE = COMPOSE_NGINX / "templates" / "llm-auth.conf.template"
NJS_DIR = COMPOSE_NGINX / "njs"
ENVSUBST_FILTER = re.compile(r"^LLM_")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_SLOT_ROUTING_LINE = re.compile(r"^\s*proxy_set_body \$vs_routed_body;\n", re.MULTILINE)

_MAIN_CONF = """\
load_module {module};
daemon off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {error_log} warn;
events {{ worker_connections 256; }}
http {{
    client_body_temp_path {prefix}/tmp/client_body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    tcp_nodelay on;
    include {prefix}/conf.d/llm-auth.conf;
}}
"""


def envsubst(text: str, env: Mapping[str, str]) -> str:
    """envsubst with a SHELL-FORMAT of the defined names: other ``$names`` are left alone."""
    names = {name for name in env if ENVSUBST_FILTER.search(name)}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return env[name] if name in names else match.group(0)

    return _REFERENCE.sub(replace, text)


def proxy_env(
    *,
    upstream_url: str,
    proxy_key: str,
    upstream_key: str,
    port: int,
    total_slots: int,
    reserved_slots: Iterable[int],
    access_log: Path,
    error_log: Path,
) -> dict[str, str]:
    """The LLM_* variables compose gives the container, with loopback values."""
    return {
        "LLM_PROXY_LISTEN": f"127.0.0.1:{port}",
        "LLM_UPSTREAM": upstream_url,
        "LLM_PROXY_RESOLVER": "127.0.0.1",  # unused: the upstream is an IP literal
        "LLM_PROXY_KEY": proxy_key,
        "LLM_API_KEY": upstream_key,
        "LLM_PARALLEL": str(total_slots),
        "LLM_RESERVED_SLOTS": ",".join(str(slot) for slot in reserved_slots),
        "LLM_PROXY_READ_TIMEOUT": "3600s",
        "LLM_PROXY_MAX_BODY": "32m",
        "LLM_PROXY_ACCESS_LOG": str(access_log),
        "LLM_PROXY_ERROR_LOG": str(error_log),
    }


def render_prefix(
    prefix: Path, env: Mapping[str, str], error_log: Path, *, slot_routing: bool = True
) -> Path:
    """Write nginx.conf, conf.d/llm-auth.conf and njs/ under prefix; return the nginx.conf."""
    conf = envsubst(TEMPLATE.read_text(), env)
    if not slot_routing:  # benchmark baseline only: plain proxying, no body rewrite
        conf = _SLOT_ROUTING_LINE.sub("", conf)
    (prefix / "conf.d").mkdir(parents=True, exist_ok=True)
    (prefix / "tmp").mkdir(exist_ok=True)
    (prefix / "conf.d" / "llm-auth.conf").write_text(conf)
    shutil.copytree(NJS_DIR, prefix / "njs", dirs_exist_ok=True)
    main = prefix / "nginx.conf"
    main.write_text(_MAIN_CONF.format(module=NJS_MODULE, prefix=prefix, error_log=error_log))
    return main


@dataclass
class NginxProxy(Service):
    """A Service that also remembers the client key, the slot layout and its log files."""

    proxy_key: str = ""
    total_slots: int = 4
    reserved_slots: tuple[int, ...] = (0,)
    access_log: Path = field(default_factory=Path)
    error_log: Path = field(default_factory=Path)
    conf_dir: Path = field(default_factory=Path)

    @property
    def headers(self) -> dict[str, str]:
        """What a client sends: the proxy's key, never llama-server's."""
        return {"Authorization": f"Bearer {self.proxy_key}"}


def start_proxy(
    upstream_url: str,
    proxy_key: str,
    upstream_key: str,
    *,
    total_slots: int = 4,
    reserved_slots: Iterable[int] = (0,),
    log_dir: Path | None = None,
    port: int | None = None,
    slot_routing: bool = True,
) -> NginxProxy:
    """Run the proxy on 127.0.0.1 in front of upstream_url; ready when /proxy/status answers.

    Config, access log and error log live in a fresh ``<log_dir>/nginx-<port>-*/`` folder
    (``access_log``, ``error_log``, ``conf_dir`` on the result).
    """
    port = port or free_port()
    reserved = tuple(reserved_slots)
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="nginx-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    prefix = Path(tempfile.mkdtemp(prefix=f"nginx-{port}-", dir=log_dir))
    env = proxy_env(
        upstream_url=upstream_url,
        proxy_key=proxy_key,
        upstream_key=upstream_key,
        port=port,
        total_slots=total_slots,
        reserved_slots=reserved,
        access_log=prefix / "access.log",
        error_log=prefix / "error.log",
    )
    main = render_prefix(prefix, env, prefix / "main-error.log", slot_routing=slot_routing)
    service = NginxProxy(
        name="nginx llm-auth",
        argv=[
            str(NGINX),
            "-p",
            f"{prefix}/",
            "-c",
            str(main),
            "-e",
            str(prefix / "main-error.log"),
        ],
        port=port,
        log_path=prefix / "stderr.log",
        health_path="/proxy/status",
        startup_timeout=15.0,
        proxy_key=proxy_key,
        total_slots=total_slots,
        reserved_slots=reserved,
        access_log=prefix / "access.log",
        error_log=prefix / "error.log",
        conf_dir=prefix,
    )
    return service.start()
