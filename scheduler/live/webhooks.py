"""Webhooks on job state changes: which events count, what is sent, how it is signed, where it may go and how one
request is made. The dispatcher that queues and retries deliveries is `scheduler.live.webhook_dispatch`; the API is
`web/api/webhooks.py`; docs/webhooks.md is the user's side of all of it.

**Where a request may go (SSRF).** The server makes requests to URLs its users give, from inside the cluster's
network, so nothing is sent unless an admin allows destinations (`corral serve --webhook-allow`), by host and port:
IP addresses and CIDR blocks (`10.0.0.0/8`, `127.0.0.1`), host names (`hooks.example.com`) and domains
(`.example.com`: the name and every name under it), each with a port or a range (`10.0.0.5:8443`,
`10.0.0.0/8:8000-8999`); an entry without one allows 80 and 443 only, so allowing a host never opens every service on
it. The ports of the server's own API, its database and Ray (`AllowList.forbidding`, from `corral serve`) are refused
on every host, whatever the entries say, as is port 0. A URL is checked when it is given (the API's 422) and again
before every request: its host is resolved, every address must be allowed, and the request connects to an address so
checked (never resolving the name a second time, so a DNS answer that changes in between cannot point it elsewhere).
An address is allowed when an IP or CIDR entry covers it (and its port), or when the URL's host name and port matched
a name entry and the address is not link-local (cloud metadata services live there), unspecified or multicast: those
only an address entry allows. Only http and https, no credentials in the URL, no proxy, and redirects are never
followed (a 3xx is a failed attempt).

**What an attempt reports** is the answer's status line (`HTTP 401 Unauthorized`, with the standard phrase) or the
kind of network error (connection refused, timed out, not HTTP), never the answer's body, headers or bytes: otherwise
a webhook pointed at an internal service would read it back to its user.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import hmac
import http
import http.client
import ipaddress
import json
import os
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from scheduler.live.job_states import JobState

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# ---- which events are sent ------------------------------------------------------------------------------------------

# The job events (`job_events.kind`) that change a job's state, each with the state it leaves the job in. A webhook
# gets one request per such event. Not sent: `lost` (a lost run is followed, in the same instant, by `requeued`,
# `failed` or `cancelled`, whose reason then carries the loss's), `cancel_requested` and `requeue_requested` (the job
# is still running until its `cancelled` or `checkpointed`), `adopted`, `prepared`, `resubmitted`, `held`, `released`,
# `time_limit_changed` and `priority_changed` (no change of state).
TIMED_OUT_STATE = "timed_out" if "timed_out" in JobState._value2member_map_ else JobState.FAILED.value
STATE_EVENTS: dict[str, str] = {
    "submitted": JobState.PENDING,
    "placed": JobState.RUNNING,  # given its GPUs: the job is running from here on
    "started": JobState.RUNNING,  # its workers are up (the state stays running)
    "succeeded": JobState.SUCCEEDED,
    "failed": JobState.FAILED,
    "rejected": JobState.FAILED,  # the cluster can never run it
    "cancelled": JobState.CANCELLED,
    "preempted": JobState.PENDING,  # back to the queue
    "requeued": JobState.PENDING,  # a lost run, restarted
    "retrying": JobState.PENDING,  # a failed run, to run again after its backoff
    "checkpointed": JobState.PENDING,  # requeued at a server's shutdown, or on request (`corral requeue`)
    "evicted": JobState.PENDING,  # requeued off a drained node, a faulty GPU, or workers Ray did not start
    "timed_out": TIMED_OUT_STATE,  # ran past its time limit
}
# Whose reason a state change carries along when it follows in the same instant (a lost run's requeue or failure).
CAUSE_EVENTS = ("lost",)

PAYLOAD_TYPE = "job.state_changed"
SIGNATURE_HEADER = "X-Corral-Signature"
SIGNATURE_TOLERANCE_S = 300.0  # what docs/webhooks.md tells receivers to accept, either way of their clock
USER_AGENT = "Corral-Webhooks/1"
MAX_URL = 2048
MAX_DESCRIPTION = 200
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A webhook's signing secret: 256 random bits."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


# ---- what is sent ---------------------------------------------------------------------------------------------------


def payload(*, webhook_id: int, event_id: int, kind: str, at: float, message: str, data: dict[str, Any],
            job: dict[str, Any], old_state: str | None, cause: str | None = None) -> str:
    """The JSON body for one event (compact, keys sorted: the same bytes on every attempt). `job`: its id, name, user
    and team; `old_state`: the state the job's previous state change left it in (None for `submitted`)."""
    reason = f"{cause}; {message}" if cause and message else (cause or message)
    # The run the event names; else 0 for a submission (no run yet), else the job's run when this was queued.
    attempt = data.get("attempt", 0 if kind == "submitted" else job.get("attempt"))
    body = {
        "type": PAYLOAD_TYPE,
        "webhook_id": webhook_id,
        "event_id": event_id,
        "event": kind,
        "at": at,
        "time": datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z"),
        "job": {"id": job["id"], "name": job["name"], "user": job["user"], "team": job["team"]},
        "old_state": old_state,
        "new_state": STATE_EVENTS[kind],
        "reason": reason,
        "exit_code": data.get("exit_code"),
        "attempt": attempt,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)


# ---- signing --------------------------------------------------------------------------------------------------------


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """HMAC-SHA256, in hex, of `<timestamp>.<body>` under the webhook's secret."""
    return hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def signature_header(secret: str, body: bytes, now: float | None = None) -> str:
    """`t=<unix seconds>,v1=<hex>`: the value of `X-Corral-Signature` for one attempt."""
    t = int(time.time() if now is None else now)
    return f"t={t},v1={signature(secret, t, body)}"


def verify(secret: str, header: str, body: bytes, *, tolerance_s: float = SIGNATURE_TOLERANCE_S,
           now: float | None = None) -> bool:
    """Whether `header` (an `X-Corral-Signature` value) signs `body` with `secret`, no more than `tolerance_s` away
    from now. What a receiver runs (docs/webhooks.md has the same, standalone)."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        t = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - t) > tolerance_s:
        return False
    return hmac.compare_digest(signature(secret, t, body), parts.get("v1", ""))


# ---- where requests may go ------------------------------------------------------------------------------------------


class WebhookRefused(ValueError):
    """A URL that may not be called: its message says why, in words a user can act on."""


def _address(text: str) -> IpAddress | None:
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 zone (fe80::1%eth0) is no part of the address
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1: judged as such
    return ip


# An allow entry that names no port allows the ports of plain http and https only: a receiver elsewhere is named with
# its port (`10.0.0.5:8443`) or a range (`10.0.0.0/8:8000-8999`), so allowing a host never opens every service on it.
DEFAULT_PORTS: tuple[tuple[int, int], ...] = ((80, 80), (443, 443))
PortRanges = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class AllowRule:
    """One allow entry: an IP network, a host name or a domain (".example.com"), and the ports it allows."""

    network: IpNetwork | None = None
    name: str = ""  # a host name, or a domain with its leading dot
    ports: PortRanges = DEFAULT_PORTS

    def port_allowed(self, port: int) -> bool:
        return any(lo <= port <= hi for lo, hi in self.ports)

    def name_matches(self, host: str) -> bool:
        if not self.name:
            return False
        if self.name.startswith("."):
            return host == self.name[1:] or host.endswith(self.name)
        return host == self.name


def _split_port(entry: str, raw: str) -> tuple[str, PortRanges]:
    """`host[:ports]` (an IPv6 address or block with a port in brackets: `[fd00::/8]:8443`) as the host and its port
    ranges; no port: DEFAULT_PORTS."""
    if entry.startswith("["):
        host, closed, rest = entry[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            raise ValueError(f"--webhook-allow {raw!r}: an IPv6 address with a port is written [fd00::1]:8443")
        spec = rest[1:] if rest else None
    elif entry.count(":") == 1:  # more than one: an IPv6 address or block, without a port
        host, spec = entry.split(":")
    else:
        host, spec = entry, None
    if spec is None:
        return host, DEFAULT_PORTS
    lo, dash, hi = spec.partition("-")
    try:
        first, last = int(lo), int(hi if dash else lo)
    except ValueError:
        first, last = 0, -1
    if not 1 <= first <= last <= 65535:
        raise ValueError(f"--webhook-allow {raw!r}: a port is a number from 1 to 65535, or a range such as 8000-8999")
    return host, ((first, last),)


def ports_text(ranges: PortRanges) -> str:
    return ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


@dataclass(frozen=True)
class AllowList:
    """The destinations webhooks may call (`corral serve --webhook-allow`), by host and port; empty: webhooks are off.
    `forbidden`: ports never called on any host, with what each is (this server's API, its database, Ray's): set by
    `corral serve` (`forbidding`), they hold whatever the entries allow."""

    rules: tuple[AllowRule, ...] = ()
    entries: tuple[str, ...] = field(default=(), compare=False)  # as given, for messages
    forbidden: tuple[tuple[int, str], ...] = ()

    @classmethod
    def parse(cls, values: Iterable[str]) -> AllowList:
        """From flag values, each one or more entries separated by commas; ValueError names a bad entry."""
        rules: list[AllowRule] = []
        entries: list[str] = []
        for value in values:
            for raw in value.split(","):
                entry = raw.strip().lower()
                if not entry:
                    continue
                entries.append(entry)
                host, ports = _split_port(entry, raw.strip())
                try:
                    net = ipaddress.ip_network(host, strict=False)
                except ValueError:
                    net = None
                if net is not None:
                    rules.append(AllowRule(network=net, ports=ports))
                    continue
                domain = host.startswith(("*.", "."))
                name = host.removeprefix("*.").lstrip(".").rstrip(".")
                if not _host_name(name):
                    raise ValueError(f"--webhook-allow {raw.strip()!r}: not an IP address, a CIDR block (10.0.0.0/8), "
                                     "a host name (hooks.example.com) or a domain (.example.com), each with an "
                                     "optional :port or :range (hooks.example.com:8443, 10.0.0.0/8:8000-8999)")
                rules.append(AllowRule(name=("." if domain else "") + name, ports=ports))
        return cls(tuple(rules), tuple(entries))

    def forbidding(self, ports: dict[int, str]) -> AllowList:
        """This list, with `ports` (port: what listens there) refused on every host."""
        merged = dict(self.forbidden)
        for port, what in ports.items():
            merged.setdefault(port, what)
        return replace(self, forbidden=tuple(sorted(merged.items())))

    @property
    def enabled(self) -> bool:
        return bool(self.rules)

    def text(self) -> str:
        return ", ".join(self.entries)

    def forbidden_why(self, port: int) -> str | None:
        return dict(self.forbidden).get(port)

    def name_allowed(self, host: str, port: int) -> bool:
        host = host.lower().rstrip(".")
        return any(r.name_matches(host) and r.port_allowed(port) for r in self.rules)

    def address_allowed(self, ip: IpAddress, port: int, *, by_name: bool) -> bool:
        if any(r.network is not None and ip.version == r.network.version and ip in r.network and r.port_allowed(port)
               for r in self.rules):
            return True
        return by_name and not (ip.is_link_local or ip.is_unspecified or ip.is_multicast)


# Ports refused on every host (`own_ports`): the well-known ones of the services a Corral cluster runs, besides the
# ones this server knows it uses. Nobody's webhook receiver needs them, and each is a service a request could probe.
WELL_KNOWN_PORTS = {
    5432: "PostgreSQL's (its default port)",
    6379: "Ray's GCS (its default port)",
    8265: "Ray's dashboard (its default port)",
    10001: "Ray's client server (its default port)",
    52365: "Ray's dashboard agent (its default port)",
}
DB_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306}


def own_ports(api_port: int, db_url: str, ray_address: str | None,
              ray_ports: Iterable[int] = ()) -> dict[int, str]:
    """The ports webhooks never call (`AllowList.forbidding`), each with what it is: this server's API, its
    database's (from the store's URL), the GCS port of the Ray address in use, `ray_ports` (what a local Ray
    cluster's processes listen on) and WELL_KNOWN_PORTS."""
    from sqlalchemy.engine import make_url

    ports = {api_port: "this server's API"}
    url = make_url(db_url)
    db_port = url.port or DB_DEFAULT_PORTS.get(url.get_backend_name())
    if db_port:
        ports.setdefault(db_port, "this server's database")
    tail = (ray_address or "").rsplit(":", 1)[-1]
    if ":" in (ray_address or "") and tail.isdigit():
        ports.setdefault(int(tail), "Ray's (the cluster this server uses)")
    for port in ray_ports:
        ports.setdefault(port, "Ray's (the cluster this server uses)")
    for port, what in WELL_KNOWN_PORTS.items():
        ports.setdefault(port, what)
    return ports


def _host_name(name: str) -> bool:
    labels = name.split(".")
    return 0 < len(name) <= 253 and all(
        0 < len(label) <= 63 and label.replace("-", "").replace("_", "").isalnum() and label.isascii()
        and not label.startswith("-") and not label.endswith("-") for label in labels)


@dataclass(frozen=True)
class Target:
    """A URL taken apart for a request: scheme, host (as written, for the Host header and TLS), port, and the request
    target (path and query)."""

    scheme: str
    host: str
    port: int
    target: str


def parse_url(url: str) -> Target:
    """The URL as a request target, or WebhookRefused saying what is wrong with its form."""
    if len(url) > MAX_URL:
        raise WebhookRefused(f"at most {MAX_URL} characters")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise WebhookRefused("must not contain spaces or control characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise WebhookRefused("must be an http:// or https:// URL")
    if not parts.hostname:
        raise WebhookRefused("has no host")
    if parts.username is not None or parts.password is not None:
        raise WebhookRefused("must not hold credentials (user:password@): put a token in the path if the receiver "
                             "needs one, and verify the signature")
    try:
        port = parts.port if parts.port is not None else (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise WebhookRefused("has a port that is not a number from 1 to 65535") from None
    if port == 0:  # (`:0` once fell through to the scheme's port, as a falsy port)
        raise WebhookRefused("has a port that is not a number from 1 to 65535")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port, target)


Resolver = Callable[[str, int], Sequence[str]]


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` has for a TCP connection, in the resolver's order, each once."""
    found: list[str] = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if sockaddr[0] not in found:
            found.append(str(sockaddr[0]))
    return found


def destinations(url: str, allow: AllowList, resolver: Resolver = resolve) -> tuple[Target, list[str]]:
    """The URL's request target and the addresses to connect to, every one allowed; or WebhookRefused. Resolves the
    host (an address written in the URL is its own only address)."""
    where = parse_url(url)
    if not allow.enabled:
        raise WebhookRefused("webhooks are off on this server: an admin allows destinations with "
                             "`corral serve --webhook-allow`")
    why = allow.forbidden_why(where.port)
    if why is not None:
        raise WebhookRefused(f"port {where.port} is {why}: webhooks never call it, on any host")
    literal = _address(where.host)
    by_name = literal is None and allow.name_allowed(where.host, where.port)
    if literal is not None:
        addresses = [str(literal)]
    else:
        try:
            addresses = list(resolver(where.host, where.port))
        except (OSError, UnicodeError) as exc:
            raise WebhookRefused(f"cannot resolve {where.host}: {getattr(exc, 'strerror', None) or exc}") from None
        if not addresses:
            raise WebhookRefused(f"{where.host} has no address")
    for text in addresses:
        ip = _address(text)
        if ip is None or not allow.address_allowed(ip, where.port, by_name=by_name):
            what = (f"{where.host} port {where.port}" if literal is not None else
                    f"{where.host} port {where.port} resolves to {text}, which")
            raise WebhookRefused(f"{what} is not among the destinations this server allows ({allow.text()}; an entry "
                                 "without a port allows 80 and 443): an admin adds one with `corral serve "
                                 "--webhook-allow`")
    return where, addresses


# The API resolves a new URL's host in these threads, waiting at most RESOLVE_WAIT_S: a slow resolver costs the
# request a bounded wait, never a request thread for good.
RESOLVE_WAIT_S = 3.0
_resolvers = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="corral-webhook-resolve")


def bounded_resolver(wait_s: float = RESOLVE_WAIT_S) -> Resolver:
    def run(host: str, port: int) -> Sequence[str]:
        future = _resolvers.submit(resolve, host, port)
        try:
            return future.result(timeout=wait_s)
        except concurrent.futures.TimeoutError:
            raise OSError(f"no answer from the resolver within {wait_s:g} s") from None
    return run


def refusal(url: str, allow: AllowList, resolver: Resolver | None = None) -> str | None:
    """Why `url` may not be a webhook on this server, or None: the API's check when one is created."""
    try:
        destinations(url, allow, resolver or bounded_resolver())
    except WebhookRefused as exc:
        return str(exc)
    return None


def shown(url: str) -> str:
    """The URL as logs show it: scheme, host and port only (a path or query may hold the receiver's token)."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "") + "/..."


# ---- one request ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What one attempt got: the receiver's HTTP status, or `error` when there was none (or it was not a 2xx)."""

    status: int | None
    error: str | None
    duration_ms: float

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class _Pinned(http.client.HTTPConnection):
    """A connection to one checked address, whatever the host name now resolves to; the Host header names the host."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedTls(http.client.HTTPSConnection):
    """As `_Pinned`, over TLS: the certificate is checked against the host name (SNI too), not the address."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def status_line(status: int) -> str:
    """`HTTP 401 Unauthorized`: the code the receiver answered, with the standard phrase for it (never the phrase it
    sent: like its body, that is the answer's own bytes, and a URL pointed at an internal service must not read them
    back to the user)."""
    try:
        return f"HTTP {status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def post(where: Target, addresses: Sequence[str], body: bytes, headers: dict[str, str], timeout_s: float) -> Outcome:
    """POST `body` to the first of `addresses` that takes a connection (the next is tried only when one refuses a
    connection, so a request is never sent twice), all of it within `timeout_s`: connecting, sending, and the
    answer's status and headers. A receiver that trickles its answer is cut off at the deadline too. The outcome says
    the status line or the kind of network error, never anything of the answer's body, headers or raw bytes: what a
    webhook reports must not make it a way to read the services it may reach."""
    start = time.monotonic()
    deadline = start + timeout_s
    error = "no address to connect to"
    for address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            return Outcome(None, f"timed out: no answer within {timeout_s:g} s", _ms(start))
        cls = _PinnedTls if where.scheme == "https" else _Pinned
        conn = cls(where.host, where.port, address, timeout=left)
        expired = threading.Event()

        def cut(conn: http.client.HTTPConnection = conn, expired: threading.Event = expired) -> None:
            expired.set()
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(left, cut)
        timer.daemon = True
        timer.start()
        try:
            try:
                conn.connect()
            except OSError as exc:
                error = _why(exc, expired.is_set(), timeout_s)
                continue
            try:
                conn.request("POST", where.target, body=body, headers=headers)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                return Outcome(None, _why(exc, expired.is_set(), timeout_s), _ms(start))
            if expired.is_set():  # what came before the cut is no answer: the headers may have been cut short
                return Outcome(None, f"timed out: no answer within {timeout_s:g} s", _ms(start))
            status = resp.status
            if 300 <= status < 400:
                return Outcome(status, f"{status_line(status)}: a redirect, which webhooks never follow", _ms(start))
            if not 200 <= status < 300:
                return Outcome(status, status_line(status), _ms(start))
            return Outcome(status, None, _ms(start))
        finally:
            timer.cancel()
            conn.close()
    return Outcome(None, error, _ms(start))


def _why(exc: Exception, expired: bool, timeout_s: float) -> str:
    """The kind of a failed attempt, in words that hold nothing the other end sent (an exception's text may quote
    the bytes it got: http.client's BadStatusLine does)."""
    if expired or isinstance(exc, TimeoutError):
        return f"timed out: no answer within {timeout_s:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, http.client.RemoteDisconnected):  # (before ConnectionResetError: it is one)
        return "not HTTP: the connection closed without an answer"
    if isinstance(exc, http.client.HTTPException):
        return "not HTTP: the answer is not an HTTP status line and headers"
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return "connection reset"
    if isinstance(exc, ssl.SSLCertVerificationError):  # what this side's check found, in OpenSSL's words
        return f"TLS: certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or 'handshake failed'}"  # OpenSSL's reason code (WRONG_VERSION_NUMBER, ...)
    code = getattr(exc, "errno", None)
    if isinstance(exc, OSError) and code:  # this machine's words for it (host unreachable, ...)
        return f"network error: {os.strerror(code).lower()}"
    return f"network error: {type(exc).__name__}"


def _ms(start: float) -> float:
    return (time.monotonic() - start) * 1000.0
