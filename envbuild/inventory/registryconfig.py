"""An image's config (its Env and WorkingDir) read from its registry without pulling it: the image reference
parsed as Docker parses it, the anonymous Bearer token flow, a manifest list or OCI index narrowed to one platform,
then the config blob, every answer size-limited and digest-checked.

`envbuild import` of a Dockerfile reads its FROM image's config here, so that the file's RUN, COPY and ADD run
where Docker runs them and its `$NAME`s read the base's values. Python's urllib only: proxies come from the
environment (HTTPS_PROXY, NO_PROXY), the CA bundle from REQUESTS_CA_BUNDLE or SSL_CERT_FILE, and the whole reading
ends within a few seconds, answered or not, so an offline login node does not wait. Plain HTTP is used only for a
registry on this machine (localhost, a loopback address), as Docker allows for insecure local registries.
Nothing is cached and no credentials are read: a registry that wants a login is reported as not read."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, NamedTuple

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"  # where docker.io's registry API answers
DEFAULT_PLATFORM = "linux/amd64"
TIMEOUT_S = 5.0  # for the whole reading: token, manifests and config
# What an answer may weigh: Docker's own limit for a manifest, and far more than any image config or token needs.
MANIFEST_LIMIT = 4 * 1024 * 1024
CONFIG_LIMIT = 8 * 1024 * 1024
TOKEN_LIMIT = 1024 * 1024

INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
ACCEPT = ", ".join((*INDEX_TYPES, *MANIFEST_TYPES))
# Certificate bundles, as pip (requests) and Python's ssl read them: the first one set is used.
CA_VARIABLES = ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")

_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


class ImageReference(NamedTuple):
    """`python:3.11` as Docker reads it: docker.io/library/python:3.11."""

    registry: str  # docker.io, ghcr.io, localhost:5000
    repository: str  # library/python
    tag: str  # "" when only a digest is given
    digest: str  # sha256:... or ""

    def __str__(self) -> str:
        return f"{self.registry}/{self.repository}" + (f":{self.tag}" if self.tag else "") + \
            (f"@{self.digest}" if self.digest else "")

    @property
    def in_registry(self) -> str:
        """The name the registry knows it by: `library/python:3.11`."""
        return str(self).removeprefix(f"{self.registry}/")

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry


class ImageConfig(NamedTuple):
    """What an image's config says for the commands run on it, and where it was read."""

    reference: ImageReference
    digest: str  # the digest the reference resolved to (a manifest list's, where the tag names one)
    platform: str  # the platform whose manifest was read, e.g. linux/amd64
    env: tuple[tuple[str, str], ...]  # its Env, in order
    working_dir: str  # its WorkingDir; "" where it sets none


class ConfigNotRead(NamedTuple):
    """Why the config was not read (one line) and what to do about it."""

    why: str
    fix: str


# A reader of an image's config by its reference: read_image_config bound to a platform (or a stand-in).
ConfigReader = Callable[[str], "ImageConfig | ConfigNotRead"]


class _Failure(Exception):
    def __init__(self, why: str, fix: str = "") -> None:
        super().__init__(why)
        self.why, self.fix = why, fix


def parse_reference(text: str) -> ImageReference:
    """An image reference (`name[:tag][@digest]`, with a registry host[:port] first where the first part of the name
    has a `.` or `:` or is `localhost`) as Docker normalises it; a ValueError says what is wrong with it."""
    rest = text.removeprefix("docker://")
    rest, _, digest = rest.partition("@")
    if digest and not _DIGEST.match(digest):
        raise ValueError(f"{digest!r} is not a sha256 digest")
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, name = first, remainder
    else:
        registry, name = DOCKER_HUB, rest
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    tag = ""
    if colon > last_slash:
        name, tag = name[:colon], name[colon + 1:]
        if not _TAG.match(tag):
            raise ValueError(f"{tag!r} is not a tag")
    if registry in (DOCKER_HUB, "index.docker.io"):
        registry = DOCKER_HUB
        if "/" not in name:
            name = f"library/{name}"
    if not name or not all(_COMPONENT.match(part) for part in name.split("/")):
        raise ValueError(f"{name!r} is not a repository name (lower-case letters, digits and . _ - between /)")
    return ImageReference(registry, name, tag or ("" if digest else "latest"), digest)


def is_local_host(host: str) -> bool:
    """`localhost`, `127.0.0.1:5000`, `[::1]:5000`: a registry on this machine, the one kind read over plain HTTP."""
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 or host.startswith("[") else host
    name = name.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def read_image_config(reference: str, *, platform: str = DEFAULT_PLATFORM,
                      timeout_s: float = TIMEOUT_S) -> ImageConfig | ConfigNotRead:
    """The config of the image `reference` for `platform` (os/arch[/variant]), read from its registry within
    `timeout_s` for the whole reading (a name the resolver does not answer included); else why not."""
    try:
        image = parse_reference(reference)
    except ValueError as problem:
        return ConfigNotRead(f"{reference} is not an image reference Docker reads: {problem}",
                             "write the image reference in FROM as name[:tag][@sha256:...]")
    outcome: list[ImageConfig | ConfigNotRead] = []
    deadline = time.monotonic() + timeout_s

    def read() -> None:
        try:
            outcome.append(_read(image, platform, deadline, timeout_s))
        except _Failure as failure:
            outcome.append(ConfigNotRead(failure.why, failure.fix or _unreachable_fix(image)))
        except Exception as problem:  # noqa: BLE001 - whatever breaks, import goes on without the config
            outcome.append(ConfigNotRead(f"could not read {image.api_host}: {_one_line(problem)}",
                                         _unreachable_fix(image)))

    # The resolver's wait is not bounded by a socket timeout: the reading runs in a thread that is left behind
    # (a daemon, gone with the process) when it has not answered in time.
    worker = threading.Thread(target=read, name="registry-config", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not outcome:
        return ConfigNotRead(f"could not reach {image.api_host}: no answer within {timeout_s:g} s",
                             _unreachable_fix(image))
    return outcome[0]


def _unreachable_fix(image: ImageReference) -> str:
    return (f"import where {image.api_host} is reachable (a proxy: HTTPS_PROXY; a site's CA: SSL_CERT_FILE), or "
            "write the base's WORKDIR and ENV values into the file (envbuild import --offline skips the reading)")


def _one_line(problem: object) -> str:
    return " ".join(str(problem).split())[:300] or type(problem).__name__


def _read(image: ImageReference, platform: str, deadline: float, timeout_s: float) -> ImageConfig:
    session = _Session(image, deadline, timeout_s)
    wanted = image.digest or image.tag
    body, media_type = session.manifest(wanted)
    digest = image.digest or "sha256:" + hashlib.sha256(body).hexdigest()
    manifest = _json(body, f"the manifest of {image}")
    media_type = manifest.get("mediaType") or media_type
    read_platform = platform
    if media_type in INDEX_TYPES or "manifests" in manifest:
        entry = _platform_entry(manifest, platform, image)
        read_platform = _platform_name(entry.get("platform", {}))
        body, media_type = session.manifest(str(entry.get("digest", "")), verify=True)
        manifest = _json(body, f"the {read_platform} manifest of {image}")
        media_type = manifest.get("mediaType") or media_type
    if media_type not in MANIFEST_TYPES and "config" not in manifest:
        raise _Failure(f"{image}: the registry answered a manifest of type {media_type or 'unknown'} (schema 1 or "
                       "another kind), which holds no image config", "use an image pushed as an OCI or Docker v2 image")
    config_digest = str((manifest.get("config") or {}).get("digest", ""))
    config = _json(session.blob(config_digest), f"the config of {image}")
    settings = config.get("config") or {}
    env = []
    for item in settings.get("Env") or []:
        name, sep, value = str(item).partition("=")
        if sep and name:
            env.append((name, value))
    return ImageConfig(image, digest, read_platform, tuple(env), str(settings.get("WorkingDir") or ""))


def _json(body: bytes, what: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        raise _Failure(f"{what} is not JSON", "check that the registry is an OCI registry") from None
    if not isinstance(data, dict):
        raise _Failure(f"{what} is not a JSON object", "check that the registry is an OCI registry")
    return data


def _platform_name(platform: dict[str, Any]) -> str:
    parts = [str(platform.get("os", "")), str(platform.get("architecture", ""))]
    return "/".join([*parts, str(platform["variant"])] if platform.get("variant") else parts)


def _platform_entry(index: dict[str, Any], platform: str, image: ImageReference) -> dict[str, Any]:
    """The entry of a manifest list / OCI index for `platform` (a variant only where one is asked for)."""
    want_os, _, rest = platform.partition("/")
    want_arch, _, want_variant = rest.partition("/")
    entries = [entry for entry in index.get("manifests") or [] if isinstance(entry, dict)]
    for entry in entries:
        found = entry.get("platform") or {}
        if found.get("os") == want_os and found.get("architecture") == want_arch and \
                (not want_variant or found.get("variant") == want_variant):
            return entry
    offered = sorted({_platform_name(entry.get("platform") or {}) for entry in entries} - {"unknown/unknown", "/"})
    raise _Failure(f"{image} has no {platform} image (it has: {', '.join(offered) or 'none'})",
                   "use an image built for the platform the spec's system runs on")


class _Session:
    """The requests of one reading: one registry, one anonymous token, one deadline."""

    def __init__(self, image: ImageReference, deadline: float, timeout_s: float) -> None:
        self.image, self.deadline, self.timeout_s = image, deadline, timeout_s
        self.local = is_local_host(image.api_host)
        self.base = f"{'http' if self.local else 'https'}://{image.api_host}/v2/{image.repository}"
        self.token = ""
        self.through = "" if self.local else _proxy_named(image.api_host)
        handlers: list[urllib.request.BaseHandler] = [_RedirectHandler()]
        if self.local:  # as Docker: a registry on this machine is asked directly, over plain HTTP
            handlers.append(urllib.request.ProxyHandler({}))
        else:
            handlers += [urllib.request.ProxyHandler(), urllib.request.HTTPSHandler(context=_ssl_context())]
        self.opener = urllib.request.build_opener(*handlers)

    def manifest(self, reference: str, *, verify: bool = False) -> tuple[bytes, str]:
        if verify and not _DIGEST.match(reference):
            raise _Failure(f"the manifest list of {self.image} names no sha256 digest for its entry ({reference!r})",
                           "use an image pushed as an OCI or Docker v2 image")
        body, media_type = self._get(f"{self.base}/manifests/{reference}", MANIFEST_LIMIT, ACCEPT)
        if verify or reference.startswith("sha256:"):
            _check_digest(body, reference, f"the manifest {reference} of {self.image}")
        return body, media_type

    def blob(self, digest: str) -> bytes:
        if not _DIGEST.match(digest):
            raise _Failure(f"the manifest of {self.image} names no sha256 config digest ({digest!r})",
                           "use an image pushed as an OCI or Docker v2 image")
        body, _ = self._get(f"{self.base}/blobs/{digest}", CONFIG_LIMIT, "*/*")
        _check_digest(body, digest, f"the config {digest} of {self.image}")
        return body

    def _get(self, url: str, limit: int, accept: str) -> tuple[bytes, str]:
        for attempt in range(2):
            try:
                return self._fetch(url, limit, accept)
            except urllib.error.HTTPError as answer:
                challenge = answer.headers.get("WWW-Authenticate", "") if answer.headers else ""
                if answer.code == 401 and attempt == 0 and challenge.lower().startswith("bearer "):
                    self.token = self._anonymous_token(challenge)
                    continue
                raise self._http_failure(answer) from None
        raise _Failure(f"{self.image.api_host} refused the anonymous token it gave (401)", _LOGIN_FIX)

    def _fetch(self, url: str, limit: int, accept: str, *, with_token: bool = True) -> tuple[bytes, str]:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise _Failure(f"could not reach {self.image.api_host}: no answer within {self.timeout_s:g} s",
                           _unreachable_fix(self.image))
        request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "envbuild-import"})  # noqa: S310
        if with_token and self.token:  # not carried to where the registry redirects (a CDN for blobs)
            request.add_unredirected_header("Authorization", f"Bearer {self.token}")
        try:
            with self.opener.open(request, timeout=remaining) as response:
                body = response.read(limit + 1)
                media_type = (response.headers.get("Content-Type") or "").split(";")[0].strip()
        except urllib.error.HTTPError:
            raise
        except OSError as problem:
            raise _Failure(f"could not reach {self.image.api_host}{self.through}: "
                           f"{_network_reason(problem, self.timeout_s)}", _unreachable_fix(self.image)) from None
        if len(body) > limit:
            raise _Failure(f"the answer of {url} is larger than {limit // 1024 // 1024} MiB, which no image's "
                           "manifest or config is", "check that the registry is an OCI registry")
        return body, media_type

    def _anonymous_token(self, challenge: str) -> str:
        params = dict(_CHALLENGE_PARAM.findall(challenge))
        realm = params.get("realm", "")
        parsed = urllib.parse.urlsplit(realm)
        if parsed.scheme != "https" and not (parsed.scheme == "http" and is_local_host(parsed.netloc)):
            raise _Failure(f"{self.image.api_host} asks for a token from {realm or 'no realm'}, which is not an "
                           "https URL", _LOGIN_FIX)
        query = {"service": params.get("service", ""),
                 "scope": params.get("scope") or f"repository:{self.image.repository}:pull"}
        url = realm + ("&" if parsed.query else "?") + urllib.parse.urlencode({k: v for k, v in query.items() if v})
        try:
            body, _ = self._fetch(url, TOKEN_LIMIT, "application/json", with_token=False)
        except urllib.error.HTTPError as answer:
            raise _Failure(f"{parsed.netloc} gave no anonymous token for {self.image.repository} "
                           f"({answer.code} {_one_line(answer.reason)}): the image needs a login", _LOGIN_FIX) from None
        granted = _json(body, f"the token answer of {parsed.netloc}")
        token = granted.get("token") or granted.get("access_token")
        if not isinstance(token, str) or not token:
            raise _Failure(f"{parsed.netloc} answered no token", _LOGIN_FIX)
        return token

    def _http_failure(self, answer: Any) -> _Failure:
        where = self.image.api_host
        detail = _registry_error(answer)
        if answer.code in (401, 403):
            kind = "a login" if answer.code == 401 else "access it does not give anonymously"
            return _Failure(f"{where} refused {self.image.in_registry} ({answer.code}{detail}): the image needs {kind}",
                            _LOGIN_FIX)
        if answer.code == 404:
            return _Failure(f"{where} has no image {self.image.in_registry} (404{detail})",
                            "check the image name and tag in FROM (import reads the config of the image the file names)")
        if answer.code == 429:
            return _Failure(f"{where} refused {self.image.in_registry}: too many requests (429{detail})",
                            "import again later, or write the base's WORKDIR and ENV values into the file")
        return _Failure(f"{where} answered {answer.code} {_one_line(answer.reason)}{detail} for {self.image.in_registry}",
                        _unreachable_fix(self.image))


_LOGIN_FIX = ("write the base's WORKDIR and ENV values into the file (import reads no credentials; "
              "envbuild import --offline skips the reading)")


def _registry_error(answer: Any) -> str:
    """`: MANIFEST_UNKNOWN manifest unknown` from an OCI error body, where the answer has one."""
    try:
        errors = json.loads(answer.read(64 * 1024)).get("errors") or []
        first = errors[0]
        return ": " + _one_line(f"{first.get('code', '')} {first.get('message', '')}")
    except Exception:  # noqa: BLE001 - the body is a courtesy; the status says enough
        return ""


def _check_digest(body: bytes, digest: str, what: str) -> None:
    if digest.startswith("sha256:") and "sha256:" + hashlib.sha256(body).hexdigest() != digest:
        raise _Failure(f"{what} does not have its digest: the answer was changed on its way",
                       "import again; a proxy that rewrites answers must leave the registry's alone")


def _network_reason(problem: OSError, timeout_s: float) -> str:
    reason: object = problem.reason if isinstance(problem, urllib.error.URLError) else problem
    if isinstance(reason, socket.gaierror):
        return f"host name not resolved ({reason.strerror})"
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"its certificate is not trusted ({reason.verify_message}; a site's CA: SSL_CERT_FILE)"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    return _one_line(getattr(reason, "strerror", None) or reason)


def _proxy_named(host: str) -> str:
    """` through the proxy http://proxy:3128` where the environment sends https to `host` through one (its
    credentials left out), else ""."""
    proxy = urllib.request.getproxies().get("https", "")
    if not proxy or urllib.request.proxy_bypass(host):
        return ""
    parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return f" through the proxy {parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"


def _ssl_context() -> ssl.SSLContext:
    for variable in CA_VARIABLES:
        location = os.environ.get(variable, "")
        if not location:
            continue
        try:
            if os.path.isdir(location):
                return ssl.create_default_context(capath=location)
            return ssl.create_default_context(cafile=location)
        except (OSError, ssl.SSLError) as problem:
            raise _Failure(f"the CA bundle {location} of {variable} cannot be used ({_one_line(problem)})",
                           f"point {variable} at a PEM file of CA certificates, or unset it") from None
    return ssl.create_default_context()


class _RedirectHandler(urllib.request.HTTPRedirectHandler):
    """Redirects (a blob to its CDN) followed only to https, or to plain http on this machine."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        target = urllib.parse.urlsplit(newurl)
        if target.scheme != "https" and not (target.scheme == "http" and is_local_host(target.netloc)):
            raise _Failure(f"the registry redirected to {target.scheme}://{target.netloc}, which is not https",
                           "use a registry that serves its images over https")
        return super().redirect_request(req, fp, code, msg, headers, newurl)
