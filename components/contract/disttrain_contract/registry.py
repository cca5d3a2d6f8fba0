"""Looking an entry of one of the contract's registries (tasks.TASKS, strategies.STRATEGIES) up by what names it.
Standard library only."""


def entry_of(registry, field, name_or_record):
    """registry[name], the name being `name_or_record` itself (a str), its `field` key (a dict: a report,
    a marker, a disttrain.json) or its `field` attribute (an object: a manifest, a Report). KeyError for an
    unknown name."""
    name = name_or_record
    if isinstance(name, dict):
        name = name[field]
    elif not isinstance(name, str):
        name = getattr(name, field)
    return registry[name]
