"""Kafka's own admin client manages SCRAM users on the running server (KIP-554): confluent-kafka's
``alter_user_scram_credentials``/``describe_user_scram_credentials`` through the PLAINTEXT listener; a new
user then logs in, Kafka's per-user errors come back for bad iterations and unknown users, and a deleted
user's login fails."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from security_support import bootstrap

from client import AdminClient, SecurityConfig


def login_works(server: Any, pki: Any, user: str, password: str) -> bool:
    sec = SecurityConfig(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256", sasl_username=user,
                         sasl_password=password, ssl_cafile=str(pki.ca))
    try:
        with AdminClient(bootstrap(server, "SASL_SSL"), security=sec, request_timeout_ms=5000) as admin:
            admin.describe_cluster()
        return True
    except Exception:  # noqa: BLE001 - the refusal is the point
        return False


def test_confluent_kafka_manages_scram_users(secured: Any) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient as CkAdmin,
    )
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    server, pki = secured
    admin = CkAdmin({"bootstrap.servers": server.bootstrap})
    user = f"u{uuid.uuid4().hex[:6]}"
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                          b"pw-of-" + user.encode(), b"some-salt-" + user.encode())
    for fut in admin.alter_user_scram_credentials([upsert]).values():
        assert fut.result(10) is None
    described = {u: f.result(10) for u, f in admin.describe_user_scram_credentials([user]).items()}
    infos = described[user].scram_credential_infos
    everyone = admin.describe_user_scram_credentials(None).result(10)  # None: one future of every user
    assert user in everyone and "admin" in everyone
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    assert login_works(server, pki, user, "pw-of-" + user)
    too_few = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 1000),
                                           b"x", b"salt")
    with pytest.raises(KafkaException) as raised:
        for fut in admin.alter_user_scram_credentials([too_few]).values():
            fut.result(10)
    assert "UNACCEPTABLE_CREDENTIAL" in str(raised.value) or "iterations" in str(raised.value), raised.value
    for fut in admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)]).values():
        assert fut.result(10) is None
    assert not login_works(server, pki, user, "pw-of-" + user)
    with pytest.raises(KafkaException) as raised:
        for fut in admin.describe_user_scram_credentials([user]).values():
            fut.result(10)
    assert "RESOURCE_NOT_FOUND" in str(raised.value) or "nonexistent" in str(raised.value), raised.value
