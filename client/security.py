"""How the client secures its connections: ``SecurityConfig``, Kafka's client security settings in one value.

Rules:
- One frozen ``SecurityConfig`` per client: ``Cluster`` holds it and gives it (with one ``ssl.SSLContext``
  built from it up front) to every ``BrokerConnection`` it opens, so bootstrap, node, coordinator and fetch
  connections of a Producer/Consumer/AdminClient all use the same settings. The default is PLAINTEXT.
- Settings, with Kafka's meaning: ``security_protocol`` PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL;
  ``sasl_mechanism`` PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 (required for SASL_*: Kafka's default, GSSAPI, is
  not supported) with ``sasl_username``/``sasl_password``; ``ssl_cafile`` (PEM CA bundle; None = the
  system's CAs), ``ssl_certfile`` (PEM client certificate chain, or key and chain in one file),
  ``ssl_keyfile``, ``ssl_password`` (the key's password), ``ssl_check_hostname`` (default True: the node's
  certificate must name the host we connect to). The certificate chain is always verified. As in Kafka,
  SASL settings are ignored by a non-SASL protocol and SSL settings by a non-SSL one. Passwords never
  appear in ``repr``.
- Keyword arguments (``security_settings(...)``): the names above, plus kafka-python's
  ``sasl_plain_username``/``sasl_plain_password``. Producer, Consumer, AdminClient, RangeReader and
  RetryingConsumer take ``security=SecurityConfig(...)`` or these keywords (not both).
- ``from_properties(path)`` reads Kafka's client properties file (``--command-config``; Java properties
  syntax: ``key=value``, ``key: value`` or ``key value``, ``#``/``!`` comments, backslash continuation and
  escapes). Keys:
  ``security.protocol``; ``sasl.mechanism`` (librdkafka: ``sasl.mechanisms``); ``sasl.jaas.config`` with one
  ``...PlainLoginModule`` or ``...ScramLoginModule`` ``required username="..." password="...";`` or
  librdkafka's ``sasl.username``/``sasl.password`` (not both ways); ``ssl.truststore.location`` (PEM) or
  ``ssl.ca.location``; ``ssl.keystore.location`` (PEM with key and certificate) or
  ``ssl.certificate.location`` + ``ssl.key.location``; ``ssl.key.password``; ``ssl.truststore.type`` /
  ``ssl.keystore.type`` (PEM only); ``ssl.endpoint.identification.algorithm`` (``https`` = check the host
  name, empty or ``none`` = do not); ``enable.ssl.certificate.verification`` (true only).
- Unknown keys: the Kafka/librdkafka client keys in ``IGNORED_KEYS`` (timeouts, retries, buffer sizes,
  ``client.id``, ``bootstrap.servers``, TLS protocol/cipher/algorithm choices Python's defaults cover,
  keystore/truststore passwords a PEM file does not use) are ignored. Any other key is a
  ``SecurityConfigError`` naming it and the line: a security setting we would silently drop (a callback
  handler, Kerberos, inline PEM, a JKS store, a typo) must not turn into a connection that is less secure,
  or differently authenticated, than the file says.
- Every mistake is a ``SecurityConfigError`` (a ``KafkaError`` and a ``ValueError``) with the file/option
  and the key; the CLI prints it as one line and exits 2.
"""

from __future__ import annotations

import argparse
import re
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from client.errors import SecurityConfigError
from client.sasl import MECHANISMS

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
KWARG_ALIASES = {"sasl_plain_username": "sasl_username", "sasl_plain_password": "sasl_password"}
SECURITY_KEYWORDS = frozenset({"security_protocol", "sasl_mechanism", "sasl_username", "sasl_password", "ssl_cafile",
                               "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_check_hostname", *KWARG_ALIASES})


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        protocol = str(self.security_protocol).upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise SecurityConfigError(f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)} "
                                      f"(got {self.security_protocol!r})")
        object.__setattr__(self, "security_protocol", protocol)
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, str(value))  # a Path is welcome
        if self.sasl_mechanism is not None:
            object.__setattr__(self, "sasl_mechanism", str(self.sasl_mechanism).upper())
        if self.uses_sasl:
            if self.sasl_mechanism is None:
                raise SecurityConfigError(f"{protocol} needs sasl_mechanism (one of {', '.join(MECHANISMS)})")
            if self.sasl_mechanism not in MECHANISMS:
                raise SecurityConfigError(f"sasl_mechanism must be one of {', '.join(MECHANISMS)} "
                                          f"(got {self.sasl_mechanism!r})")
            if not self.sasl_username or self.sasl_password is None:
                raise SecurityConfigError(f"{protocol} with {self.sasl_mechanism} needs sasl_username and "
                                          "sasl_password")
        if self.uses_tls and self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise SecurityConfigError("ssl_keyfile needs ssl_certfile (the client certificate)")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def describe(self) -> str:
        """Short, password-free: ``SASL_SSL/SCRAM-SHA-512 as alice``."""
        if self.uses_sasl:
            return f"{self.security_protocol}/{self.sasl_mechanism} as {self.sasl_username!r}"
        return self.security_protocol

    # ------------------------------------------------------------------ TLS
    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context (None for PLAINTEXT/SASL_PLAINTEXT); reads the PEM files now."""
        if not self.uses_tls:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # TLS >= 1.2, CERT_REQUIRED, check_hostname
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.options |= ssl.OP_NO_RENEGOTIATION
        ctx.check_hostname = self.ssl_check_hostname
        ctx.verify_mode = ssl.CERT_REQUIRED
        try:
            if self.ssl_cafile is not None:
                ctx.load_verify_locations(cafile=self.ssl_cafile)
            else:
                ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        except (OSError, ssl.SSLError) as e:
            raise SecurityConfigError(f"cannot load the CA file ssl_cafile={self.ssl_cafile}: {_reason(e)}") \
                from None
        if self.ssl_certfile is not None:
            try:
                ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, self.ssl_password)
            except (OSError, ssl.SSLError) as e:
                raise SecurityConfigError(
                    f"cannot load the client certificate ssl_certfile={self.ssl_certfile}"
                    + (f", ssl_keyfile={self.ssl_keyfile}" if self.ssl_keyfile else "") + f": {_reason(e)}") \
                    from None
        return ctx

    # ------------------------------------------------------------------ constructors
    @classmethod
    def resolve(cls, security: SecurityConfig | None, settings: Mapping[str, Any], owner: str) -> SecurityConfig:
        """``security=`` or keyword settings (see the module rules) of ``owner``'s constructor."""
        if not settings:
            return security if security is not None else PLAINTEXT
        if security is not None:
            raise TypeError(f"{owner}() takes security=SecurityConfig(...) or security keywords, not both")
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in settings.items():
            name = KWARG_ALIASES.get(key, key)
            if name not in known:
                raise TypeError(f"{owner}() got an unexpected keyword argument {key!r}")
            values[name] = value
        return cls(**values)

    @classmethod
    def from_properties(cls, path: str | Path) -> SecurityConfig:
        """Kafka's client properties file (``--command-config``); see the module rules."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise SecurityConfigError(f"cannot read the client properties file {path}: {_reason(e)}") from None
        return cls.from_mapping(parse_properties(text, str(path)), source=str(path))

    @classmethod
    def from_mapping(cls, props: Mapping[str, str], source: str = "properties", prefix: str = "",
                     lines: Mapping[str, int] | None = None) -> SecurityConfig:
        """Kafka client properties as a mapping (keys without ``prefix``; ``prefix`` only names them in errors)."""
        lines = getattr(props, "lines", {}) if lines is None else lines

        def where(key: str) -> str:
            line = lines.get(key)
            return f"{source}" + (f" line {line}" if line else "") + f": {prefix}{key}"

        for key in props:
            if key not in SUPPORTED_KEYS and key not in IGNORED_KEYS:
                raise SecurityConfigError(
                    f"{where(key)} is not supported (supported: {', '.join(prefix + k for k in SUPPORTED_KEYS)}; "
                    f"ignored: the Kafka client keys that do not change how a connection is secured)")

        def get(*keys: str) -> str | None:
            given = [(k, props[k].strip()) for k in keys if k in props]
            if len({v for _, v in given}) > 1:
                raise SecurityConfigError(f"{source}: {' and '.join(prefix + k for k, _ in given)} disagree")
            return given[0][1] if given else None

        for key in ("ssl.truststore.type", "ssl.keystore.type"):
            kind = get(key)
            if kind is not None and kind.upper() != "PEM":
                raise SecurityConfigError(f"{where(key)}={kind} is not supported: only PEM files (convert a JKS or "
                                          "PKCS12 store with keytool/openssl)")
        verify = get("enable.ssl.certificate.verification")
        if verify is not None and verify.lower() != "true":
            raise SecurityConfigError(f"{where('enable.ssl.certificate.verification')}={verify} is not supported: "
                                      "the node's certificate is always verified")
        algorithm = get("ssl.endpoint.identification.algorithm")
        if algorithm is not None and algorithm.lower() not in ("", "https", "none"):
            raise SecurityConfigError(f"{where('ssl.endpoint.identification.algorithm')}={algorithm} must be "
                                      "https, or empty (no host name check)")
        username = password = None
        jaas = get("sasl.jaas.config")
        if jaas is not None:
            if "sasl.username" in props or "sasl.password" in props:
                raise SecurityConfigError(f"{source}: give either {prefix}sasl.jaas.config or "
                                          f"{prefix}sasl.username/{prefix}sasl.password, not both")
            try:
                username, password = parse_jaas(jaas)
            except SecurityConfigError as e:
                raise SecurityConfigError(f"{where('sasl.jaas.config')}: {e}") from None
        else:
            username, password = get("sasl.username"), props.get("sasl.password")
        certfile = get("ssl.keystore.location")
        keyfile = None
        if certfile is None:
            certfile, keyfile = get("ssl.certificate.location"), get("ssl.key.location")
            if keyfile is not None and certfile is None:
                raise SecurityConfigError(f"{where('ssl.key.location')} needs {prefix}ssl.certificate.location")
        elif "ssl.certificate.location" in props or "ssl.key.location" in props:
            raise SecurityConfigError(f"{source}: give either {prefix}ssl.keystore.location or "
                                      f"{prefix}ssl.certificate.location/{prefix}ssl.key.location, not both")
        try:
            return cls(security_protocol=get("security.protocol") or "PLAINTEXT",
                       sasl_mechanism=get("sasl.mechanism", "sasl.mechanisms") or None,
                       sasl_username=username, sasl_password=password,
                       ssl_cafile=get("ssl.truststore.location", "ssl.ca.location") or None,
                       ssl_certfile=certfile or None, ssl_keyfile=keyfile or None,
                       ssl_password=props.get("ssl.key.password") or None,
                       ssl_check_hostname=algorithm is None or algorithm.lower() == "https")
        except SecurityConfigError as e:
            raise SecurityConfigError(f"{source}: {_kafka_names(str(e), prefix)}") from None


PLAINTEXT = SecurityConfig()

SUPPORTED_KEYS = (
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.jaas.config", "sasl.username",
    "sasl.password", "ssl.truststore.location", "ssl.ca.location", "ssl.truststore.type", "ssl.keystore.location",
    "ssl.keystore.type", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification",
)
IGNORED_KEYS = frozenset({
    # how long and how often, not how securely
    "bootstrap.servers", "client.id", "client.dns.lookup", "request.timeout.ms", "default.api.timeout.ms",
    "retries", "retry.backoff.ms", "retry.backoff.max.ms", "reconnect.backoff.ms", "reconnect.backoff.max.ms",
    "connections.max.idle.ms", "metadata.max.age.ms", "socket.connection.setup.timeout.ms",
    "socket.connection.setup.timeout.max.ms", "send.buffer.bytes", "receive.buffer.bytes",
    "api.version.request", "socket.timeout.ms",
    # TLS choices Python's defaults already make (TLS >= 1.2, its cipher list, its key/trust managers)
    "ssl.protocol", "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.secure.random.implementation",
    # store passwords: a PEM truststore has none; a PEM keystore's key password is ssl.key.password
    "ssl.truststore.password", "ssl.keystore.password",
})

_NAMES = {"security_protocol": "{p}security.protocol", "sasl_mechanism": "{p}sasl.mechanism",
          "sasl_username and sasl_password": "a username and password ({p}sasl.jaas.config, or {p}sasl.username "
                                             "and {p}sasl.password)",
          "ssl_keyfile": "{p}ssl.key.location", "ssl_certfile": "{p}ssl.certificate.location",
          "ssl_cafile": "{p}ssl.truststore.location"}


def _kafka_names(message: str, prefix: str) -> str:
    """A ``SecurityConfig`` message in the properties' own names."""
    for ours, theirs in _NAMES.items():
        message = message.replace(ours, theirs.replace("{p}", prefix))
    return message


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or getattr(e, "reason", None) or str(e)


# ---------------------------------------------------------------------------- Java properties
class Properties(dict[str, str]):
    """Parsed properties; ``lines`` remembers where each key was (for error messages)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[str, int] = {}


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            n = text[i + 1]
            if n == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2:i + 6]):
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first line number, logical line): continuation lines joined, comments and blank lines dropped."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip(" \t\f")
        if not pending:
            if not line or line[0] in "#!":
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending.append(line[:-1])
            continue
        pending.append(line)
        yield start, "".join(pending)
        pending = []
    if pending:
        yield start, "".join(pending)


def parse_properties(text: str, source: str = "properties") -> Properties:
    """Java ``Properties.load`` syntax (see the module rules); the last of repeated keys wins."""
    props = Properties()
    for number, line in _logical_lines(text):
        i = 0
        while i < len(line) and line[i] not in "=: \t\f":
            i += 2 if line[i] == "\\" else 1
        key = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        key = _unescape(key)
        if not key:
            raise SecurityConfigError(f"{source} line {number}: no key in {line!r}")
        props[key] = _unescape(rest)
        props.lines[key] = number
    return props


# ---------------------------------------------------------------------------- JAAS
_JAAS_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))', re.S)
_FLAGS = ("required", "requisite", "sufficient", "optional")
_MODULES = ("PlainLoginModule", "ScramLoginModule")


def _jaas_tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) with kind "str" (quoted), "word", "=" or ";"."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _JAAS_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            # the position, not the text: it may be part of the password
            raise SecurityConfigError(f"cannot parse the JAAS configuration at character {pos + 1} "
                                      "(an unterminated quote?)")
        quoted, word, eq, semi = m.groups()
        if quoted is not None:
            tokens.append(("str", _unescape(quoted)))
        elif word is not None:
            tokens.append(("word", word))
        else:
            tokens.append((eq or semi, eq or semi))
        pos = m.end()
    return tokens


def parse_jaas(text: str) -> tuple[str, str]:
    """``(username, password)`` of one ``...PlainLoginModule``/``...ScramLoginModule`` entry (Kafka's
    ``sasl.jaas.config``: ``<class> <flag> key="value"... ;``)."""
    tokens = _jaas_tokens(text)
    if not tokens or tokens[0][0] != "word":
        raise SecurityConfigError("expected a login module class name")
    module = tokens[0][1]
    if module.rsplit(".", 1)[-1] not in _MODULES:
        raise SecurityConfigError(f"login module {module} is not supported (only org.apache.kafka.common."
                                  "security.plain.PlainLoginModule and ...scram.ScramLoginModule)")
    if len(tokens) < 2 or tokens[1][0] != "word" or tokens[1][1].lower() not in _FLAGS:
        raise SecurityConfigError(f"expected a control flag ({'/'.join(_FLAGS)}) after {module}")
    options: dict[str, str] = {}
    i = 2
    while i < len(tokens) and tokens[i][0] != ";":
        if (i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "="
                or tokens[i + 2][0] not in ("str", "word")):
            raise SecurityConfigError("expected key=\"value\" options after the control flag")
        options[tokens[i][1]] = tokens[i + 2][1]
        i += 3
    if i < len(tokens) - 1:
        raise SecurityConfigError("only one login module may be configured (text after ';')")
    if options.get("tokenauth", "false").lower() == "true":
        raise SecurityConfigError("delegation tokens (tokenauth=true) are not supported")
    missing = [k for k in ("username", "password") if k not in options]
    if missing:
        raise SecurityConfigError(f"{module} needs {' and '.join(missing)}")
    return options["username"], options["password"]


# ---------------------------------------------------------------------------- CLI
def add_command_config_argument(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--command-config FILE`` (Kafka's name for a client properties file)."""
    parser.add_argument("--command-config", metavar="FILE", default=None,
                        help="Kafka client properties: security.protocol, sasl.mechanism, sasl.jaas.config, "
                             "ssl.truststore.location, ... (default: PLAINTEXT)")
    return parser


def security_from_args(args: argparse.Namespace) -> SecurityConfig:
    """The ``--command-config`` file of a parsed command line (PLAINTEXT without one)."""
    path = getattr(args, "command_config", None)
    return SecurityConfig.from_properties(path) if path else PLAINTEXT


def security_settings(**settings: Any) -> SecurityConfig:
    """``SecurityConfig`` from keyword settings, kafka-python's aliases included."""
    return SecurityConfig.resolve(None, settings, "security_settings")
