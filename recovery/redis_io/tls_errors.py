"""What to fix when a connection fails in TLS: one hint per failure, naming the setting.

redis-py reports every TLS failure as a ConnectionError whose text carries OpenSSL's reason
(``[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: IP address mismatch ...``);
the same text is what the job shows, followed by the hint from :func:`tls_hint`.
"""

from __future__ import annotations

NAME_MISMATCH = ("Hostname mismatch", "IP address mismatch")
HANDSHAKE_REFUSED = ("EOF occurred in violation of protocol", "certificate required",
                     "tlsv13 alert", "sslv3 alert", "unknown ca", "bad certificate")
NOT_TLS = ("WRONG_VERSION_NUMBER", "wrong version number", "record layer failure")


def tls_hint(error_text: str, url: str) -> str | None:
    """The fix for a TLS-related connection failure to `url`, or None when it is not one."""
    tls = url.startswith("rediss://")
    if "CERTIFICATE_VERIFY_FAILED" in error_text:
        if any(m in error_text for m in NAME_MISMATCH):
            return ("the server's certificate does not name the host of redis.url: connect "
                    "by a name the certificate holds (subjectAltName), or set "
                    "redis.tls_check_hostname = false to skip only the name check")
        return ("the server's certificate is not signed by a CA the job trusts: point "
                "redis.tls_ca_file at the CA that signed it (unset, the system's CAs are used)")
    if tls and any(m in error_text for m in NOT_TLS):
        return ("the server does not speak TLS on this port: use a redis:// URL or the "
                "server's tls-port")
    if tls and "Timeout connecting" in error_text:  # a plain Redis never answers a ClientHello
        return ("no TLS handshake within redis.connect_timeout_s (redis.socket_timeout_s "
                "with redis-py before 8.2): the port may not speak TLS (use a redis:// URL or "
                "the server's tls-port), or the network drops traffic")
    if tls and any(m in error_text for m in HANDSHAKE_REFUSED):
        return ("the server refused the TLS handshake: if it asks for a client certificate "
                "(tls-auth-clients), set redis.tls_cert_file and redis.tls_key_file to a "
                "certificate signed by a CA the server trusts")
    if not tls and "Connection reset by peer" in error_text:
        return ("check redis.url, that the server runs, and the network; a server that speaks "
                "TLS only needs a rediss:// URL")
    return None
