"""A peer certificate's subject as Java's RFC 2253 string (``X500Principal.getName()``), the DN that Kafka's
``ssl.principal.mapping.rules`` see.

Rules: most specific attribute first (the reverse of the certificate's order), ``,`` between RDNs with no
space, ``+`` inside a multi-valued RDN, Java's short names (CN, OU, O, L, ST, C, STREET, DC, UID), other
attributes by the name Python's ``ssl`` gives them (Java would write ``OID=#hex``; mapping rules rarely name
them). Characters RFC 2253 reserves (``,+"\\<>;`` and a leading ``#`` or space, a trailing space) are
escaped with a backslash. No certificate (the client sent none): None.
"""

from __future__ import annotations

from typing import Any

SHORT = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "localityName": "L",
         "stateOrProvinceName": "ST", "countryName": "C", "streetAddress": "STREET", "domainComponent": "DC",
         "userId": "UID"}


def escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def subject_dn(cert: dict[str, Any] | None) -> str | None:
    """``ssl.SSLSocket.getpeercert()``'s dict -> ``CN=alice,OU=apps,O=Example``; None without a certificate."""
    if not cert or "subject" not in cert:
        return None
    rdns = []
    for rdn in reversed(cert["subject"]):
        rdns.append("+".join(f"{SHORT.get(k, k)}={escape(v)}" for k, v in rdn))
    return ",".join(rdns)
