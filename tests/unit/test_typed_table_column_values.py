"""typed_table.column_array, the one conversion of JSON values to a column's model input: what it takes
for each dtype, and the ContractError naming the column for what the dtype cannot hold (the server's 400)."""

import math

import numpy as np
import pytest

from disttrain_contract import ContractError
from disttrain_contract.typed_table import Column, column_array

TEXT = Column("city", "string", "string", vocabulary=("paris",), counts=(3,))
FLOAT = Column("income", "float", "float32")
COUNT = Column("rooms", "integer", "int64")
FLAG = Column("owner", "boolean", "int64")
FLAG_WITH_HOLES = Column("owner", "boolean", "float32", missing=2)


def test_values_become_the_columns_dtype_with_missing_values_as_the_module_says():
    text = column_array(TEXT, ["paris", None, "", 7, 2.5, 10**30])
    assert text.dtype == object and text.shape == (6, 1)
    assert text.ravel().tolist() == ["paris", "", "", "7", "2.5", "1" + "0" * 30]
    numbers = column_array(FLOAT, [1, "2.5", None, "", 3.25])
    assert numbers.dtype == np.float32 and numbers.ravel()[[0, 1, 4]].tolist() == [1.0, 2.5, 3.25]
    assert math.isnan(numbers[2, 0]) and math.isnan(numbers[3, 0])
    assert column_array(COUNT, [3, 4.0, "5", 2**63 - 1]).ravel().tolist() == [3, 4, 5, 2**63 - 1]
    assert column_array(FLAG, [True, False, 0, 1, "true"]).ravel().tolist() == [1, 0, 0, 1, 1]
    holes = column_array(FLAG_WITH_HOLES, [True, None])
    assert holes[0, 0] == 1.0 and math.isnan(holes[1, 0])


@pytest.mark.parametrize(
    "column,value,words",
    [
        (FLOAT, "a lot", "income: expected a number, got 'a lot'"),
        (FLOAT, True, "income: expected a number, got True"),
        (FLOAT, float("nan"), "income: expected a finite number"),
        (FLOAT, 1e39, "income: 1e+39 is out of float32's range"),
        (FLOAT, 10**400, "out of float32's range"),  # (float() of it would raise OverflowError)
        (FLOAT, "1e400", "income: expected a finite number"),
        (COUNT, None, "rooms: a value is required"),
        (COUNT, 2.5, "rooms: expected a whole number, got 2.5"),
        (COUNT, 2**63, "rooms: 9223372036854775808 is out of int64's range"),
        (COUNT, -1e30, "rooms: -1e+30 is out of int64's range"),
        (FLAG, 2, "owner: expected true, false, 0 or 1, got 2"),
        (TEXT, {"a": 1}, "city: expected a string or null"),
        (TEXT, [1], "city: expected a string or null"),
    ],
)
def test_a_value_the_dtype_cannot_hold_is_a_contract_error_naming_the_column(column, value, words):
    with pytest.raises(ContractError) as refused:
        column_array(column, [value])
    assert words in str(refused.value)
