"""aiokafka's own transactional tests, run unmodified against a real groupcoord server (conftest.py).

README: test_transactional_producer.py, test_transactional_consumer.py and their helper _testutil.py are
copied byte for byte from aiokafka's repository (https://github.com/aio-libs/aiokafka, tests/) at tag v0.14.0
(commit 672947afe85c91b7d953f0259e69837a711d3246), the version pinned in pyproject.toml; they are unmodified
(upstream files carry no header of their own) and are under aiokafka's Apache License 2.0, copied beside them
as LICENSE. Upstream starts Kafka in docker through its tests/conftest.py, which is not copied: conftest.py
here gives the same fixtures from a ServerProcess. To update, copy the three files from the new tag unchanged.
"""
