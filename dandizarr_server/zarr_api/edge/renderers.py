"""DRF's browsable API, fit for the pages' Content-Security-Policy (no inline style)."""

from __future__ import annotations

from typing import Any

from rest_framework import renderers


class BrowsableAPIRenderer(renderers.BrowsableAPIRenderer):
    """The browsable API without its one inline ``<style>`` (pygments' highlighting rules,
    there when pygments is installed), which the CSP would block and report on every page;
    code in descriptions is then shown unhighlighted."""

    def get_context(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context(*args, **kwargs)
        context["code_style"] = None
        return context
