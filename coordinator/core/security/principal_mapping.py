"""SSL principal mapping, sans-IO: ``ssl.principal.mapping.rules`` (KIP-371, Kafka's ``SslPrincipalMapper``)
and the client certificate's subject in Java's RFC 2253 form, which the rules are written against.

Rules:
- The rules string is split and parsed with Kafka's own regular expressions (``RULE_SPLITTER``,
  ``RULE_PARSER``), so a comma inside a rule's regex stays in it: ``DEFAULT`` or
  ``RULE:<pattern>/<replacement>/`` optionally followed by ``L`` or ``U``; in pattern and replacement a
  backslash escapes the next character (``\\/`` is a slash that does not end the part). Rules are separated
  by a comma and optional spaces; empty rules are ignored; None means ``DEFAULT``. Anything else (``default``,
  ``DEFAULT/L``, a missing final ``/``, garbage after the flag, a pattern ``re`` cannot compile) raises
  ValueError when the config is parsed: the server refuses to start.
- ``SslPrincipalMapper.name(dn)`` tries the rules in order; the first that applies wins. ``DEFAULT`` answers
  the DN unchanged. A ``RULE`` applies when its pattern matches the whole DN; the answer is then Java's
  ``dn.replaceAll(pattern, replacement)`` (every match replaced, ``$n`` a group, ``\\x`` a literal x; a
  ``$n`` beyond the pattern's groups is kept literally, as Kafka's ``escapeLiteralBackReferences`` does),
  lower-cased (``L``) or upper-cased (``U``). No rule applies -> ``NoMatchingRule`` (the connection is
  refused); a replacement Java would reject (``$`` at its end, ``$x``, ``No group``) raises
  ``PrincipalMappingError`` when the rule applies, as Kafka's does.
- Patterns are Java regexes compiled by Python's ``re`` with ``re.ASCII`` (Java's ``\\w``, ``\\d``, ``\\s``,
  ``\\b`` and case folding are ASCII); the common syntax is the same. Java-only syntax (``\\p{..}``,
  ``\\Q..\\E``, ``(?<name>..)``) does not compile: startup refused rather than a different meaning.
- Certificate subjects (``X500Principal.getName()``): the RDNs from the last to the first (most specific
  first), joined by ``,`` with no spaces; a multi-valued RDN's attributes joined by ``+`` in their encoded
  order; CN, C, L, ST, O, OU, STREET, DC and UID by keyword; any other attribute, or a value that is not a
  directory string (Printable, T61, IA5, General, UTF8, BMP), as ``<dotted OID>=#<lower-case hex of the
  value's DER>``. A string value is its content bytes read as UTF-8 (JDK 17's choice, even for BMP and T61
  strings; JDK 25 decodes those by type), with each of ``, = + < > # ; " \\`` escaped by a backslash, NUL
  written ``\\00``, and leading and trailing spaces (and CRs) escaped. Checked against JDK 17's output.
  ``rfc2253_subject(cert_der)`` (the DER certificate, ``getpeercert(binary_form=True)``) and
  ``rfc2253_name(name_der)`` are exact; ``rfc2253_from_peercert(subject)`` (``getpeercert()["subject"]``)
  has only OpenSSL's decoded text: it is exact for keyword attributes holding UTF8, Printable or IA5
  strings, and has to assume the DER type of other attributes (IA5String for emailAddress, PrintableString
  for serialNumber and dnQualifier, UTF8String otherwise) to write their ``#hex``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_RULES = "DEFAULT"

_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)", re.ASCII)
_RULE_PARSER = re.compile(_RULE_PATTERN, re.ASCII)
_BACK_REFERENCE = re.compile(r"\$([0-9]+)")


class PrincipalMappingError(ValueError):
    """The certificate's DN could not be mapped to a principal name (the connection is refused)."""


class NoMatchingRule(PrincipalMappingError):
    """No rule applies to the DN (Kafka's ``SslPrincipalMapper.NoMatchingRule``)."""


def _escape_literal_back_references(replacement: str, groups: int) -> str:
    """Kafka's ``escapeLiteralBackReferences`` (from NiFi): ``$n`` with no group n (after dropping trailing
    digits while above the group count) gets a backslash. As in Kafka, positions come from the unescaped
    text, so a second escape lands one character early per earlier one; kept for the same answers."""
    if groups == 0:
        return replacement
    value = replacement
    for m in _BACK_REFERENCE.finditer(replacement):
        digits = m.group(1)
        if digits.startswith("0"):
            continue
        index = int(digits)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            start = m.start(1)
            value = value[:start - 1] + "\\" + value[start - 1:]
    return value


def _compile_replacement(replacement: str, pattern: re.Pattern[str]) -> tuple[str | int, ...]:
    """Java's ``Matcher.appendReplacement`` syntax -> literal strings and group references (numbers or
    names); ValueError with Java's message for what Java would throw on."""
    parts: list[str | int] = []
    literal: list[str] = []
    i, n, groups = 0, len(replacement), pattern.groups
    while i < n:
        c = replacement[i]
        if c == "\\":
            i += 1
            if i == n:
                raise ValueError("character to be escaped is missing")
            literal.append(replacement[i])
            i += 1
        elif c == "$":
            i += 1
            if i == n:
                raise ValueError("Illegal group reference: group index is missing")
            if literal:
                parts.append("".join(literal))
                literal = []
            if replacement[i] == "{":
                end = replacement.find("}", i)
                if end < 0:
                    raise ValueError("named capturing group is missing trailing '}'")
                name = replacement[i + 1:end]
                if not name:
                    raise ValueError("named capturing group has 0 length name")
                if name not in pattern.groupindex:
                    raise ValueError(f"No group with name {{{name}}}")
                parts.append(pattern.groupindex[name])
                i = end + 1
                continue
            ref = ord(replacement[i]) - 48
            if not 0 <= ref <= 9:
                raise ValueError("Illegal group reference")
            i += 1
            while i < n and "0" <= replacement[i] <= "9":
                longer = ref * 10 + ord(replacement[i]) - 48
                if longer > groups:
                    break
                ref = longer
                i += 1
            if ref > groups:
                raise ValueError(f"No group {ref}")
            parts.append(ref)
        else:
            literal.append(c)
            i += 1
    if literal:
        parts.append("".join(literal))
    return tuple(parts)


def _replace_all(pattern: re.Pattern[str], text: str, template: tuple[str | int, ...]) -> str:
    """Java's ``String.replaceAll``: after an empty match the next search starts one character later (Python's
    ``re.sub`` would instead retry at the same place for a non-empty match)."""
    out: list[str] = []
    kept = start = 0
    while start <= len(text):
        m = pattern.search(text, start)
        if m is None:
            break
        out.append(text[kept:m.start()])
        out.extend(part if isinstance(part, str) else (m.group(part) or "") for part in template)
        kept = m.end()
        start = kept + 1 if m.end() == m.start() else kept
    out.append(text[kept:])
    return "".join(out)


@dataclass(frozen=True, slots=True)
class MappingRule:
    """One rule: ``DEFAULT`` (``pattern`` None) or ``RULE:pattern/replacement/[LU]``."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    to_lower: bool = False
    to_upper: bool = False
    template: tuple[str | int, ...] = ()  # the replacement, compiled
    template_error: str = ""  # why Java's replaceAll would throw, raised when the rule applies

    @classmethod
    def default(cls) -> MappingRule:
        return cls(None)

    @classmethod
    def rule(cls, pattern: str, replacement: str, to_lower: bool = False, to_upper: bool = False
             ) -> MappingRule:
        try:
            compiled = re.compile(pattern, re.ASCII)
        except re.error as e:
            raise ValueError(f"Invalid rule pattern `{pattern}`: {e}") from None
        escaped = _escape_literal_back_references(replacement, compiled.groups)
        try:
            template, error = _compile_replacement(escaped, compiled), ""
        except ValueError as e:
            template, error = (), str(e)
        return cls(compiled, replacement, to_lower, to_upper, template, error)

    @property
    def is_default(self) -> bool:
        return self.pattern is None

    def apply(self, dn: str) -> str | None:
        """The principal name, or None if the rule does not apply to this DN."""
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        if self.template_error:
            raise PrincipalMappingError(self.template_error)
        result = _replace_all(self.pattern, dn, self.template)
        if self.to_lower:
            return result.lower()
        if self.to_upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        """Kafka's ``Rule.toString`` (``RULE:pattern/replacement/L``; the final slash is not shown)."""
        if self.pattern is None:
            return "DEFAULT"
        flag = "/L" if self.to_lower else "/U" if self.to_upper else ""
        return f"RULE:{self.pattern.pattern}/{self.replacement}{flag}"


def _java_trim(text: str) -> str:
    return text.strip("".join(map(chr, range(33))))


def split_rules(rules: str | None) -> list[str]:
    """Kafka's ``splitRules``: the rule strings, empty ones included."""
    text = DEFAULT_RULES if rules is None else rules
    return [m.group(1) for m in _RULE_SPLITTER.finditer(_java_trim(text))]


def parse_rule(text: str) -> MappingRule | None:
    """One rule string -> its rule (None for an empty one); ValueError if invalid."""
    m = _RULE_PARSER.match(text)
    if m is None:
        raise ValueError(f"Invalid rule: {text}")
    if m.end() != len(text):
        raise ValueError(f"Invalid rule: `{text}`, unmatched substring: `{text[m.end():]}`")
    if m.group(1) is not None:
        return MappingRule.default()
    if m.group(2) is not None:
        return MappingRule.rule(m.group(2), m.group(4), m.group(6) == "L", m.group(6) == "U")
    return None


@dataclass(frozen=True, slots=True)
class SslPrincipalMapper:
    rules: tuple[MappingRule, ...]

    @classmethod
    def from_rules(cls, rules: str | None) -> SslPrincipalMapper:
        """Parses ``ssl.principal.mapping.rules`` (None: ``DEFAULT``); ValueError if any rule is invalid."""
        parsed = (parse_rule(text) for text in split_rules(rules))
        return cls(tuple(rule for rule in parsed if rule is not None))

    def name(self, distinguished_name: str) -> str:
        """The principal name for a certificate subject (RFC 2253 form); NoMatchingRule if no rule applies."""
        for rule in self.rules:
            result = rule.apply(distinguished_name)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules [{', '.join(map(str, self.rules))}]")

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"


# --- subjects in Java's RFC 2253 form ----------------------------------------------------------------------

_KEYWORDS = {  # the keywords Java's X500Principal writes in RFC 2253 names
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
_PRINTABLE, _T61, _IA5, _GENERAL, _UTF8, _BMP = 0x13, 0x14, 0x16, 0x1B, 0x0C, 0x1E
_DIRECTORY_STRINGS = frozenset((_PRINTABLE, _T61, _IA5, _GENERAL, _UTF8, _BMP))  # UniversalString is not
_ESCAPED = frozenset(',=+<>#;"\\')

# getpeercert()'s attribute names (OpenSSL's long names) -> OID, and the DER type we assume for its value.
_OPENSSL_NAMES: dict[str, tuple[str, int]] = {
    "commonName": ("2.5.4.3", _UTF8), "countryName": ("2.5.4.6", _PRINTABLE), "localityName": ("2.5.4.7", _UTF8),
    "stateOrProvinceName": ("2.5.4.8", _UTF8), "streetAddress": ("2.5.4.9", _UTF8),
    "organizationName": ("2.5.4.10", _UTF8), "organizationalUnitName": ("2.5.4.11", _UTF8),
    "domainComponent": ("0.9.2342.19200300.100.1.25", _IA5), "userId": ("0.9.2342.19200300.100.1.1", _UTF8),
    "emailAddress": ("1.2.840.113549.1.9.1", _IA5), "serialNumber": ("2.5.4.5", _PRINTABLE),
    "dnQualifier": ("2.5.4.46", _PRINTABLE), "surname": ("2.5.4.4", _UTF8), "title": ("2.5.4.12", _UTF8),
    "description": ("2.5.4.13", _UTF8), "businessCategory": ("2.5.4.15", _UTF8),
    "postalCode": ("2.5.4.17", _UTF8), "name": ("2.5.4.41", _UTF8), "givenName": ("2.5.4.42", _UTF8),
    "initials": ("2.5.4.43", _UTF8), "generationQualifier": ("2.5.4.44", _UTF8),
    "pseudonym": ("2.5.4.65", _UTF8), "organizationIdentifier": ("2.5.4.97", _UTF8),
    "jurisdictionLocalityName": ("1.3.6.1.4.1.311.60.2.1.1", _UTF8),
    "jurisdictionStateOrProvinceName": ("1.3.6.1.4.1.311.60.2.1.2", _UTF8),
    "jurisdictionCountryName": ("1.3.6.1.4.1.311.60.2.1.3", _PRINTABLE),
}
_DOTTED = re.compile(r"[0-9]+(\.[0-9]+)+")


def _tlv(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """One DER element at ``pos`` -> (tag, content start, element end)."""
    if pos + 2 > end:
        raise ValueError("truncated DER")
    tag, size = data[pos], data[pos + 1]
    if tag & 0x1F == 0x1F:
        raise ValueError("high-tag-number DER tags are not expected here")
    pos += 2
    if size & 0x80:
        count = size & 0x7F
        if count == 0 or count > 4 or pos + count > end:
            raise ValueError("bad DER length")
        size = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    if pos + size > end:
        raise ValueError("truncated DER")
    return tag, pos, pos + size


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """The elements inside a constructed element's content -> [(tag, element start, content start, end)]."""
    out = []
    pos = start
    while pos < end:
        tag, content, stop = _tlv(data, pos, end)
        out.append((tag, pos, content, stop))
        pos = stop
    return out


def _oid(content: bytes) -> str:
    if not content:
        raise ValueError("empty OID")
    arcs: list[int] = []
    value = 0
    for byte in content:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if content[-1] & 0x80:
        raise ValueError("truncated OID")
    first = arcs[0]
    head = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    return ".".join(map(str, head + arcs[1:]))


def _escape(value: str) -> str:
    """AVA.toRFC2253String's escaping of a string value."""
    escaped = "".join(("\\" + c) if c in _ESCAPED else "\\00" if c == "\0" else c for c in value)
    lead, trail = 0, len(escaped) - 1
    while lead < len(escaped) and escaped[lead] in " \r":
        lead += 1
    while trail >= 0 and escaped[trail] in " \r":
        trail -= 1
    return "".join(("\\" + c) if (i < lead or i > trail) else c for i, c in enumerate(escaped))


def _ava(oid: str, tag: int, content: bytes, der: bytes) -> str:
    keyword = _KEYWORDS.get(oid)
    if keyword is None or tag not in _DIRECTORY_STRINGS:
        return f"{keyword or oid}=#{der.hex()}"
    return f"{keyword}={_escape(content.decode('utf-8', errors='replace'))}"


def rfc2253_name(name_der: bytes) -> str:
    """A DER ``Name`` (SEQUENCE OF RDN) -> Java's ``X500Principal.getName()``."""
    tag, start, end = _tlv(name_der, 0, len(name_der))
    if tag != 0x30:
        raise ValueError("a Name is a SEQUENCE")
    rdns = []
    for rdn_tag, _, rdn_start, rdn_end in _children(name_der, start, end):
        if rdn_tag != 0x31:
            raise ValueError("an RDN is a SET")
        avas = []
        for ava_tag, _, ava_start, ava_end in _children(name_der, rdn_start, rdn_end):
            parts = _children(name_der, ava_start, ava_end) if ava_tag == 0x30 else []
            if len(parts) != 2 or parts[0][0] != 0x06:
                raise ValueError("an attribute is a SEQUENCE of an OID and a value")
            (_, _, oid_start, oid_end), (value_tag, value_pos, value_start, value_end) = parts
            avas.append(_ava(_oid(name_der[oid_start:oid_end]), value_tag, name_der[value_start:value_end],
                             name_der[value_pos:value_end]))
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def rfc2253_subject(cert_der: bytes) -> str:
    """A DER certificate (``ssl_object.getpeercert(binary_form=True)``) -> its subject as Java writes it."""
    tag, start, end = _tlv(cert_der, 0, len(cert_der))
    if tag != 0x30:
        raise ValueError("a certificate is a SEQUENCE")
    tbs_tag, _, tbs_start, tbs_end = _children(cert_der, start, end)[0]
    if tbs_tag != 0x30:
        raise ValueError("a TBSCertificate is a SEQUENCE")
    fields = _children(cert_der, tbs_start, tbs_end)
    if fields and fields[0][0] == 0xA0:  # [0] EXPLICIT version
        fields = fields[1:]
    if len(fields) < 5:
        raise ValueError("truncated TBSCertificate")
    _, subject_pos, _, subject_end = fields[4]  # serial, signature, issuer, validity, subject
    return rfc2253_name(cert_der[subject_pos:subject_end])


def _der_length(size: int) -> bytes:
    if size < 0x80:
        return bytes((size,))
    body = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes((0x80 | len(body),)) + body


def rfc2253_from_peercert(subject: tuple[tuple[tuple[str, str], ...], ...]) -> str:
    """``getpeercert()["subject"]`` (RDN tuples of (name, value), e.g. ``(("countryName", "US"),)``) ->
    Java's form, e.g. ``CN=alice,O=x,C=US``. Non-keyword attributes are written as ``OID=#hex`` of an assumed
    DER type (see the module's rules); prefer ``rfc2253_subject`` on the DER certificate."""
    rdns = []
    for rdn in subject:
        avas = []
        for attribute, value in rdn:
            oid, tag = _OPENSSL_NAMES.get(attribute, (attribute, _UTF8))
            if oid not in _KEYWORDS and not _DOTTED.fullmatch(oid):
                raise ValueError(f"unknown certificate attribute {attribute!r}")
            content = value.encode()
            avas.append(_ava(oid, tag, content, bytes((tag,)) + _der_length(len(content)) + content))
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))
