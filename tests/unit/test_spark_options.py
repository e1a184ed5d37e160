"""The connector's option parsing (pure): unknown options name the known ones."""

from __future__ import annotations

import pytest
from pyspark_folio.options import READ_OPTIONS, WRITE_OPTIONS, ReadOptions, WriteOptions

BASE = {"etcd": "127.0.0.1:2379", "topic": "persistent://public/default/t"}


def _lower(options: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in options.items()}  # as Spark hands them over


def test_a_misspelt_read_option_names_the_known_ones():
    with pytest.raises(ValueError) as caught:
        ReadOptions.parse(_lower({**BASE, "startingOffset": "earliest"}))
    text = str(caught.value)
    assert "startingoffset" in text and "did you mean startingOffsets?" in text
    assert all(name in text for name in READ_OPTIONS)


def test_a_misspelt_write_option_names_the_known_ones():
    with pytest.raises(ValueError) as caught:
        WriteOptions.parse(_lower({**BASE, "batchMessage": "10"}))
    text = str(caught.value)
    assert "did you mean batchMessages?" in text
    assert all(name in text for name in WRITE_OPTIONS)


def test_a_write_option_is_unknown_to_the_reader_and_back():
    with pytest.raises(ValueError, match="folio reader"):
        ReadOptions.parse(_lower({**BASE, "gateways": "http://127.0.0.1:1"}))
    with pytest.raises(ValueError, match="folio writer"):
        WriteOptions.parse(_lower({**BASE, "startingOffsets": "earliest"}))


def test_every_known_option_and_spark_own_are_accepted():
    read = ReadOptions.parse(_lower({**BASE, "startingOffsets": "earliest", "failOnDataLoss": "false"}))
    assert not read.fail_on_data_loss
    write = WriteOptions.parse(
        _lower({**BASE, "batchMessages": "10", "path": "x", "checkpointLocation": "/c"})
    )
    assert write.batch_messages == 10
