"""Cluster mode: ZooKeeper membership, the controller, and partition leadership (``zookeeper.connect`` set).

Modules, one concept each:
- ``state``: the data (brokers, replica assignments, leader/ISR/epochs) and its JSON in ZooKeeper, as
  Apache Kafka's ZooKeeper-era ``ZkData`` lays it out. Pure.
- ``assignment``: replica sets for new topics (Kafka's rack-unaware ``assignReplicasToBrokers``). Pure.
- ``election``: leader election and ISR on broker loss/return (Kafka's controller rules). Pure.
- ``replica_state``: a leader's follower progress, high watermark and ISR changes (Kafka's Partition). Pure.
- ``zk``: the only module that imports kazoo; every call has a timeout; fenced writes.
- ``crash_detector``: fast failover, telling a peer whose process is gone (its listener refuses connects)
  from a slow, stopped or partitioned one, and when to remove its registration. Pure.
- ``controller``: the elected controller's reconcile loop (reads ZooKeeper, applies ``election``).
- ``member``: one node's part (register, run for controller, watch partition state, follow leadership).

Nothing here is imported in single-node mode: the runtime imports ``member`` only when
``zookeeper.connect`` is set.
"""
