"""The ``groupcoord`` Python data source: Spark's Kafka source and sink options over groupcoord's client.

Rules:
- ``GroupcoordDataSource`` only parses and checks options (``spark_bridge.options``) and hands out readers
  and writers; it opens no connection. Source options are checked for every read (batch or stream), sink
  options for every write, each with its own list of valid names. Batch writes take the save mode
  ``append`` only (``spark_bridge.sink`` says why and what Spark itself refuses).
- Spark creates the data source object on the driver for ``schema()`` and the reader/writer factories, and
  pickles the readers/writers to workers: everything reachable from them must pickle (parsed options are
  frozen dataclasses; clients are created lazily and dropped when pickled).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from spark_bridge.arrow import spark_schema
from spark_bridge.options import ReadOptions, as_dict, parse_read, parse_write
from spark_bridge.reader import BatchReader
from spark_bridge.sink import BatchWriter, StreamWriter
from spark_bridge.stream import StreamReader


class GroupcoordDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "groupcoord"

    def _read_options(self, streaming: bool) -> ReadOptions:
        return parse_read(as_dict(self.options), streaming)

    def schema(self) -> str:
        # Spark asks for the schema of reads only; the headers column follows includeHeaders
        value = {k.lower(): v for k, v in as_dict(self.options).items()}.get("includeheaders", "false")
        return spark_schema(str(value).strip().lower() == "true")

    def reader(self, schema: StructType) -> BatchReader:
        return BatchReader(self._read_options(streaming=False))

    def streamReader(self, schema: StructType) -> StreamReader:
        return StreamReader(self._read_options(streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        return BatchWriter(parse_write(as_dict(self.options)), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(parse_write(as_dict(self.options)), schema)
