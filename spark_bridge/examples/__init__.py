"""Example PySpark pipelines over groupcoord (run them with ``python -m spark_bridge.examples.<name>``)."""
