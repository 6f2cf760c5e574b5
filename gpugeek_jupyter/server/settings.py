"""The names the server extension shares across its handlers: the authorization resource and the
``web_app.settings`` keys its objects are kept under (one module, so handlers that live apart, like
the dashboard proxy, need not import each other)."""

from __future__ import annotations

AUTH_RESOURCE = "gpugeek"
SERVICE_SETTING = "gpugeek_service"
WRITES_EXECUTOR_SETTING = "gpugeek_writes_executor"
