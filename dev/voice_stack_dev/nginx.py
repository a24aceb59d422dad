"""The real llm-auth nginx proxy (nginx + njs) on loopback, from compose's own template.

The template is rendered the way the official nginx image's 20-envsubst-on-templates.sh does it:
only variables that are defined (and pass NGINX_ENVSUBST_FILTER, ``^LLM_`` in compose) are
replaced, so nginx's own ``$variables`` survive. Only the main context differs from the
container: pid, logs and temp paths point into a private prefix.

Three builds can run it: Debian bookworm's nginx 1.22 + njs 0.7.9 (scripts/setup installs it
on the host) and Debian sid's nginx + njs 1.x (scripts/provision-nginx-sid) with either of its
engines, njs or QuickJS, so an engine change fails a test here rather than on a user's host.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .paths import CACHE, REPO
from .procs import Service, ServiceError, free_port

COMPOSE_NGINX = REPO / "compose" / "nginx"
TEMPLATE = COMPOSE_NGINX / "templates" / "llm-auth.conf.template"
NJS_DIR = COMPOSE_NGINX / "njs"
ENVSUBST_FILTER = re.compile(r"^LLM_")
# The agent key start_proxy configures unless told otherwise (tests send it as agent_headers).
TEST_AGENT_KEY = "test-agent-key_0123456789"
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_HANDLER_LINE = re.compile(r"^(\s*)js_content llm_auth\.handle;\n", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class NginxBuild:
    """One nginx binary with its njs module, and the JavaScript engine it is told to use."""

    name: str
    binary: Path
    module: Path
    engine: str | None  # the js_engine directive (None: njs 0.7 has only its own engine)

    def check(self) -> None:
        for path in (self.binary, self.module):
            if not path.exists():
                raise FileNotFoundError(
                    f"nginx build {self.name}: {path} missing; run scripts/setup"
                )


_SID_MODULE = CACHE / "nginx-sid" / "root" / "usr" / "lib" / "nginx" / "modules"
BOOKWORM = NginxBuild(
    "bookworm-njs0.7",
    Path("/usr/sbin/nginx"),
    Path("/usr/lib/nginx/modules/ngx_http_js_module.so"),
    None,
)
SID_NJS = NginxBuild(
    "sid-njs1", CACHE / "bin" / "nginx-sid", _SID_MODULE / "ngx_http_js_module.so", "njs"
)
SID_QJS = NginxBuild(
    "sid-quickjs", CACHE / "bin" / "nginx-sid", _SID_MODULE / "ngx_http_js_module.so", "qjs"
)
BUILDS = (BOOKWORM, SID_NJS, SID_QJS)

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
{engine}    include {prefix}/conf.d/llm-auth.conf;
}}
"""


def envsubst(text: str, env: Mapping[str, str]) -> str:
    """envsubst with a SHELL-FORMAT of the defined names: other ``$names`` are left alone."""
    names = {name for name in env if ENVSUBST_FILTER.search(name)}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return env[name] if name in names else match.group(0)

    return _REFERENCE.sub(replace, text)


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """What start_proxy configures besides the upstream: keys, slots, opt-ins, timeouts."""

    proxy_key: str
    upstream_key: str
    agent_key: str = TEST_AGENT_KEY
    total_slots: int = 4
    reserved_slots: tuple[int, ...] = (0,)
    allow_unpinned: str = ""
    allow_control: str = ""
    client_timeout: str = "15s"


def proxy_env(
    settings: ProxySettings, *, upstream_url: str, port: int, prefix: Path
) -> dict[str, str]:
    """The LLM_* variables compose gives the container, with loopback values."""
    return {
        "LLM_PROXY_LISTEN": f"127.0.0.1:{port}",
        "LLM_UPSTREAM": upstream_url,
        "LLM_PROXY_RESOLVER": "127.0.0.1",  # unused: the upstream is an IP literal
        "LLM_PROXY_KEY": settings.proxy_key,
        "LLM_AGENT_KEY": settings.agent_key,
        "LLM_API_KEY": settings.upstream_key,
        "LLM_PARALLEL": str(settings.total_slots),
        "LLM_RESERVED_SLOTS": ",".join(str(slot) for slot in settings.reserved_slots),
        "LLM_PROXY_ALLOW_UNPINNED": settings.allow_unpinned,
        "LLM_PROXY_ALLOW_CONTROL": settings.allow_control,
        "LLM_PROXY_CLIENT_TIMEOUT": settings.client_timeout,
        "LLM_PROXY_READ_TIMEOUT": "3600s",
        "LLM_PROXY_MAX_BODY": "32m",
        "LLM_PROXY_ACCESS_LOG": str(prefix / "access.log"),
        "LLM_PROXY_ERROR_LOG": str(prefix / "error.log"),
    }


def render_prefix(
    prefix: Path,
    env: Mapping[str, str],
    error_log: Path,
    *,
    build: NginxBuild = BOOKWORM,
    slot_routing: bool = True,
) -> Path:
    """Write nginx.conf, conf.d/llm-auth.conf and njs/ under prefix; return the nginx.conf."""
    conf = envsubst(TEMPLATE.read_text(), env)
    if not slot_routing:  # benchmark baseline only: the bearer check, then plain proxying
        conf = _HANDLER_LINE.sub(r"\1proxy_pass $vs_upstream;\n", conf)
    (prefix / "conf.d").mkdir(parents=True, exist_ok=True)
    (prefix / "tmp").mkdir(exist_ok=True)
    (prefix / "conf.d" / "llm-auth.conf").write_text(conf)
    shutil.copytree(NJS_DIR, prefix / "njs", dirs_exist_ok=True)
    main = prefix / "nginx.conf"
    engine = f"    js_engine {build.engine};\n" if build.engine else ""
    main.write_text(
        _MAIN_CONF.format(module=build.module, prefix=prefix, error_log=error_log, engine=engine)
    )
    return main


@dataclass
class NginxProxy(Service):
    """A Service that also remembers the client keys, the slot layout and its log files."""

    proxy_key: str = ""
    agent_key: str = TEST_AGENT_KEY
    total_slots: int = 4
    reserved_slots: tuple[int, ...] = (0,)
    build: NginxBuild = BOOKWORM
    access_log: Path = field(default_factory=Path)
    error_log: Path = field(default_factory=Path)
    conf_dir: Path = field(default_factory=Path)

    @property
    def headers(self) -> dict[str, str]:
        """What a general client sends: the general key, never llama-server's."""
        return {"Authorization": f"Bearer {self.proxy_key}"}

    @property
    def agent_headers(self) -> dict[str, str]:
        """What Voice Stack's agents send: the agent key (the reserved slots are theirs)."""
        return {"Authorization": f"Bearer {self.agent_key}"}

    def reload_with_key(self, proxy_key: str, timeout: float = 15.0) -> None:
        """A new general key, as an operator rotates it: the rendered config rewritten, then
        nginx's own reload (SIGHUP: new workers, the old ones finish their requests). Returns
        once the new key is accepted; ServiceError after `timeout` s."""
        conf = self.conf_dir / "conf.d" / "llm-auth.conf"
        text = conf.read_text()
        if self.proc is None or not self.proxy_key or self.proxy_key not in text:
            raise ServiceError(f"{self.name}: not running, or its general key is not in {conf}")
        conf.write_text(text.replace(self.proxy_key, proxy_key))
        os.kill(self.proc.pid, signal.SIGHUP)
        self.proxy_key = proxy_key
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _status(f"{self.url}/v1/models", self.headers) == 200:
                return
            time.sleep(0.1)
        raise ServiceError(f"{self.name}: the new key not accepted after {timeout:.0f} s")


def _status(url: str, headers: Mapping[str, str]) -> int | None:
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=2.0) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return None


def start_proxy(
    upstream_url: str,
    proxy_key: str,
    upstream_key: str,
    *,
    agent_key: str = TEST_AGENT_KEY,
    total_slots: int = 4,
    reserved_slots: Iterable[int] = (0,),
    log_dir: Path | None = None,
    port: int | None = None,
    slot_routing: bool = True,
    build: NginxBuild = BOOKWORM,
    allow_unpinned: str = "",
    allow_control: str = "",
    client_timeout: str = "15s",
) -> NginxProxy:
    """Run the proxy on 127.0.0.1 in front of upstream_url; ready when /proxy/status answers.

    Config, access log and error log live in a fresh ``<log_dir>/nginx-<port>-*/`` folder
    (``access_log``, ``error_log``, ``conf_dir`` on the result). ``agent_key=""`` runs it
    with no agent key (the reserved slots are then nobody's).
    """
    build.check()
    settings = ProxySettings(
        proxy_key, upstream_key, agent_key, total_slots, tuple(reserved_slots),
        allow_unpinned, allow_control, client_timeout,
    )  # fmt: skip
    port = port or free_port()
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="nginx-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    prefix = Path(tempfile.mkdtemp(prefix=f"nginx-{port}-", dir=log_dir))
    env = proxy_env(settings, upstream_url=upstream_url, port=port, prefix=prefix)
    main_log = prefix / "main-error.log"
    main = render_prefix(prefix, env, main_log, build=build, slot_routing=slot_routing)
    service = NginxProxy(
        name=f"nginx llm-auth ({build.name})",
        argv=[str(build.binary), "-p", f"{prefix}/", "-c", str(main), "-e", str(main_log)],
        port=port,
        log_path=prefix / "stderr.log",
        health_path="/proxy/status",
        startup_timeout=15.0,
        proxy_key=proxy_key,
        agent_key=agent_key,
        total_slots=total_slots,
        reserved_slots=settings.reserved_slots,
        build=build,
        access_log=prefix / "access.log",
        error_log=prefix / "error.log",
        conf_dir=prefix,
    )
    return service.start()
