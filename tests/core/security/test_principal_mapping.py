"""ssl.principal.mapping.rules (coordinator.core.security.principal_mapping), mirroring Kafka's
SslPrincipalMapperTest, and certificate subjects in Java's RFC 2253 form (the expected strings are what
JDK 17's X500Principal.getName() answers for the same DER)."""

from __future__ import annotations

import datetime
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID, ObjectIdentifier

from coordinator.core.security.principal_mapping import (
    NoMatchingRule,
    PrincipalMappingError,
    SslPrincipalMapper,
    rfc2253_from_peercert,
    rfc2253_name,
    rfc2253_subject,
)


def mapper(rules: str | None) -> SslPrincipalMapper:
    return SslPrincipalMapper.from_rules(rules)


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_valid_rules(rules: str) -> None:
    assert mapper(rules).rules


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",  # no final "/"
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    "DEFAULT, garbage",
    "RULE:^CN=(.*$/$1/",  # a pattern that does not compile
])
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(ValueError):
        mapper(rules)


def test_ssl_principal_mapper() -> None:
    m = mapper(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert m.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert m.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert m.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert m.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert m.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


@pytest.mark.parametrize(("expected", "rules"), [
    ("[]", ""),
    ("[DEFAULT]", "DEFAULT"),
    ("[RULE:/]", "RULE://"),
    ("[RULE:/.*]", "RULE:/.*/"),
    ("[RULE:/.*/L]", "RULE:/.*/L"),
    ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
    ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
    ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
    ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
    ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]", "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
    # empty rules are ignored
    ("[]", ",   , , ,      , , ,   "),
    ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
    ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
    ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
    # escape sequences
    ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
    ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
    # rules rule
    ("[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
     "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"),
])
def test_rules_splitting(expected: str, rules: str) -> None:
    assert str(mapper(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_none_means_default() -> None:
    assert str(mapper(None)) == "SslPrincipalMapper(rules = [DEFAULT])"
    assert mapper(None).name("CN=x") == "CN=x"


def test_comma_with_whitespace() -> None:
    m = mapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert m.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_escaped_slash_and_comma_in_a_rule() -> None:
    m = mapper(r"RULE:^CN=([^\/]*)\/(.*)\,O=x$/$2-$1/U, RULE:^CN=(.*)$/u\/$1/")
    assert m.name("CN=a/b,O=x") == "B-A"
    assert m.name("CN=c") == "u/c"


def test_first_matching_rule_wins_and_no_match_fails() -> None:
    m = mapper("RULE:^CN=([^,]+),OU=a.*$/$1-a/, RULE:^CN=([^,]+),.*$/$1-any/")
    assert m.name("CN=x,OU=a,O=o") == "x-a"
    assert m.name("CN=x,OU=b,O=o") == "x-any"
    with pytest.raises(NoMatchingRule, match="No rules apply to O=o"):
        m.name("O=o")
    with pytest.raises(NoMatchingRule):
        mapper("").name("CN=x")  # no rules at all: nothing maps


def test_rule_must_match_the_whole_name_then_replaces_every_match() -> None:
    assert mapper("RULE:CN=([^,]*)/$1/").rules[0].apply("CN=x,O=y") is None  # not the whole name
    assert mapper("RULE:a|ab/X/").name("ab") == "Xb"  # Java's replaceAll takes the leftmost match: "a"
    assert mapper("RULE:b?|ab/-/").name("ab") == "-a--"  # after an empty match Java moves on one character
    assert mapper("RULE:.*/X/").name("abc") == "XX"


def test_replacement_references() -> None:
    assert mapper("RULE:^(.*)$/$1@$2/").name("ab") == "ab@$2"  # no group 2: kept literally
    assert mapper("RULE:^(.*)$/$12x/").name("ab") == "ab2x"  # $12 is $1 then "2"
    assert mapper("RULE:^([^,]+).*$/$0/").name("CN=a,O=b") == "CN=a,O=b"  # $0: the whole match
    assert mapper("RULE:^(a)?b$/[$1]/").name("b") == "[]"  # a group that took no part: nothing
    assert mapper("RULE:^(.*)$/\\$1/").name("ab") == "$1"  # an escaped "$"
    # Kafka's escaping misplaces its second backslash: Java then fails on "No group 6"
    with pytest.raises(PrincipalMappingError, match="No group 6"):
        mapper("RULE:^(.*)$/$5@$6/").name("ab")
    with pytest.raises(PrincipalMappingError, match="No group 1"):
        mapper("RULE:^.*$/$1/").name("ab")  # no group at all: Kafka does not escape
    with pytest.raises(PrincipalMappingError, match="group index is missing"):
        mapper("RULE:^(.*)$/x$/").name("ab")
    with pytest.raises(PrincipalMappingError):
        mapper("RULE:^(.*)$/x$/, DEFAULT").name("anything")  # the error is raised when the rule applies


def test_ascii_classes_and_case() -> None:
    assert mapper("RULE:^CN=(\\w+)$/$1/").rules[0].apply("CN=\u00e9t\u00e9") is None  # Java's \w is ASCII
    assert mapper("RULE:^CN=(.*)$/$1/U").name("CN=stra\u00dfe") == "STRASSE"


# --- subjects -----------------------------------------------------------------------------------------------

A = x509.NameAttribute


@pytest.mark.parametrize(("name", "expected"), [
    (x509.Name([A(NameOID.COUNTRY_NAME, "US"), A(NameOID.ORGANIZATION_NAME, "x"), A(NameOID.COMMON_NAME, "alice")]),
     "CN=alice,O=x,C=US"),
    (x509.Name([A(NameOID.COMMON_NAME, 'a,b=c+d<e>f#g;h"i\\j')]), 'CN=a\\,b\\=c\\+d\\<e\\>f\\#g\\;h\\"i\\\\j'),
    (x509.Name([A(NameOID.COMMON_NAME, "  lead and trail  ")]), "CN=\\ \\ lead and trail\\ \\ "),
    (x509.Name([A(NameOID.COMMON_NAME, "#hash")]), "CN=\\#hash"),
    (x509.Name([A(NameOID.EMAIL_ADDRESS, "alice@example.com"), A(NameOID.COMMON_NAME, "alice")]),
     "CN=alice,1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d"),
    (x509.Name([A(NameOID.SERIAL_NUMBER, "1234"), A(NameOID.TITLE, "boss"), A(NameOID.GIVEN_NAME, "Al")]),
     "2.5.4.42=#0c02416c,2.5.4.12=#0c04626f7373,2.5.4.5=#130431323334"),
    (x509.Name([A(NameOID.DOMAIN_COMPONENT, "com"), A(NameOID.DOMAIN_COMPONENT, "example"),
                A(NameOID.USER_ID, "u1"), A(NameOID.STREET_ADDRESS, "Main St 1"), A(NameOID.LOCALITY_NAME, "Paris"),
                A(NameOID.STATE_OR_PROVINCE_NAME, "IDF"), A(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng")]),
     "OU=eng,ST=IDF,L=Paris,STREET=Main St 1,UID=u1,DC=example,DC=com"),
    (x509.Name([A(NameOID.COMMON_NAME, "\u00fcn\u00efc\u00f6d\u00e9 \u20ac")]), "CN=\u00fcn\u00efc\u00f6d\u00e9 \u20ac"),
    (x509.Name([x509.RelativeDistinguishedName([A(NameOID.COMMON_NAME, "multi"),
                                                A(NameOID.ORGANIZATIONAL_UNIT_NAME, "valued")]),
                x509.RelativeDistinguishedName([A(NameOID.ORGANIZATION_NAME, "o")])]),
     "O=o,CN=multi+OU=valued"),
    (x509.Name([A(ObjectIdentifier("1.2.3.4.5"), "custom"), A(ObjectIdentifier("2.999.1"), "big arc")]),
     "2.999.1=#0c0762696720617263,1.2.3.4.5=#0c06637573746f6d"),
    (x509.Name([]), ""),
])
def test_rfc2253_name(name: x509.Name, expected: str) -> None:
    assert rfc2253_name(name.public_bytes()) == expected


def _raw(tag: int, content: bytes) -> bytes:
    return bytes((tag, len(content))) + content


@pytest.mark.parametrize(("tag", "content", "expected"), [
    (0x13, b"ab,c", "CN=ab\\,c"),  # PrintableString
    (0x14, b"ab,c", "CN=ab\\,c"),  # T61String
    (0x16, b"ab,c", "CN=ab\\,c"),  # IA5String
    (0x1B, b"ab,c", "CN=ab\\,c"),  # GeneralString
    (0x1E, b"\x00b\x00m\x00p", "CN=\\00b\\00m\\00p"),  # BMPString: JDK 17 reads the bytes as UTF-8
    (0x1A, b"vis", "CN=#1a03766973"),  # VisibleString is not a directory string for Java
    (0x1C, b"\x00\x00\x00u", "CN=#1c0400000075"),  # nor UniversalString
    (0x04, b"ab,c", "CN=#040461622c63"),  # an OCTET STRING
    (0x0C, b"bad\xff\xfeutf8\xc3", "CN=bad\ufffd\ufffdutf8\ufffd"),
    (0x0C, b"tab\there\rcr ", "CN=tab\there\rcr\\ "),
])
def test_rfc2253_value_types(tag: int, content: bytes, expected: str) -> None:
    cn = bytes.fromhex("0603550403")
    name = _raw(0x30, _raw(0x31, _raw(0x30, cn + _raw(tag, content))))
    assert rfc2253_name(name) == expected


def _certificate(subject: x509.Name) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    issuer = x509.Name([A(NameOID.COMMON_NAME, "test CA")])
    now = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
            .serial_number(1000).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))


SUBJECT = x509.Name([A(NameOID.COUNTRY_NAME, "US"), A(NameOID.STATE_OR_PROVINCE_NAME, "MD"),
                     A(NameOID.ORGANIZATION_NAME, "Org, Inc."), A(NameOID.ORGANIZATIONAL_UNIT_NAME, "ServiceUsers"),
                     A(NameOID.COMMON_NAME, "Duke"), A(NameOID.EMAIL_ADDRESS, "duke@example.com")])
SUBJECT_RFC2253 = ("1.2.840.113549.1.9.1=#161064756b65406578616d706c652e636f6d,CN=Duke,OU=ServiceUsers,"
                   "O=Org\\, Inc.,ST=MD,C=US")


def test_rfc2253_subject_of_a_der_certificate() -> None:
    cert = _certificate(SUBJECT)
    assert rfc2253_subject(cert.public_bytes(serialization.Encoding.DER)) == SUBJECT_RFC2253
    with pytest.raises(ValueError):
        rfc2253_subject(b"\x30\x03\x02\x01\x01")


def test_rfc2253_from_getpeercert_subject(tmp_path) -> None:
    pem = tmp_path / "cert.pem"
    pem.write_bytes(_certificate(SUBJECT).public_bytes(serialization.Encoding.PEM))
    decoded = ssl._ssl._test_decode_cert(str(pem))  # what getpeercert() answers for this certificate
    assert rfc2253_from_peercert(decoded["subject"]) == SUBJECT_RFC2253
    subject = ((("countryName", "US"),), (("organizationName", "x"),), (("commonName", "alice"),))
    assert rfc2253_from_peercert(subject) == "CN=alice,O=x,C=US"
    with pytest.raises(ValueError):
        rfc2253_from_peercert(((("noSuchAttribute", "x"),),))


def test_subject_then_rules() -> None:
    dn = rfc2253_subject(_certificate(SUBJECT).public_bytes(serialization.Encoding.DER))
    m = mapper("RULE:^.*CN=([^,]+),OU=ServiceUsers.*$/$1/L, DEFAULT")
    assert m.name(dn) == "duke"
