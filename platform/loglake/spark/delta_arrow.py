"""Arrow schemas of Delta tables written with delta-rs (`deltalake`) from Spark's rows, and
a table version's add actions as Arrow gives them.

Spark marks computed columns and nested fields non-null batch by batch, while a Delta
table's schema is fixed at its first write: every field is made nullable, so that all
writes of a table agree on one schema whatever the batch held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from deltalake import DeltaTable


def add_actions(table: DeltaTable) -> list[dict[str, Any]]:
    """The add action of each file of the table's loaded version, flattened (`path`, `size`,
    `partition.<column>`, `num_records`, `min.<column>`, `max.<column>`, `null_count.<column>`)."""
    return pa.table(table.get_add_actions(flatten=True)).to_pylist()


def nullable_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with every field, nested ones too, nullable."""
    return pa.schema([pa.field(f.name, _nullable(f.type), nullable=True) for f in schema])


def _nullable(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(data_type):
        return pa.struct([pa.field(f.name, _nullable(f.type), nullable=True) for f in data_type])
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return pa.list_(pa.field("element", _nullable(data_type.value_type), nullable=True))
    return data_type
