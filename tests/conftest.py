# Makes tests/ importable (pytest puts a rootdir conftest's folder on sys.path),
# so test files can `from stages import ...`.
