"""ZooKeeper JSON of the cluster state: Kafka's ZkData shapes, round trips, and refusals of bad znodes."""

from __future__ import annotations

import json

import pytest

from coordinator.cluster.state import (
    BrokerInfo,
    ClusterView,
    PartitionState,
    broker_info,
    decode_assignment,
    decode_broker,
    decode_controller,
    decode_controller_epoch,
    decode_state,
    encode_assignment,
    encode_broker,
    encode_controller,
    encode_state,
)


def test_round_trips() -> None:
    b = BrokerInfo(3, "127.0.0.1", 9093, "r1")
    assert decode_broker(3, encode_broker(b, 123)) == b
    assert decode_broker(4, encode_broker(BrokerInfo(4, "h", 1), 1)).rack is None
    assert decode_controller(encode_controller(2, 5)) == 2
    s = PartitionState(2, 7, (2, 1), 4)
    assert decode_state(("t", 0), encode_state(s)) == s
    a = {0: (1, 2, 3), 1: (2, 3, 1)}
    assert decode_assignment("t", encode_assignment(a)) == a


def test_kafka_field_names() -> None:
    state = json.loads(encode_state(PartitionState(1, 2, (1, 3), 5)))
    assert state == {"controller_epoch": 5, "leader": 1, "version": 1, "leader_epoch": 2, "isr": [1, 3]}
    broker = json.loads(encode_broker(BrokerInfo(1, "h", 9), 0))
    assert broker["endpoints"] == ["PLAINTEXT://h:9"] and broker["version"] == 5
    assert json.loads(encode_assignment({0: (1,)}))["partitions"] == {"0": [1]}


def test_every_listener_is_registered_as_kafka_writes_it() -> None:
    """BrokerIdZNode v5 with several listeners: all of them in ``endpoints`` with their protocols; ``host`` and
    ``port`` are the PLAINTEXT endpoint's (null and -1 without one); the decoder finds each per listener name."""
    b = broker_info(2, None, [("INTERNAL", "10.0.0.2", 9094), ("SASL_SSL", "node2", 9093)],
                    {"INTERNAL": "SSL", "SASL_SSL": "SASL_SSL"})
    obj = json.loads(encode_broker(b, 0))
    assert obj["endpoints"] == ["INTERNAL://10.0.0.2:9094", "SASL_SSL://node2:9093"]
    assert obj["listener_security_protocol_map"] == {"INTERNAL": "SSL", "SASL_SSL": "SASL_SSL"}
    assert obj["host"] is None and obj["port"] == -1
    back = decode_broker(2, encode_broker(b, 0))
    assert back == b and back.endpoint("INTERNAL") == ("10.0.0.2", 9094) and back.endpoint("PLAINTEXT") is None
    mixed = broker_info(1, "r", [("PLAINTEXT", "h", 9092), ("SASL_SSL", "h", 9093)],
                        {"PLAINTEXT": "PLAINTEXT", "SASL_SSL": "SASL_SSL"})
    obj = json.loads(encode_broker(mixed, 0))
    assert (obj["host"], obj["port"]) == ("h", 9092)
    assert decode_broker(1, encode_broker(mixed, 0)).endpoint("SASL_SSL") == ("h", 9093)
    # one PLAINTEXT listener is the plain form, as before; an IPv6 host is bracketed in the endpoint
    assert broker_info(3, None, [("PLAINTEXT", "h", 1)], {"PLAINTEXT": "PLAINTEXT"}) == BrokerInfo(3, "h", 1)
    v6 = broker_info(4, None, [("SSL", "::1", 9093)], {"SSL": "SSL"})
    assert json.loads(encode_broker(v6, 0))["endpoints"] == ["SSL://[::1]:9093"]
    assert decode_broker(4, encode_broker(v6, 0)).endpoint("SSL") == ("::1", 9093)
    # Kafka's own registration of a SASL_SSL-only broker decodes
    kafka = (b'{"listener_security_protocol_map":{"CLIENT":"SASL_SSL","BROKER":"SSL"},"endpoints":["CLIENT://k1:9092",'
             b'"BROKER://k1:9091"],"jmx_port":-1,"features":{},"host":null,"timestamp":"1","port":-1,"version":5}')
    k = decode_broker(7, kafka)
    assert k.endpoint("CLIENT") == ("k1", 9092) and k.endpoint("BROKER") == ("k1", 9091)
    with pytest.raises(ValueError, match="mapped listener"):
        decode_broker(7, b'{"listener_security_protocol_map":{},"endpoints":["X://h:1"],"host":null,"port":-1}')


@pytest.mark.parametrize("data", [b"", b"{", b"[]", b'{"leader": "1", "leader_epoch": 0, "isr": [], '
                                  b'"controller_epoch": 1}', b'{"leader": 1, "leader_epoch": 0, "isr": ["a"], '
                                  b'"controller_epoch": 1}', b"\xff"])
def test_bad_state_znode_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_state(("t", 0), data)


def test_bad_epoch_and_assignment() -> None:
    with pytest.raises(ValueError):
        decode_controller_epoch(b"x1")
    with pytest.raises(ValueError):
        decode_assignment("t", b'{"partitions": {"zero": [1]}}')


def test_view_leader_requires_a_live_leader() -> None:
    view = ClusterView({1: BrokerInfo(1, "h", 1)}, 1, 1, {"t": {0: (1, 2), 1: (2, 1)}},
                       {("t", 0): PartitionState(1, 0, (1, 2), 1), ("t", 1): PartitionState(2, 0, (2, 1), 1)})
    assert view.leader("t", 0) == 1
    assert view.leader("t", 1) == -1  # broker 2 is not registered
    assert view.led_by(1, "t") == {0}
