"""The project's URL routes by name, and a URL of each from named values: what the route walks
(the privacy walk, the hostile-metadata walk) enumerate, so a route added to the project and
not to a walk fails that walk."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from django.urls import URLPattern, URLResolver, get_resolver, reverse


def _patterns(
    patterns: list[URLPattern | URLResolver], namespace: str = ""
) -> Iterator[tuple[str, str]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from _patterns(pattern.url_patterns, inner)
        else:
            yield namespace, str(pattern.name)


def project_routes() -> set[str]:
    """Every route name outside a namespace (the admin's are namespaced)."""
    return {name for namespace, name in _patterns(get_resolver().url_patterns) if not namespace}


def namespaced_routes() -> set[str]:
    """Every route name inside a namespace (the admin's)."""
    return {name for namespace, name in _patterns(get_resolver().url_patterns) if namespace}


def route_url(name: str, values: Mapping[str, str]) -> str:
    """The route's URL, its parameters taken from ``values`` by name."""
    resolver = get_resolver()
    for possibility, _pattern, _defaults, _converters in resolver.reverse_dict.getlist(name):
        for _result, params in possibility:
            return reverse(name, kwargs={p: values[p] for p in params})
    raise AssertionError(f"cannot build a URL for route {name}")
