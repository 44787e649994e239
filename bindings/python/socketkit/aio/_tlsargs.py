# SPDX-License-Identifier: MIT
"""The ``ssl=`` argument of asyncio's calls, for SocketKit's TLS.

asyncio takes an :class:`ssl.SSLContext`; SocketKit's TLS takes a
:class:`~socketkit.TLSSettings`. An SSLContext cannot be read back (its certificate, key
and ALPN list stay inside OpenSSL), so it cannot be turned into settings in general. Three
ways meet:

- a :class:`~socketkit.TLSSettings` is accepted wherever ``ssl=`` is;
- :func:`ssl_context` makes an :class:`SSLContext` (a subclass of :class:`ssl.SSLContext`)
  that carries settings: it passes every ``isinstance(ssl, ssl.SSLContext)`` check of a
  library (aiohttp, websockets) and is read back here, and ``set_alpn_protocols`` on it
  reaches the settings;
- a plain client :class:`ssl.SSLContext` is translated as far as it can be read
  (:func:`settings_from_context`): verification on or off, host-name checking, the trust
  roots it loaded (or the system's), the protocol versions. What cannot be read (a client
  certificate, ALPN) makes it untranslatable: the event loop of
  :func:`socketkit.aio.install` then runs the standard library's TLS over a SocketKit
  connection instead, and the streams API raises TypeError.
"""
from __future__ import annotations

import dataclasses
import ssl as _ssl
from typing import Any, Iterable, Optional, Union

from .._tls import TLSRole, TLSSettings

#: What ``ssl=`` may be.
SSLArgument = Union[None, bool, TLSSettings, _ssl.SSLContext]


class SSLContext(_ssl.SSLContext):
    """An :class:`ssl.SSLContext` that carries SocketKit TLS settings (made by
    :func:`ssl_context`). The standard library can use it too (for its own TLS it is an
    ordinary context: only what :func:`ssl_context` copied into it applies there)."""

    socketkit_settings: TLSSettings

    def set_alpn_protocols(self, alpn_protocols: Iterable[str]) -> None:
        protocols = list(alpn_protocols)
        super().set_alpn_protocols(protocols)
        self.socketkit_settings = dataclasses.replace(self.socketkit_settings, alpn_protocols=protocols)


def ssl_context(settings: TLSSettings) -> SSLContext:
    """An :class:`ssl.SSLContext` carrying `settings`, for libraries that insist on an
    SSLContext: SocketKit's TLS uses the settings. Its own verify_mode and check_hostname
    say what the settings say."""
    settings.check()
    server = _role(settings) == TLSRole.SERVER
    context = SSLContext(_ssl.PROTOCOL_TLS_SERVER if server else _ssl.PROTOCOL_TLS_CLIENT)
    verification = str(getattr(settings.verification, "name", settings.verification)).lower()
    if not server and verification == "none":
        context.check_hostname = False
        context.verify_mode = _ssl.CERT_NONE
    context.socketkit_settings = settings
    if settings.alpn_protocols:
        _ssl.SSLContext.set_alpn_protocols(context, list(settings.alpn_protocols))
    return context


def _role(settings: TLSSettings) -> TLSRole:
    return TLSRole(settings._role)


def settings_from_context(context: _ssl.SSLContext, server_side: bool) -> Optional[TLSSettings]:
    """SocketKit settings saying what `context` says, or None when that cannot be read (a
    server context: its certificate and key cannot be read back)."""
    carried = getattr(context, "socketkit_settings", None)
    if isinstance(carried, TLSSettings):
        return carried
    if server_side:
        return None
    options: Any = {}
    if context.verify_mode == _ssl.CERT_NONE:
        options["verification"] = "none"
    elif not context.check_hostname:
        return None  # the chain verified, the name not: no such setting
    roots = context.get_ca_certs(binary_form=True)
    if roots:
        options["trust_pem"] = "".join(_ssl.DER_cert_to_PEM_cert(der) for der in roots)
    minimum, maximum = context.minimum_version, context.maximum_version
    if minimum not in (_ssl.TLSVersion.MINIMUM_SUPPORTED,) and minimum >= _ssl.TLSVersion.TLSv1_2:
        options["minimum_version"] = int(minimum)
    if maximum not in (_ssl.TLSVersion.MAXIMUM_SUPPORTED,):
        options["maximum_version"] = int(maximum)
    return TLSSettings.client(**options)


def tls_settings(argument: SSLArgument, server_side: bool, server_hostname: Optional[str] = None,
                 handshake_timeout: Optional[float] = None) -> Optional[TLSSettings]:
    """The settings for asyncio's ``ssl=`` (None: no TLS). TypeError when `argument` is an
    SSLContext SocketKit cannot read (see the module)."""
    if argument is None or argument is False:
        return None
    if argument is True:
        if server_side:
            raise ValueError("ssl=True is for clients: a server needs its certificate (TLSSettings.server)")
        settings: Optional[TLSSettings] = TLSSettings.client()
    elif isinstance(argument, TLSSettings):
        settings = argument
    elif isinstance(argument, _ssl.SSLContext):
        settings = settings_from_context(argument, server_side)
        if settings is None:
            raise TypeError("this ssl.SSLContext cannot be read back into SocketKit's TLS settings (a server's "
                            "certificate and key cannot be): pass socketkit.TLSSettings, or "
                            "socketkit.aio.ssl_context(settings)")
    else:
        raise TypeError(f"ssl must be an ssl.SSLContext, socketkit.TLSSettings, True or None, "
                        f"not {type(argument).__name__}")
    assert settings is not None
    changes: Any = {}
    if server_hostname is not None and not server_side:
        changes["peer_name"] = server_hostname
    if handshake_timeout is not None:
        changes["handshake_timeout"] = float(handshake_timeout)
    if server_side and _role(settings) != TLSRole.SERVER:
        raise ValueError("a server needs server TLS settings (TLSSettings.server(...))")
    if not server_side and _role(settings) == TLSRole.SERVER:
        raise ValueError("a client needs client TLS settings, not a server's")
    return dataclasses.replace(settings, **changes) if changes else settings
