"""Hypothesis strategies for request bodies (imported as `server.fuzz`)."""

from hypothesis import strategies as st


def json_values(keys, max_leaves=80, max_list=9):
    """Any JSON value, nested; object keys are mostly the API's own `keys`, so fields get wrong values."""
    return st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
        lambda children: (
            st.lists(children, max_size=max_list)
            | st.dictionaries(st.sampled_from(keys) | st.text(max_size=5), children, max_size=3)
        ),
        max_leaves=max_leaves,
    )
