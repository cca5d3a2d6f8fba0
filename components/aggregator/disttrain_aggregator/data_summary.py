"""The copier's data statistics, summarised for report.json (the data validation): what a person checks before
trusting the numbers above them in the report: was the data validated, what warned, how big and
how balanced each split is."""

import os

from disttrain_contract import ContractError, read_json, sha256_file

# per split, the figures worth a glance; the full statistics stay in the data directory's stats.json
SPLIT_FIELDS = (
    "examples",
    "label_counts",
    "repeated_inputs",
    "empty_inputs",
    "constant_inputs",
    "pixel_mean",
    "pixel_std",
)


def data_summary(data_dir, manifest):
    """None for a dataset copied before data validation existed (its manifest has no result)."""
    validation = manifest.validation
    if not validation:
        return None
    path = os.path.join(data_dir, validation["stats"])
    if sha256_file(path) != validation["stats_sha256"]:
        raise ContractError(f"{path} does not match the dataset manifest's sha256")
    stats = read_json(path, what="the copier's data statistics")
    splits = {}
    for name, split in stats["splits"].items():
        splits[name] = {key: split[key] for key in SPLIT_FIELDS if key in split}
        if split.get("text_length_tokens"):
            lengths = split["text_length_tokens"]
            splits[name]["text_length_tokens"] = {key: lengths[key] for key in ("p50", "p95", "max")}
    checks = validation["checks"]
    return {
        "passed": validation["passed"],
        "checks": {name: result["status"] for name, result in checks.items()},
        "warnings": validation["warnings"],
        "leaked_duplicates": checks["leakage"].get("duplicates", 0),
        "max_label_skew": validation["max_label_skew"],
        "label_skew": stats["label_skew"]["distance"],
        "splits": splits,
        "stats": path,
        "plot": os.path.join(data_dir, validation["plot"]) if validation.get("plot") else None,
    }
