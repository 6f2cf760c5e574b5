"""The names the server extension shares across its handlers: the authorization resource and the
``web_app.settings`` keys its objects are kept under (one module, so handlers that live apart, like
the dashboard proxy, need not import each other)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .service import GpugeekService

AUTH_RESOURCE = "gpugeek"
SERVICE_SETTING = "gpugeek_service"
WRITES_EXECUTOR_SETTING = "gpugeek_writes_executor"
UNAVAILABLE_SETTING = "gpugeek_unavailable"  # the error that kept the service from starting, answered by every route


def service_of(settings: Mapping[str, Any]) -> GpugeekService:
    """The server's service, or the error that kept it from starting (a registry folder open to
    other users), raised so that the route answers its one line."""
    service = settings.get(SERVICE_SETTING)
    if service is None:
        raise settings[UNAVAILABLE_SETTING]
    return service  # type: ignore[no-any-return]
