"""Is a network source there? One short HTTP request per URL, all at once (the executor of CheckReachable).

Any HTTP answer, even 404 or 405, means the host is reachable: what a build needs next is its business.
Proxies come from the environment (https_proxy, no_proxy), as for the tools the build runs.
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def probe(url: str, timeout_s: float) -> str | None:
    """None when `url` answers; else why not, in a few words."""
    if not url.startswith(("https://", "http://")):
        return f"not an http(s) URL: {url}"
    request = urllib.request.Request(url, method="HEAD", headers={"User-Agent": "envbuild-reachability-check"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):  # noqa: S310 - http(s) only, checked above
            return None
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, socket.gaierror):
            return f"host name not resolved ({reason.strerror})"
        if isinstance(reason, TimeoutError):
            return f"no answer within {timeout_s:g} s"
        return str(getattr(reason, "strerror", None) or reason)
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except (OSError, ValueError) as exc:
        return str(exc) or type(exc).__name__


def unreachable(checks: tuple[tuple[str, str], ...], timeout_s: float) -> list[tuple[str, str, str]]:
    """(URL, what it is for, why not) for each source that did not answer."""
    urls = [url for url, _ in checks]
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(urls)))) as pool:
        results = list(pool.map(lambda url: probe(url, timeout_s), urls))
    return [(url, what, why) for (url, what), why in zip(checks, results, strict=True) if why is not None]
